"""What TensorBoard logging costs a training run, measured with and without it in one process.

A Trainer of CONFIG (default configs/demo.yaml, a slice of Multi30k) trains the same steps,
alternating rounds with the metrics log writing to metrics.jsonl alone and to metrics.jsonl
plus the TensorBoard sink (so drift on a shared machine hits both alike). Two ways to see the
cost: the wall-clock step time of the two kinds of rounds (noisy on a shared machine), and the
time spent inside the TensorBoard sink itself, timed around each call, as a share of the step
time (precise). Then the evaluation extras (three dev examples as text and the attention image)
are timed against the evaluation they come with, one part after the other: the work they
are. In a training run the picture is drawn on a thread while the checkpoints are written, and
each evaluation record's `tensorboard_seconds` says how long the extras held the trainer up.

    python -m scripts.bench.tensorboard --threads 2
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from mt.config_file import load_config
from mt.train import tensorboard
from mt.train.evaluation import attention_picture
from mt.train.metrics_log import JsonlSink, MetricsLog
from mt.train.trainer import Trainer
from scripts.common import machine

ROOT = Path(__file__).resolve().parents[2]


class Timed:
    """A sink wrapper that adds up the seconds spent in its calls."""

    def __init__(self, sink: tensorboard.TensorBoardSink) -> None:
        self.sink, self.seconds = sink, 0.0

    def write(self, record: dict) -> None:
        t = time.perf_counter()
        self.sink.write(record)
        self.seconds += time.perf_counter() - t

    def flush(self) -> None:
        t = time.perf_counter()
        self.sink.flush()
        self.seconds += time.perf_counter() - t

    def close(self) -> None:
        self.sink.close()


def record(
    trainer: Trainer, loss: torch.Tensor, norm: torch.Tensor, ntok: int, seconds: float
) -> dict:
    """A log-interval record as the trainer writes it (the same keys and kinds of values)."""
    s = trainer.state
    return {
        "step": s.step,
        "epoch": s.epoch,
        "loss": float(loss) / ntok,
        "nll": float(loss) / ntok,
        "lr": trainer.optimizer.param_groups[0]["lr"],
        "grad_norm": float(norm),
        "tgt_tokens_per_s": ntok / seconds,
        "elapsed": round(s.elapsed, 1),
        "skipped_updates": int(trainer.update.bad_total),
    }


def run_round(trainer: Trainer, log: MetricsLog, groups: list, log_every: int) -> float:
    """Seconds for the steps of `groups`, writing a record every `log_every` steps."""
    start = time.perf_counter()
    for i, group in enumerate(groups, 1):
        t = time.perf_counter()
        trainer.state.step += 1
        loss, _, ntok, norm = trainer.update(group, trainer.state.step)
        if i % log_every == 0:
            log.write(record(trainer, loss, norm, ntok, time.perf_counter() - t))
    log.flush()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "demo.yaml")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20, help="steps per round")
    p.add_argument("--rounds", type=int, default=3, help="rounds per setting, alternating")
    p.add_argument("--log-every", type=int, nargs="+", default=[25, 1])
    p.add_argument("--evals", type=int, default=3, help="evaluations timed with their extras")
    p.add_argument(
        "--weights",
        type=Path,
        help="a checkpoint of CONFIG's model (e.g. a demo run's best.pt): evaluation and the "
        "attention picture then decode real translations, not an untrained model's",
    )
    args = p.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench_tb_"))
    cfg = load_config(
        args.config,
        [
            f"train.threads={args.threads}",
            "train.tensorboard=false",  # the sinks are attached below, round by round
            "data.max_train_examples=4000",
            # Fine-tuning's start: the checkpoint's weights and tokenizer.
            *([f"train.init_from={args.weights}"] if args.weights else []),
        ],
    )
    trainer = Trainer(cfg, folder / "run")
    info = {**machine(), "threads": torch.get_num_threads(), "config": str(args.config)}
    print(json.dumps({"machine": info}), flush=True)
    plan = trainer.train_set.epoch_batches(cfg.train.max_tokens, cfg.train.seed, 0)
    groups = [[trainer.train_set[plan[i % len(plan)]]] for i in range(args.steps + 2)]
    for g in groups[:2]:  # warm-up: allocator, first-call costs
        trainer.state.step += 1
        trainer.update(g, trainer.state.step)
    groups = groups[2:]
    jsonl = JsonlSink(folder / "metrics.jsonl")
    board = Timed(tensorboard.TensorBoardSink(folder / "run", None, cfg, trainer.model))
    results = []
    for every in args.log_every:
        secs = {"jsonl": 0.0, "jsonl+tensorboard": 0.0}
        board.seconds = 0.0
        for _ in range(args.rounds):
            secs["jsonl"] += run_round(trainer, MetricsLog([jsonl]), groups, every)
            secs["jsonl+tensorboard"] += run_round(
                trainer, MetricsLog([jsonl, board]), groups, every
            )
        steps = args.rounds * len(groups)
        step_off, step_on = secs["jsonl"] / steps, secs["jsonl+tensorboard"] / steps
        row = {
            "log_every": every,
            "steps_per_setting": steps,
            "step_s_without": round(step_off, 4),
            "step_s_with": round(step_on, 4),
            "wall_clock_change": round(step_on / step_off - 1, 4),
            "sink_s_per_step": round(board.seconds / steps, 6),
            "sink_share_of_step": round(board.seconds / steps / step_off, 5),
        }
        results.append(row)
        print(json.dumps(row), flush=True)

    sink = board.sink
    parts = {"eval": 0.0, "texts": 0.0, "attention": 0.0, "figure": 0.0, "image": 0.0}
    for i in range(args.evals + 1):  # the first one warms up (imports matplotlib): untimed
        t0 = time.perf_counter()
        evaluation = trainer.evaluate()
        t1 = time.perf_counter()
        examples = trainer.evaluate.examples(evaluation.hypotheses, tensorboard.EXAMPLES)
        sink.write_examples(trainer.state.step, examples)
        t2 = time.perf_counter()
        title, views = trainer.evaluate.attention_views(examples[0][0], trainer.state.step)
        t3 = time.perf_counter()
        figure = attention_picture(title, views)
        t4 = time.perf_counter()
        sink.writer.add_figure("dev/attention", figure, trainer.state.step)
        sink.flush()
        t5 = time.perf_counter()
        if i:
            for key, seconds in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                parts[key] += seconds / args.evals
    extras = sum(v for k, v in parts.items() if k != "eval")
    row = {
        "evaluations": args.evals,
        "dev_sentences": len(trainer.evaluate.sources),
        **{f"{k}_s": round(v, 4) for k, v in parts.items()},
        "extras_share_of_eval": round(extras / parts["eval"], 4),
    }
    print(json.dumps(row), flush=True)
    sink.close()
    if trainer.lock is not None:
        trainer.lock.release()


if __name__ == "__main__":
    main()

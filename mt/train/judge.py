"""Rank 0's evaluations during a run, and what each of them decides.

An evaluation scores the model on the dev sets and the watched sets (mt.train.watch), with the
EMA's weights when there is an EMA; the run's best rule (mt.train.best) decides whether it
becomes `best.pt`, and patience counts the evaluations that did not. Each one writes its step
checkpoint (except the evaluation before the first step, which measures the watched sets'
start values), its record in the metrics log, and then `last.pt`, which the trainer writes
because it holds the optimizer's state (`save_last`). At the end of the run come a last
evaluation (when the last step had none), the averaged checkpoint weighed against `best.pt`,
the decode settings chosen on dev, and which evaluation `best.pt` is, by which rule.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch
from tqdm import tqdm

from mt.config import DecodeConfig, TrainConfig
from mt.train.averaging import Ema, average_at_end, ema_weights
from mt.train.best import BestRule, consider
from mt.train.evaluation import Evaluator
from mt.train.metrics_log import MetricsLog
from mt.train.rotation import Checkpoints
from mt.train.state import TrainState
from mt.train.stop import overfit_note
from mt.train.tensorboard import TensorBoardSink
from mt.train.tune import tune_decode


class Judge:
    """Runs a run's evaluations and keeps what they decide in the run's state, checkpoints and
    metrics log (rank 0 only)."""

    def __init__(
        self,
        rule: BestRule,
        evaluate: Evaluator,
        checkpoints: Checkpoints,
        log: MetricsLog,
        board: TensorBoardSink | None,
        ema: Ema | None,
    ) -> None:
        self.rule = rule  # which evaluation becomes best.pt
        self.evaluate = evaluate
        self.checkpoints = checkpoints
        self.log = log
        self.board = board  # TensorBoard, when on
        self.ema = ema
        self.last_metrics: dict[str, float] = {}  # of the latest evaluation

    def __call__(
        self, s: TrainState, start: float, save_last: Callable[[], None], first: bool = False
    ) -> None:
        """Validate and write checkpoints. The time since `start` counts as training time
        before `last.pt` records it; patience is then a stop rule like the others. `first`:
        the evaluation before the first step of a run that watches sets (the start values of
        the best rule's bounds), which writes no step checkpoint.

        TensorBoard's attention picture is drawn on a thread while `best.pt` and the step
        checkpoint are written; `tensorboard_seconds` is what its texts, attention and picture
        held the trainer up, so their cost shows in every run."""
        with ema_weights(self.ema):  # the EMA, when on, is what is scored and kept
            tick = time.perf_counter()
            evaluation = self.evaluate()
            seconds = {"eval_seconds": round(time.perf_counter() - tick, 2)}
            metrics = evaluation.metrics
            board = 0.0
            if self.board is not None:
                tick = time.perf_counter()
                self.board.show_evaluation(s.step, self.evaluate, evaluation)
                board = time.perf_counter() - tick
            s.elapsed += time.perf_counter() - start
            improved = consider(self.rule, s, s.step, metrics)
            s.bad_evals = 0 if improved else s.bad_evals + 1
            s.last_eval_step = s.step
            note = overfit_note(s, metrics["valid_nll"]) if "valid_nll" in metrics else None
            if improved:
                self.checkpoints.save("best.pt", s.step, metrics=metrics)
            if not first:
                self.checkpoints.save_step(s.step)
        if self.board is not None:
            tick = time.perf_counter()
            self.board.wait()
            seconds["tensorboard_seconds"] = round(board + time.perf_counter() - tick, 3)
        ruled = {"admitted": self.rule.admits(metrics, s.watch_start)} if self.rule.bounds else {}
        self.log.write(
            {
                "step": s.step,
                "epoch": s.epoch,
                "elapsed": round(s.elapsed, 1),
                **{k: round(v, 4) for k, v in metrics.items()},
                **seconds,
                **ruled,  # whether the best rule's bounds let it become best.pt
            }
        )
        self.last_metrics = {k: round(v, 4) for k, v in metrics.items()}  # as logged
        save_last()
        shown = " ".join(f"{k} {v:.3f}" for k, v in metrics.items())
        tqdm.write(f"step {s.step}: {shown} ({seconds['eval_seconds']:.1f} s)")
        if note:
            tqdm.write(note)
        if first and self.rule.bounds:
            rule = self.rule.describe(s.watch_start)
            self.log.write({"step": s.step, "best_rule": rule})
            tqdm.write(f"best.pt: {rule}")

    def finish(
        self,
        s: TrainState,
        t: TrainConfig,
        decode: DecodeConfig,
        model: torch.nn.Module,
        save_last: Callable[[], None],
    ) -> None:
        """The last evaluation (unless this step had one), averaging (best.pt the better of
        the two), decode settings chosen on dev, and which evaluation best.pt is."""
        if s.last_eval_step != s.step:
            self(s, time.perf_counter(), save_last)
        if t.average_last:
            scores, better = average_at_end(
                self.checkpoints,
                model,
                t.average_last,
                lambda: self.evaluate().metrics,
                s,
                lambda metrics: self.rule.admits(metrics, s.watch_start),
            )
            self.log.write({"step": s.step, **{f"averaged_{k}": v for k, v in scores.items()}})
            if better:
                save_last()  # its best score is the average's now
        if t.tune_beam or t.tune_alpha:
            best = self.checkpoints.run_dir / "best.pt"
            self.log.write(tune_decode(t, decode, best, self.evaluate, s.step))
        if t.watch and s.best_step >= 0:  # which evaluation is best.pt, and by which rule
            rule = self.rule.describe(s.watch_start)
            self.log.write({"step": s.step, "best_step": s.best_step, "best_rule": rule})
            tqdm.write(f"best.pt: step {s.best_step}, {rule}", file=sys.stderr)

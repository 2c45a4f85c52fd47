"""The training loop: from a config to checkpoints in a run directory.

The run directory holds everything a run makes: the tokenizer (`spm*.model`), the resolved
`config.yaml`, `metrics.jsonl` (one JSON object per log interval and per evaluation), and the
checkpoints `last.pt` (with the full training state), `best.pt` (best dev BLEU) and the last
`keep_last` step checkpoints. `--resume` continues from `last.pt` with the same model,
optimizer, scaler, RNG and data position, so a resumed run follows the uninterrupted one.

Dev BLEU needs a decoder, so this module uses `mt.decode` and `mt.metrics` for evaluation only.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import random
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from mt import checkpoint
from mt.batching import Batch, shard, token_batches
from mt.config import Config, DecodeConfig, save_config
from mt.data.corpus import read_parallel
from mt.data.loader import TrainingSet, collate_store, iterate
from mt.data.prepare import prepare
from mt.decode.translator import Translator
from mt.device import autocast, resolve_device, resolve_precision
from mt.errors import EXIT_DIVERGED, MtError
from mt.metrics import bleu
from mt.progress import stderr_is_terminal
from mt.tokenizer import PAD
from mt.train import distributed, finetune
from mt.train.loss import label_smoothed_loss
from mt.train.rundir import RunLock, lock_run_dir
from mt.train.schedule import learning_rate


@dataclass
class TrainState:
    """Where a run is; saved in `last.pt` so `--resume` continues at the same point."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of the current epoch already consumed
    elapsed: float = 0.0  # seconds of training so far, across resumes
    best_score: float = -math.inf  # dev BLEU, or minus validation loss without BLEU
    bad_evals: int = 0
    last_eval_step: int = -1


def _strict(value: Any) -> Any:
    """JSON has no NaN or Infinity: a non-finite number is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLog:
    """Appends one JSON object per line to `metrics.jsonl` (kept across resumes).

    Strict JSON (`null` for a non-finite value), so any JSON parser reads every line.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps({k: _strict(v) for k, v in record.items()}, allow_nan=False)
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as err:
            raise MtError(f"{self.path}: cannot write metrics ({err.strerror or err})") from None


def _refuse_finished_run(run_dir: Path, resume: bool) -> None:
    if not resume and (run_dir / "last.pt").exists():
        raise MtError(
            f"{run_dir}: already holds a run (last.pt); pass --resume to continue it "
            "or --run-dir for a new one"
        )


def _rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


class Trainer:
    def __init__(self, cfg: Config, run_dir: Path, resume: bool = False) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.lock: RunLock | None = None  # rank 0 holds the run directory's lock
        t = cfg.train
        if t.threads:
            torch.set_num_threads(t.threads)
        self.dist, self.device = distributed.init(resolve_device(t.device, "train.device"))
        self.precision = resolve_precision(t.precision, self.device)
        torch.manual_seed(t.seed + self.dist.rank)  # DDP copies rank 0's weights; dropout differs
        random.seed(t.seed)

        # Rank 0 makes the run directory, tokenizer and token stores; the others then map them.
        d = cfg.data
        # Fine-tuning (train.init_from): the checkpoint's model config and tokenizer.
        self.init = finetune.load_init(cfg, run_dir, resume, log=self.dist.main)
        for turn in (True, False):
            if self.dist.main == turn:
                if turn:
                    self.lock = lock_run_dir(run_dir, "train")
                    _refuse_finished_run(run_dir, resume)
                    finetune.write_tokenizer(self.init, run_dir)
                prepared = prepare(cfg, run_dir, build=turn, log=turn)
            distributed.barrier(self.dist)
        self.tokenizer = prepared.tokenizer
        self.train_set = TrainingSet(prepared.train, prepared.weights)
        self.valid_data = prepared.valid
        self.valid_src, self.valid_ref = read_parallel(d, d.valid, d.max_valid_examples)

        self.model = checkpoint.build_model(cfg, self.tokenizer).to(self.device)
        finetune.init_model(self.init, self.model, t.freeze)  # weights, then train.freeze
        self.net: torch.nn.Module = self.model  # what training calls: the DDP wrapper if any
        self.optimizer = torch.optim.Adam(
            [p for p in self.model.parameters() if p.requires_grad],  # not train.freeze's
            lr=learning_rate(1, t, cfg.model),
            betas=(t.optimizer_betas[0], t.optimizer_betas[1]),
            eps=t.optimizer_eps,
            weight_decay=t.weight_decay,
            fused=True,  # one kernel for all parameters: ~3x faster steps than the default on CPU
        )
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        self.bad_run = torch.zeros((), dtype=torch.long, device=self.device)
        self.bad_total = torch.zeros((), dtype=torch.long, device=self.device)
        self.state = TrainState()
        self._steps_per_epoch = 0
        if resume and (run_dir / "last.pt").exists():
            self._restore(run_dir / "last.pt")
            if self.dist.active:  # last.pt holds rank 0's RNG: give each rank its own stream
                torch.manual_seed(t.seed + self.dist.rank + 100_003 * self.state.step)
        if self.dist.active:
            ids = [self.device.index] if self.device.type == "cuda" else None
            # The only buffer is the constant sinusoid table: nothing to broadcast each step.
            self.net = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=ids, broadcast_buffers=False
            )
        if t.compile:  # recompiles once when batch shapes first change, then shapes are dynamic
            self.net = torch.compile(self.net)
        if self.dist.main:
            save_config(cfg, run_dir / "config.yaml")
        self.log = MetricsLog(run_dir / "metrics.jsonl")
        if self.init is not None:  # fine-tuning: the start step (and optimizer if kept)
            write = self.log.write if self.dist.main else None
            self.state.step = finetune.start(self.init, self.optimizer, self.scaler, write)

    # -- checkpoints -------------------------------------------------------------------------

    def _restore(self, path: Path) -> None:
        data = checkpoint.load(path)
        if data.get("train_state") is None:
            raise MtError(f"{path}: holds no training state to resume from")
        if data["config"]["model"] != asdict(self.cfg.model):
            raise MtError(f"{path}: model config differs from the one being resumed")
        ts = data["train_state"]
        self.model.load_state_dict(data["model"])
        self.optimizer.load_state_dict(ts["optimizer"])
        self.scaler.load_state_dict(ts["scaler"])
        _set_rng_state(ts["rng"], self.device)
        self.state = TrainState(**ts["state"])

    def _save(self, path: Path, with_state: bool, **extra: Any) -> None:
        finite = torch.stack([torch.isfinite(p).all() for p in self.model.parameters()]).all()
        if not bool(finite):  # never replace a good checkpoint with a broken model
            raise MtError(
                f"{path}: not written: the model has non-finite weights at step {self.state.step}",
                EXIT_DIVERGED,
            )
        train_state = None
        if with_state:
            train_state = {
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict(),
                "rng": _rng_state(self.device),
                "state": asdict(self.state),
            }
        data = checkpoint.payload(
            self.cfg,
            self.tokenizer,
            self.model,
            step=self.state.step,
            train_state=train_state,
            **extra,
        )
        checkpoint.save(data, path)

    def _step_checkpoints(self) -> list[Path]:
        found = sorted(
            self.run_dir.glob("checkpoint_*.pt"), key=lambda p: int(p.stem.split("_")[1])
        )
        return found

    def _save_step_checkpoint(self) -> None:
        if not self.cfg.train.keep_last:
            return
        self._save(self.run_dir / f"checkpoint_{self.state.step}.pt", with_state=False)
        for old in self._step_checkpoints()[: -self.cfg.train.keep_last]:
            old.unlink(missing_ok=True)

    # -- evaluation --------------------------------------------------------------------------

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Validation loss (teacher forced) and greedy dev BLEU."""
        self.model.eval()
        loss_sum = nll_sum = 0.0
        ntok = 0
        data = self.valid_data
        sizes = data.sizes  # per pair: longer side + EOS
        fits = np.nonzero(sizes <= self.cfg.model.max_positions)[0]  # longer: no positions
        for idx in token_batches(sizes, self.cfg.train.max_tokens, items=fits):
            b = collate_store(data, idx).to(self.device)
            with autocast(self.device, self.precision):
                logits = self.model(b.src, b.tgt_in)
            loss, nll = label_smoothed_loss(logits, b.tgt_out, self.cfg.train.label_smoothing, PAD)
            loss_sum += float(loss)
            nll_sum += float(nll)
            ntok += b.tgt_tokens
        out = {
            "valid_loss": loss_sum / ntok,
            "valid_nll": nll_sum / ntok,
            "valid_ppl": math.exp(min(nll_sum / ntok, 50.0)),
        }
        if self.cfg.train.eval_bleu:
            dcfg = DecodeConfig(
                beam=1,
                nbest=1,
                max_len_a=self.cfg.decode.max_len_a,
                max_len_b=self.cfg.decode.max_len_b,
                max_tokens=self.cfg.decode.max_tokens,
            )
            translator = Translator(
                self.model,
                self.tokenizer,
                dcfg,
                self.device,
                greedy=True,
                protect=self.cfg.data.protect,  # a model that learned placeholders uses them
            )
            with autocast(self.device, self.precision):
                hyps = [t.text for t in translator.translate_lines(self.valid_src)]
            out["dev_bleu"] = bleu(hyps, self.valid_ref)
        self.model.train()
        return out

    def _evaluate_and_save(self, start: float) -> None:
        """Validate and write checkpoints (rank 0). The time since `start` counts as training
        time before `last.pt` records it; patience is then a stop rule like the others."""
        s = self.state
        metrics = self.validate()
        s.elapsed += time.perf_counter() - start
        score = metrics.get("dev_bleu", -metrics["valid_loss"])
        improved = score > s.best_score
        if improved:
            s.best_score, s.bad_evals = score, 0
        else:
            s.bad_evals += 1
        s.last_eval_step = s.step
        self.log.write(
            {
                "step": s.step,
                "epoch": s.epoch,
                "elapsed": round(s.elapsed, 1),
                **{k: round(v, 4) for k, v in metrics.items()},
            }
        )
        if improved:
            self._save(self.run_dir / "best.pt", with_state=False, metrics=metrics)
        self._save_step_checkpoint()
        self._save(self.run_dir / "last.pt", with_state=True)
        tqdm.write(f"step {s.step}: " + " ".join(f"{k} {v:.3f}" for k, v in metrics.items()))

    # -- the loop ----------------------------------------------------------------------------

    def _update(self, group: list[Batch]) -> tuple[torch.Tensor, torch.Tensor, int]:
        """One optimizer step over `group` (gradient accumulation), loss per target token."""
        t = self.cfg.train
        lr = learning_rate(self.state.step + 1, t, self.cfg.model)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        ntok = sum(b.tgt_tokens for b in group)
        scale: float | torch.Tensor = 1.0 / ntok
        if self.dist.active:
            # DDP averages gradients over ranks, so scale by world / global tokens to get the
            # gradient of the loss per target token of the whole global batch. The count stays
            # on the device: no host sync per step.
            tok = torch.tensor(float(ntok), device=self.device)
            scale = self.dist.world / distributed.all_sum(self.dist, tok)
        loss_sum = torch.zeros((), device=self.device)
        nll_sum = torch.zeros((), device=self.device)
        for i, b in enumerate(group):
            b = b.to(self.device)
            last = i == len(group) - 1
            sync = contextlib.nullcontext() if last or not self.dist.active else self.net.no_sync()
            with sync:
                with autocast(self.device, self.precision):
                    logits = self.net(b.src, b.tgt_in)
                loss, nll = label_smoothed_loss(logits, b.tgt_out, t.label_smoothing, PAD)
                self.scaler.scale(loss * scale).backward()
            loss_sum += loss.detach()
            nll_sum += nll.detach()
        self.scaler.unscale_(self.optimizer)
        params = [p for p in self.model.parameters() if p.grad is not None]
        if t.clip_norm:
            norm = torch.nn.utils.clip_grad_norm_(params, t.clip_norm)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        # A non-finite loss or gradient: skip the update on the device (fused Adam reads
        # `found_inf`), with no host sync; fp16's scaler does the same with its own flag.
        bad = ~torch.isfinite(norm)
        if not self.scaler.is_enabled():
            self.optimizer.found_inf = bad.float()
            self.optimizer.grad_scale = None
        self.bad_run = (self.bad_run + 1) * bad  # updates skipped in a row
        self.bad_total += bad
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        return loss_sum, nll_sum, ntok

    def _check_divergence(self) -> None:
        """Stop (saving the last good state) once `max_bad_updates` were skipped in a row."""
        t, s = self.cfg.train, self.state
        run = int(self.bad_run)
        if run < t.max_bad_updates:
            return
        if self.dist.main:
            self._save(self.run_dir / "last.pt", with_state=True)
        raise MtError(
            f"train: stopped at step {s.step}: {run} updates in a row had a non-finite loss or "
            f"gradient (train.max_bad_updates {t.max_bad_updates}); every one was skipped, so "
            f"{self.run_dir / 'last.pt'} holds finite weights. Lower train.lr / train.lr_scale "
            "or set train.clip_norm, then --resume",
            EXIT_DIVERGED,
        )

    def _eta(self, seconds_per_step: float, batches_left: int) -> tuple[float, str]:
        """Seconds to the first stop rule that will fire, and its name."""
        t, s = self.cfg.train, self.state
        options = [((t.max_steps - s.step) * seconds_per_step, "max_steps")]
        if t.max_minutes:
            options.append((60 * t.max_minutes - s.elapsed, "max_minutes"))
        if t.max_epochs:
            per_epoch = max(self._steps_per_epoch, 1)
            steps = batches_left / t.accum_steps + (t.max_epochs - s.epoch - 1) * per_epoch
            options.append((steps * seconds_per_step, "max_epochs"))
        return min(options)

    def _stop_reason(self) -> str | None:
        t, s = self.cfg.train, self.state
        if s.step >= t.max_steps:
            return "max_steps"
        if t.max_epochs and s.epoch >= t.max_epochs:
            return "max_epochs"
        if t.max_minutes and s.elapsed >= 60 * t.max_minutes:
            return "max_minutes"
        if t.patience and s.bad_evals >= t.patience:
            return "patience"
        return None

    def train(self) -> TrainState:
        """Run until a stop rule fires. Ctrl-C or SIGTERM finishes the current update, saves
        `last.pt` and raises KeyboardInterrupt, so `--resume` loses nothing; a second Ctrl-C
        stops at once."""
        stop_signal: list[int] = []

        def on_signal(signum: int, frame: object) -> None:
            if stop_signal:
                raise KeyboardInterrupt
            stop_signal.append(signum)

        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                handlers[sig] = signal.signal(sig, on_signal)
        try:
            return self._loop(stop_signal)
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            distributed.shutdown(self.dist)
            if self.lock is not None:
                self.lock.release()

    def _loop(self, stop_signal: list[int]) -> TrainState:
        t, s = self.cfg.train, self.state
        self.model.train()
        main, d = self.dist.main, self.dist
        n_params = sum(p.numel() for p in self.model.parameters())
        if main:
            tqdm.write(
                f"mt train: {n_params / 1e6:.1f}M parameters, {len(self.train_set):,} training "
                f"pairs, device {self.device}, precision {self.precision}, "
                f"{d.world} process(es), run dir {self.run_dir}"
            )
        bar = tqdm(
            total=t.max_steps,
            initial=s.step,
            unit="step",
            dynamic_ncols=True,
            disable=None if main else True,
        )
        window_loss = torch.zeros((), device=self.device)
        window_nll = torch.zeros((), device=self.device)
        window_tok = window_steps = 0
        window_start = time.perf_counter()
        window_eval = 0.0  # evaluation time inside the window, left out of tokens/s
        reason = self._stop_reason()
        pin = self.device.type == "cuda"
        while reason is None:
            planned = self.train_set.epoch_batches(t.max_tokens, t.seed, s.epoch)
            batches = shard(planned, d.rank, d.world)
            self._steps_per_epoch = math.ceil(len(batches) / t.accum_steps)
            if not batches:
                raise MtError(
                    f"train: fewer batches per epoch than processes ({d.world}); "
                    "lower train.max_tokens or use fewer processes"
                )
            stream = iterate(self.train_set, batches[s.batch_in_epoch :], t.loader_workers, pin)
            try:
                while s.batch_in_epoch < len(batches) and reason is None:
                    tick = time.perf_counter()
                    group = list(itertools.islice(stream, t.accum_steps))
                    loss, nll, ntok = self._update(group)
                    s.batch_in_epoch += len(group)
                    window_loss += loss
                    window_nll += nll
                    window_tok += ntok
                    window_steps += 1
                    if self.device.type == "cpu" or s.step % t.log_every == 0:
                        self._check_divergence()  # free on CPU; a host sync on CUDA
                    s.elapsed += time.perf_counter() - tick
                    bar.update(1)
                    if s.step % t.log_every == 0:
                        span = time.perf_counter() - window_start - window_eval
                        w_loss, w_nll, w_tok = distributed.sum_all(
                            d,
                            [float(window_loss), float(window_nll), float(window_tok)],
                            self.device,
                        )
                        rec = {
                            "step": s.step,
                            "epoch": s.epoch,
                            "loss": w_loss / w_tok,
                            "nll": w_nll / w_tok,
                            "lr": learning_rate(s.step, t, self.cfg.model),
                            "tgt_tokens_per_s": w_tok / span,
                            "elapsed": round(s.elapsed, 1),
                            "skipped_updates": int(self.bad_total),
                        }
                        if main:
                            self.log.write(rec)
                            if not stderr_is_terminal():
                                eta = self._eta(
                                    span / max(window_steps, 1), len(batches) - s.batch_in_epoch
                                )
                                print(_log_line(rec, eta), file=sys.stderr, flush=True)
                        bar.set_postfix(
                            loss=f"{rec['loss']:.3f}",
                            lr=f"{rec['lr']:.2e}",
                            tok_s=f"{rec['tgt_tokens_per_s']:.0f}",
                        )
                        window_loss.zero_()
                        window_nll.zero_()
                        window_tok = window_steps = 0
                        window_start = time.perf_counter()
                        window_eval = 0.0
                    if s.step % t.eval_every == 0:
                        self._check_divergence()
                        tick = time.perf_counter()
                        if main:
                            self._evaluate_and_save(tick)
                        s.last_eval_step = s.step
                        if not main:
                            s.elapsed += time.perf_counter() - tick
                        window_eval += time.perf_counter() - tick
                    # After the step's log and evaluation, so a resumed run misses neither.
                    if distributed.agree(d, bool(stop_signal), self.device):
                        bar.close()
                        if main:
                            self._save(self.run_dir / "last.pt", with_state=True)
                            tqdm.write(
                                f"interrupted at step {s.step}; saved {self.run_dir}/last.pt"
                            )
                        raise KeyboardInterrupt
                    # Rank 0's clock decides the time budget, so all ranks stop at the same step.
                    reason = self._stop_reason()
                    if d.active:
                        stop = distributed.agree(d, reason is not None, self.device)
                        reason = (reason or "rank 0 stopped") if stop else None
            finally:
                stream.close()  # stops the loader's workers
            if s.batch_in_epoch >= len(batches):
                s.epoch += 1
                s.batch_in_epoch = 0
                if t.max_epochs and s.epoch >= t.max_epochs:  # the same on every rank
                    reason = reason or "max_epochs"
        bar.close()
        if main:
            if s.last_eval_step != s.step:
                self._evaluate_and_save(time.perf_counter())
            self.log.write(
                {
                    "step": s.step,
                    "stopped": reason,
                    "elapsed": round(s.elapsed, 1),
                }
            )
            if t.average_last:
                self.average_last(t.average_last)
        return s

    def average_last(self, n: int) -> Path:
        paths = self._step_checkpoints()[-n:]
        out = self.run_dir / "averaged.pt"
        checkpoint.save(checkpoint.average(paths), out)
        return out


def _minutes(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min"


def _log_line(rec: dict[str, Any], eta: tuple[float, str]) -> str:
    """fairseq's simple log format: one plain line per log interval when stderr is a file."""
    parts = [
        f"step {rec['step']}",
        f"epoch {rec['epoch'] + 1}",
        f"loss {rec['loss']:.3f}",
        f"lr {rec['lr']:.3g}",
        f"{rec['tgt_tokens_per_s']:,.0f} tgt tok/s",
        f"elapsed {_minutes(rec['elapsed'])}",
    ]
    if rec.get("skipped_updates"):
        parts.append(f"skipped {rec['skipped_updates']}")
    parts.append(f"eta {_minutes(eta[0])} ({eta[1]})")
    return "train: " + " | ".join(parts)


def train(cfg: Config, run_dir: Path, resume: bool = False) -> TrainState:
    """Train (or resume) a model as `cfg` says; everything goes to `run_dir`."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return Trainer(cfg, run_dir, resume).train()

"""The training procedure: from a config to checkpoints in a run directory.

The run directory holds everything a run makes: the tokenizer (`spm*.model`), the resolved
`config.yaml`, `metrics.jsonl` (one JSON object per log interval and per evaluation), and the
checkpoints `last.pt` (with the full training state), `best.pt` (best dev BLEU) and the last
`keep_last` step checkpoints. `--resume` continues from `last.pt` with the same model,
optimizer, scaler, RNG and data position, so a resumed run follows the uninterrupted one.

This module is the procedure; the rooms beside it hold the parts: `setup` (the phases before
the first step, and how the run starts: fresh, resumed, restarted or fine-tuned), `update`
(one optimizer step), `evaluation` (dev loss and BLEU), `judge` (what each evaluation decides:
best.pt, patience, at the end averaging and tuning), `metrics_log` (records and their sinks),
`rotation` (which checkpoints are kept), `stop` (stop rules, ETA, divergence), `signals`
(Ctrl-C and a scheduler's preemption), `state` (counters, run id, RNG), `resume` (what
`last.pt` brings back), `nodes` (tokenizer and token stores on every node), `distributed`
(torchrun) and `logline` (the log window and its stderr line).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from mt.batching import Batch, shard
from mt.config import Config
from mt.config_file import save_config
from mt.data.loader import iterate
from mt.errors import EXIT_REQUEUE, MtError
from mt.progress import stderr_is_terminal
from mt.train import distributed, finetune, nodes, setup, tensorboard
from mt.train.averaging import Ema
from mt.train.best import BestRule
from mt.train.budget import BudgetDropout, decide, set_rates
from mt.train.judge import Judge
from mt.train.logline import SlowdownWatch, Window, log_line
from mt.train.resume import training_state
from mt.train.rotation import Checkpoints
from mt.train.schedule import budget_used
from mt.train.signals import StopSignals
from mt.train.state import TrainState
from mt.train.stop import diverged, eta, stop_reason
from mt.train.watch import read_watched, watch_sets


class Trainer:
    def __init__(
        self, cfg: Config, run_dir: Path, resume: bool = False, origin: dict | None = None
    ) -> None:
        """Set the run up in the phases of `mt.train.setup`; `origin` goes in every checkpoint."""
        self.cfg = cfg
        self.run_dir = run_dir
        t = cfg.train
        use_tensorboard = tensorboard.enabled(t.tensorboard)  # before any work: true needs it
        proc = setup.process(t)
        self.threads, self.dist, self.device = proc.threads, proc.dist, proc.device
        self.precision_choice = proc.precision  # and why
        self.precision = proc.precision.name
        self.start = setup.decide_start(cfg, run_dir, resume, proc)
        t = cfg.train  # fine-tuning's, when it started from train.init_from
        watched = read_watched(t.watch, cfg.data) if self.dist.main else []  # train.watch
        prepared, self.lock = nodes.prepare_run(  # rank 0 holds the run directory's lock
            cfg.data,
            cfg.tokenizer,
            t.seed,
            run_dir,
            self.start.resume,
            self.dist,
            self.device,
            self.start.init,
        )
        self.tokenizer = prepared.tokenizer
        self.train_set, dev_sets = setup.data(prepared, cfg.data)
        self.model = setup.model(cfg.model, t.freeze, self.tokenizer, self.device, self.start)
        self.update = setup.update(cfg, self.model, self.tokenizer, proc)
        self.optimizer, self.scaler = self.update.optimizer, self.update.scaler
        self.ema = Ema(self.model, t.ema_decay) if t.ema_decay else None  # train.ema_decay
        self.state = setup.continued(
            self.start, t.seed, cfg.model, proc, self.model, self.update, self.ema
        )
        s = self.state
        self.budget = BudgetDropout(t.dropout_by_epochs, t, s.dropout, s.dropout_final)
        if self.state.dropout:  # chosen before a --resume: as the checkpoint's model section
            set_rates(self.model, cfg.model, self.state.dropout)
        self._steps_per_epoch = 0
        self.slowdown = SlowdownWatch()
        self.saved_at = time.monotonic()  # when last.pt was last written (train.checkpoint_minutes)
        net = distributed.wrap(self.dist, self.model, self.device)  # DDP under torchrun
        # torch.compile recompiles once when batch shapes first change, then they are dynamic.
        self.update.net = torch.compile(net) if t.compile else net
        if self.dist.main:
            save_config(cfg, run_dir / "config.yaml")
        watch = watch_sets(watched, self.tokenizer, cfg.data)
        self.evaluate = setup.evaluator(
            cfg, self.model, self.tokenizer, dev_sets, self.device, self.precision, watch
        )
        best = BestRule.of(t.watch)  # which evaluation becomes best.pt
        if self.start.resumed:
            best.check_resumed(self.state, self.start.last)
        init = self.start.init
        adapter = None if init is None or init.adapter is None else (init.adapter, init.base)
        self.checkpoints = Checkpoints(
            run_dir, cfg, self.tokenizer, self.model, self.state.run_id, adapter, origin
        )
        self.log, self.tensorboard = setup.sinks(
            run_dir, self.dist.main, self.start, self.state.step, use_tensorboard, cfg, self.model
        )
        self.judge = Judge(
            best, self.evaluate, self.checkpoints, self.log, self.tensorboard, self.ema
        )
        if self.start.how == "init_from":  # fine-tuning: the start step (and optimizer if kept)
            self.state.step = finetune.start(
                self.start.init, self.optimizer, self.scaler, self.log.write
            )

    # -- training state ----------------------------------------------------------------------

    def _save_last(self) -> None:
        """`last.pt` with everything `--resume` needs."""
        train_state = training_state(self.optimizer, self.scaler, self.device, self.state)
        train_state["skipped"] = self.update.counts()
        if self.ema is not None:
            train_state["ema"] = self.ema.state_dict()
        self.log.flush()  # every record up to this step is on disk before the checkpoint
        self.checkpoints.save("last.pt", self.state.step, train_state)
        self.saved_at = time.monotonic()

    # -- between steps ------------------------------------------------------------------------

    def _check_divergence(self) -> None:
        """Stop (saving the last good state) once `max_bad_updates` were skipped in a row."""
        error = diverged(
            self.cfg.train, self.state, int(self.update.bad_run), self.run_dir / "last.pt"
        )
        if error is None:
            return
        if self.dist.main:
            self._save_last()
        raise error

    # -- what happens between steps ----------------------------------------------------------

    def _log(self, window: Window, bar: tqdm, batches_left: int) -> None:
        """One record for the steps since the last log interval (summed over ranks)."""
        t, s, d = self.cfg.train, self.state, self.dist
        span = window.seconds()
        sums = [float(window.loss), float(window.nll), float(window.tokens)]
        keep = self.update.keep is not None  # finetune.keep: the KL term toward the base
        if keep:
            sums.append(float(self.update.kl_sum))
            self.update.kl_sum.zero_()
        w_loss, w_nll, w_tok, *w_kl = distributed.sum_all(d, sums, self.device)
        rec = {
            "step": s.step,
            "epoch": s.epoch,
            "loss": w_loss / w_tok,
            "nll": w_nll / w_tok,
            "lr": self.update.optimizer.param_groups[0]["lr"],
            **({"keep_kl": w_kl[0] / w_tok} if keep else {}),
            "grad_norm": window.mean_grad_norm(),  # the same on every rank (all-reduced)
            "tgt_tokens_per_s": w_tok / span,
            "elapsed": round(s.elapsed, 1),
            "skipped_updates": int(self.update.bad_total),
        }
        self.log.write(rec)
        warning = self.slowdown.observe(rec["tgt_tokens_per_s"]) if d.main else None
        if warning:
            tqdm.write(warning, file=sys.stderr)
        if d.main and not stderr_is_terminal():
            left = eta(t, s, span / max(window.steps, 1), batches_left, self._steps_per_epoch)
            print(log_line(rec, left), file=sys.stderr, flush=True)
        bar.set_postfix(
            loss=f"{rec['loss']:.3f}", lr=f"{rec['lr']:.2e}", tok_s=f"{w_tok / span:.0f}"
        )
        window.reset()

    def _evaluate_and_save(self, start: float, first: bool = False) -> None:
        """Validate and write checkpoints (rank 0), `last.pt` last (mt.train.judge)."""
        self.judge(self.state, start, self._save_last, first)

    def _evaluate_in_loop(self, window: Window) -> None:
        """Rank 0 evaluates and saves while the others wait; the time is left out of tokens/s
        and counted as training time on every rank."""
        self._check_divergence()
        tick = time.perf_counter()
        if self.dist.main:
            self._evaluate_and_save(tick)
        self.state.last_eval_step = self.state.step
        if not self.dist.main:
            self.state.elapsed += time.perf_counter() - tick
        window.eval_seconds += time.perf_counter() - tick

    def _interrupted(self, bar: tqdm, preempted: str | None) -> None:
        """Save `last.pt` and stop: Ctrl-C exits 130; a scheduler's signal (`preempted`, on
        any rank) exits `EXIT_REQUEUE`, which asks for the job to be requeued."""
        bar.close()
        if self.dist.main:
            self._save_last()
            tqdm.write(f"interrupted at step {self.state.step}; saved {self.run_dir}/last.pt")
        if preempted is None:
            raise KeyboardInterrupt
        raise MtError(
            f"train: {preempted} at step {self.state.step}: saved {self.run_dir / 'last.pt'}; "
            f"exit {EXIT_REQUEUE} asks for a requeue, which continues with --resume",
            EXIT_REQUEUE,
        )

    def _stop_signal(self, signals: StopSignals) -> tuple[bool, str | None]:
        """Whether any rank was signalled to stop, and by a scheduler (its signal's name)."""
        code = 2 if signals.preempted else 1 if signals.requested else 0
        code = distributed.highest(self.dist, code, self.device)
        return code > 0, (signals.preempted or "a preemption signal") if code == 2 else None

    def _checkpoint_due(self) -> bool:
        """`train.checkpoint_minutes` passed since `last.pt` was written (rank 0's clock)."""
        minutes = self.cfg.train.checkpoint_minutes
        return bool(minutes) and time.monotonic() - self.saved_at >= 60 * minutes

    def _stop_reason(self) -> str | None:
        """Rank 0's clock decides the time budget, so all ranks stop at the same step."""
        reason = stop_reason(self.cfg.train, self.state)
        if self.dist.active:
            stop = distributed.agree(self.dist, reason is not None, self.device)
            reason = (reason or "rank 0 stopped") if stop else None
        return reason

    def _epoch_batches(self) -> list[Any]:
        """This rank's share of the current epoch's batches (index arrays)."""
        t, d = self.cfg.train, self.dist
        self.train_set.use_copy(self.state.epoch)  # tokenizer.sample_alpha's copies
        planned = self.train_set.epoch_batches(t.max_tokens, t.seed, self.state.epoch)
        batches = shard(planned, d.rank, d.world)
        if not batches:
            raise MtError(
                f"train: fewer batches per epoch than processes ({d.world}); "
                "lower train.max_tokens or use fewer processes"
            )
        self._steps_per_epoch = math.ceil(len(batches) / t.accum_steps)
        return batches

    def _finish(self, reason: str | None) -> None:
        """The evaluations' end (mt.train.judge: the last evaluation, averaging, decode
        settings chosen on dev, which evaluation best.pt is), then the stop record."""
        s = self.state
        self.judge.finish(s, self.cfg.train, self.cfg.decode, self.model, self._save_last)
        self.log.write({"step": s.step, "stopped": reason, "elapsed": round(s.elapsed, 1)})
        if self.tensorboard is not None and self.judge.last_metrics:
            self.tensorboard.write_hparams(self.cfg, self.judge.last_metrics, s.step)

    # -- the procedure -----------------------------------------------------------------------

    def train(self) -> TrainState:
        """Run until a stop rule fires. Ctrl-C or SIGTERM finishes the current update, saves
        `last.pt` and raises KeyboardInterrupt, so `--resume` loses nothing; a second Ctrl-C
        stops at once."""
        try:
            with StopSignals() as signals:
                return distributed.guarded(self.dist, lambda: self._loop(signals))
        finally:
            self.log.close()
            distributed.shutdown(self.dist)
            if self.lock is not None:
                self.lock.release()

    def _loop(self, signals: StopSignals) -> TrainState:
        t, s, d = self.cfg.train, self.state, self.dist
        self._announce()
        quiet = None if d.main else True  # None: tqdm's own choice (off when not a terminal)
        bar = tqdm(
            total=t.max_steps, initial=s.step, unit="step", dynamic_ncols=True, disable=quiet
        )
        window = Window(self.device)
        if t.watch and not self.start.resumed:  # the start values of the watched sets
            if d.main:
                self._evaluate_and_save(time.perf_counter(), first=True)
            s.last_eval_step = s.step
        reason = stop_reason(t, s)
        while reason is None:
            batches = self._epoch_batches()
            pin = self.device.type == "cuda"
            stream = iterate(self.train_set, batches[s.batch_in_epoch :], t.loader_workers, pin)
            with contextlib.closing(stream):  # closing stops the loader's workers
                while s.batch_in_epoch < len(batches) and reason is None:
                    self._step(stream, window)
                    bar.update(1)
                    if s.step % t.log_every == 0:
                        self._log(window, bar, len(batches) - s.batch_in_epoch)
                    if s.step % t.eval_every == 0:
                        self._evaluate_in_loop(window)
                    # After the step's log and evaluation, so a resumed run misses neither.
                    stop, preempted = self._stop_signal(signals)
                    if stop:
                        self._interrupted(bar, preempted)
                    if d.main and self._checkpoint_due():
                        self._save_last()
                    reason = self._stop_reason()
            reason = self._end_of_epoch(len(batches)) or reason
        bar.close()
        if d.main:
            self._finish(reason)
        return s

    def _announce(self) -> None:
        self.model.train()
        if self.dist.main:
            where = f"{self.dist.world} process(es), {self.threads.describe()}"
            how = f"precision {self.precision_choice.describe()}, {where}"
            line = setup.start_line(self.model, len(self.train_set), self.device, how)
            tqdm.write(f"{line}{self.budget.announce()}, run dir {self.run_dir}", file=sys.stderr)

    def _step(self, stream: Iterator[Batch], window: Window) -> None:
        """Take the next batch group and update; its time (data included) is training time."""
        t, s = self.cfg.train, self.state
        tick = time.perf_counter()
        group = list(itertools.islice(stream, t.accum_steps))
        if self.budget.pending:  # train.dropout_by_epochs
            rank0 = functools.partial(distributed.from_rank0, self.dist, device=self.device)
            sink = self.log.write if self.dist.main else None
            decide(self.budget, s, self._steps_per_epoch, self.model, self.cfg.model, rank0, sink)
        used = budget_used(t, s.step, s.elapsed)  # before this update: the last gets > 0
        if t.cooldown and t.max_minutes and self.dist.active:  # rank 0's clock, as stops use
            used = distributed.from_rank0(self.dist, used, self.device)
        window.add(*self.update(group, s.step + 1, used))
        s.step += 1
        if self.ema is not None:
            self.ema.update(s.step)
        s.batch_in_epoch += len(group)
        if self.device.type == "cpu" or s.step % t.log_every == 0:
            self._check_divergence()  # free on CPU; a host sync on CUDA
        s.elapsed += time.perf_counter() - tick

    def _end_of_epoch(self, n_batches: int) -> str | None:
        """Move to the next epoch once this one is used up; "max_epochs" when that was the
        last (the same on every rank)."""
        s, t = self.state, self.cfg.train
        if s.batch_in_epoch < n_batches:
            return None
        s.epoch, s.batch_in_epoch = s.epoch + 1, 0
        return "max_epochs" if t.max_epochs and s.epoch >= t.max_epochs else None


def train(
    cfg: Config, run_dir: Path, resume: bool = False, origin: dict | None = None
) -> TrainState:
    """Train (or resume) a model as `cfg` says; everything goes to `run_dir`."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return Trainer(cfg, run_dir, resume, origin).train()

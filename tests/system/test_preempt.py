"""Preemption through the real CLI: a scheduler's SIGTERM or SIGUSR1 ends the step, writes
`last.pt` and exits with the "requeue me" code; `train.checkpoint_minutes` bounds what a kill
loses by time; the requeued run continues `metrics.jsonl` with each step once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from support.tasks import reverse_task_config, start_training

from mt.errors import EXIT_REQUEUE


def _loss_steps(run: Path) -> list[int]:
    if not (run / "metrics.jsonl").exists():
        return []
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r["step"] for r in map(json.loads, lines) if "loss" in r]


def _wait_for_step(run: Path, proc: subprocess.Popen, step: int, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < end, f"step {step} not logged in {timeout} s"
        if any(s >= step for s in _loss_steps(run)):
            return
        time.sleep(0.05)


def _stop(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, err.decode()


def _preempt(config: Path, run: Path, sig: signal.Signals, *extra: str) -> int:
    """Train until a few steps are logged, send `sig`; the step of the `last.pt` it saved."""
    proc = start_training(config, run, *extra)
    try:
        _wait_for_step(run, proc, max(_loss_steps(run), default=0) + 3)
        os.kill(proc.pid, sig)
        rc, err = _stop(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert rc == EXIT_REQUEUE, err
    lines = [x for x in err.splitlines() if x.startswith("mt:")]
    assert len(lines) == 1 and lines[0].startswith(f"mt: stopped: train: {sig.name}"), err
    assert "requeue" in lines[0] and "Traceback" not in err, err
    return torch.load(run / "last.pt", weights_only=True)["step"]


@pytest.mark.slow  # ~10-30 s; test_cluster's srun USR1 test checks save-and-exit 75 by default
def test_scheduler_signals_save_last_and_exit_requeue(tmp_path, mt_cli):
    config = reverse_task_config(tmp_path, max_steps=100_000, eval_every=100_000, log_every=1)
    run = tmp_path / "run"
    saved = _preempt(config, run, signal.SIGTERM)
    # The step in flight was finished and logged before last.pt was written.
    assert _loss_steps(run) == list(range(1, saved + 1))
    # The requeued run is preempted again, by Slurm's early warning this time.
    again = _preempt(config, run, signal.SIGUSR1, "--resume")
    assert again > saved
    assert _loss_steps(run) == list(range(1, again + 1))  # no gap, no repeat
    more = mt_cli(
        "train", config, "--run-dir", run, "--resume", "--set", f"train.max_steps={again + 3}"
    )
    assert more.rc == 0, more.err
    assert _loss_steps(run) == list(range(1, again + 4))


@pytest.mark.slow
def test_checkpoint_minutes_bounds_what_a_kill_loses(tmp_path, mt_cli):
    minutes = 0.02  # 1.2 s
    config = reverse_task_config(
        tmp_path,
        max_steps=100_000,
        eval_every=100_000,
        log_every=1,
        checkpoint_minutes=minutes,
    )
    run = tmp_path / "run"
    proc = start_training(config, run)
    try:
        _wait_for_step(run, proc, 2)
        end = time.monotonic() + 60
        while not (run / "last.pt").exists():
            assert proc.poll() is None and time.monotonic() < end, "no timed checkpoint"
            time.sleep(0.05)
        time.sleep(3 * 60 * minutes)
        os.killpg(proc.pid, signal.SIGKILL)  # no chance to save: only the timed checkpoints
        killed_at = time.time()
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    logged = _loss_steps(run)[-1]
    saved = torch.load(run / "last.pt", weights_only=True)["step"]
    assert 0 < saved <= logged
    # The newest last.pt is at most checkpoint_minutes (plus one step and the write) old.
    assert killed_at - (run / "last.pt").stat().st_mtime < 60 * minutes + 1.0
    more = mt_cli(
        "train", config, "--run-dir", run, "--resume", "--set", f"train.max_steps={logged + 2}"
    )
    assert more.rc == 0, more.err
    # The records the killed run wrote past its checkpoint were dropped and written again once.
    assert _loss_steps(run) == list(range(1, logged + 3))

"""Crash safety: `mt train` killed with SIGKILL, at a random step or in the middle of writing a
checkpoint, leaves a loadable `last.pt`, and `--resume` ends where an uninterrupted run ends."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from support.tasks import reverse_task_config

from mt import checkpoint
from mt.errors import MtError

N = 24
EVERY = 4  # eval (and so last.pt) every 4 steps


@pytest.fixture(scope="module")
def straight(tmp_path_factory, mt_cli) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("crash")
    config = reverse_task_config(folder, max_steps=N, eval_every=EVERY, keep_last=2)
    result = mt_cli("train", config, "--run-dir", folder / "straight")
    assert result.rc == 0, result.err
    return config, folder / "straight"


def final_state(run_dir: Path) -> tuple[float, dict[str, torch.Tensor]]:
    losses = [
        json.loads(line)["loss"]
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
        if '"loss"' in line
    ]
    return losses[-1], torch.load(run_dir / "last.pt", weights_only=True)["model"]


def assert_same_end(a: Path, b: Path) -> None:
    loss_a, weights_a = final_state(a)
    loss_b, weights_b = final_state(b)
    assert loss_b == pytest.approx(loss_a, rel=1e-5)
    for name, tensor in weights_a.items():
        torch.testing.assert_close(weights_b[name], tensor, rtol=1e-5, atol=1e-6, msg=name)


def resume(config: Path, run_dir: Path, mt_cli) -> None:
    data = checkpoint.load(run_dir / "last.pt")  # loadable after the kill
    assert data["step"] % EVERY == 0 and 0 < data["step"] <= N
    result = mt_cli("train", config, "--run-dir", run_dir, "--resume")
    assert result.rc == 0, result.err
    assert torch.load(run_dir / "last.pt", weights_only=True)["step"] == N


def test_sigkill_at_a_random_step_then_resume(straight, tmp_path, mt_cli):
    config, straight_dir = straight
    run_dir = tmp_path / "killed"
    kill_after = random.Random(os.getpid()).randint(EVERY + 1, N - EVERY - 1)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mt", "train", str(config), "--run-dir", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    log = run_dir / "metrics.jsonl"
    deadline = time.time() + 120
    step = 0
    while proc.poll() is None and time.time() < deadline and step < kill_after:
        if log.exists():
            steps = [json.loads(x).get("step", 0) for x in log.read_text().splitlines() if x]
            step = max(steps, default=0)
        time.sleep(0.02)
    assert proc.poll() is None, "training ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resume(config, run_dir, mt_cli)
    assert_same_end(straight_dir, run_dir)


# Runs `mt train` in a child whose torch.save writes half a file and then SIGKILLs the process,
# on the Nth checkpoint write: a crash in the middle of writing.
KILL_MID_WRITE = """
import os, signal, sys, torch
calls = 0
real_save = torch.save
def dying_save(obj, f, *args, **kwargs):
    global calls
    calls += 1
    if calls == int(os.environ["KILL_ON_SAVE"]):
        import io
        buf = io.BytesIO()
        real_save(obj, buf)
        f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
        f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return real_save(obj, f, *args, **kwargs)
torch.save = dying_save
from mt.cli import main
sys.argv = ["mt", *sys.argv[1:]]
main()
"""


# Mid-write of a step checkpoint or of last.pt (the same atomic writer).
@pytest.mark.slow  # ~15 s each; test_sigkill_at_a_random_step_then_resume runs by default
@pytest.mark.parametrize("kill_on_save", [5, 6])
def test_sigkill_during_checkpoint_write_then_resume(straight, tmp_path, mt_cli, kill_on_save):
    config, straight_dir = straight
    run_dir = tmp_path / "killed"
    proc = subprocess.run(
        [sys.executable, "-c", KILL_MID_WRITE, "train", str(config), "--run-dir", str(run_dir)],
        capture_output=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "KILL_ON_SAVE": str(kill_on_save)},
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL
    assert list(run_dir.glob(".*.tmp-*")), "the kill should have hit a half-written temp file"
    resume(config, run_dir, mt_cli)
    assert_same_end(straight_dir, run_dir)


def test_disk_full_on_save_is_one_error_and_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    checkpoint.save({"format": "x", "value": 1}, path)
    before = path.read_bytes()

    def no_space(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", no_space)
    with pytest.raises(MtError, match=r"last\.pt: cannot write checkpoint \(No space"):
        checkpoint.save({"format": "x", "value": 2}, path)
    assert path.read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp-*"))

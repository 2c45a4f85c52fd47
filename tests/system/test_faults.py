"""Faults a long run meets, through the real CLI: a second writer, divergence, a full disk,
and logs read from a file instead of a terminal."""

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


def _strict_json(line: str) -> dict:
    def refuse(name: str) -> None:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(line, parse_constant=refuse)


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("mt: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    return lines[0]


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not (path.exists() and path.stat().st_size > 0):
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < end, f"{path} did not appear"
        time.sleep(0.1)


def test_second_writer_is_refused_and_a_killed_holder_never_blocks(tmp_path, mt_cli):
    config = reverse_task_config(tmp_path, max_steps=100_000, eval_every=100_000)
    run = tmp_path / "run"
    first = start_training(config, run)
    try:
        _wait_for(run / "metrics.jsonl", first)
        second = mt_cli("train", config, "--run-dir", run, "--resume")
        assert second.rc != 0
        line = _one_error_line(second.err)
        assert str(run) in line and f"pid {first.pid}" in line
        prepare = mt_cli("prepare", config, "--run-dir", run)
        assert prepare.rc != 0 and f"pid {first.pid}" in _one_error_line(prepare.err)
        # Only the first process wrote the metrics: every step appears once.
        steps = [
            r["step"] for r in map(_strict_json, (run / "metrics.jsonl").read_text().splitlines())
        ]
        assert len(steps) == len(set(steps))
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # no chance to clean up: the kernel frees the lock
        first.wait()
    again = mt_cli(
        "train",
        config,
        "--run-dir",
        run,
        "--set",
        "train.max_steps=8",
        "--set",
        "train.eval_every=4",
    )
    assert again.rc == 0, again.err


def test_divergence_stops_with_finite_checkpoints_and_strict_json(tmp_path, mt_cli):
    config = reverse_task_config(tmp_path, eval_every=4, keep_last=3, max_steps=200)
    run = tmp_path / "run"
    result = mt_cli(
        "train", config, "--run-dir", run,
        "--set", "train.lr_scale=1e9", "--set", "train.max_bad_updates=6",
    )  # fmt: skip
    assert result.rc == 3
    line = _one_error_line(result.err)
    assert "non-finite" in line and "max_bad_updates 6" in line
    records = [_strict_json(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("loss", 0) is None for r in records)  # NaN logged as null
    assert max(r.get("skipped_updates", 0) for r in records) > 0
    step = torch.load(run / "last.pt", weights_only=True)["step"]
    assert step < 200
    for ckpt in run.glob("*.pt"):
        weights = torch.load(ckpt, weights_only=True)["model"]
        assert all(torch.isfinite(w).all() for w in weights.values()), ckpt
    out = mt_cli("translate", run / "last.pt", "--greedy", stdin="ka lo mi\n")
    assert out.rc == 0 and out.out.count("\n") == 1


def test_logs_without_a_terminal_are_plain_progress_lines(tmp_path, mt_cli):
    config = reverse_task_config(tmp_path, max_steps=12, log_every=4, eval_every=12)
    result = mt_cli("train", config, "--run-dir", tmp_path / "run")
    assert result.rc == 0, result.err
    lines = [x for x in result.err.splitlines() if x.startswith("train: step")]
    assert [int(x.split()[2]) for x in lines] == [4, 8, 12]
    for x in lines:
        assert "loss" in x and "tgt tok/s" in x and "eta" in x and "(max_steps)" in x
    assert "\r" not in result.err  # no progress bar smeared into the log


@pytest.fixture
def tiny_fs(tmp_path):
    """A really full filesystem: a 3 MiB tmpfs (root only; skipped elsewhere)."""
    mount = tmp_path / "fs"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_during_training_is_one_line_and_leaves_no_temp_file(tmp_path, tiny_fs, mt_cli):
    config = reverse_task_config(tmp_path, eval_every=4, max_steps=8, keep_last=5)
    # A model whose checkpoints (weights + Adam state) outgrow 3 MiB after a few writes.
    run = tiny_fs / "run"
    result = mt_cli(
        "train", config, "--run-dir", run,
        "--set", "model.d_model=128", "--set", "model.d_ff=512",
    )  # fmt: skip
    assert result.rc != 0
    line = _one_error_line(result.err)
    assert str(run) in line and ("No space left" in line or "cannot write" in line)
    leftovers = [p.name for p in run.rglob("*") if ".tmp" in p.name]
    assert leftovers == []
    for ckpt in run.glob("*.pt"):  # whatever was written before the disk filled is whole
        torch.load(ckpt, weights_only=True)


def test_full_disk_under_translate_output(tmp_path, tiny_fs, tiny_run, mt_cli):
    filler = tiny_fs / "filler"
    filler.write_bytes(b"\0" * (3 * 2**20 - 8192))
    out = tiny_fs / "out.txt"
    lines = "".join(f"Ein Hund rennt {i}.\n" for i in range(400))
    result = mt_cli("translate", tiny_run / "best.pt", "--greedy", "--output", out, stdin=lines)
    assert result.rc != 0
    assert str(out) in _one_error_line(result.err)
    assert not out.exists() and not list(out.parent.glob(".out.txt.tmp-*"))

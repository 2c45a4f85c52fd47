"""What a stopped run brings back: the training state in `last.pt`, and a metrics log that
holds each step once.

A run continues from `last.pt` when `--resume` is given or when torchrun started its workers
again (`decide`): after a failure on any node (`--max-restarts`), or for a launcher of the same
job that was killed and started again (the same `--rdzv-id`, which rank 0 records in the run
directory as `JOB_FILE`). `last.pt` holds the model, optimizer, scaler,
RNG and data position, so the resumed run follows the uninterrupted one. Global rank 0 reads it
and sends it to the other ranks, which need no access to rank 0's run directory.

A killed run may have logged steps after its last checkpoint; the resumed run does those steps
again, so `trim_metrics` first drops their records: `metrics.jsonl` then holds each step once,
in order (TensorBoard's events are hidden the same way by `purge_step`).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from mt import checkpoint
from mt.adapt.lora import load_weights
from mt.atomic import write_text
from mt.config import ModelConfig
from mt.errors import MtError
from mt.train import distributed
from mt.train.distributed import Dist
from mt.train.state import TrainState, rng_state, set_rng_state

JOB_FILE = ".torchrun-id"  # the rendezvous id of the torchrun job that writes the run directory


def decide(d: Dist, device: torch.device, run_dir: Path, flag: bool) -> tuple[bool, bool]:
    """(resume, resumed): whether this start continues a run (`--resume`, or a restart of the
    torchrun job that wrote `run_dir`), and whether there is a `last.pt` to continue from. Rank
    0's run directory decides for every rank."""
    restarted = distributed.highest(d, distributed.restart_count(), device) > 0
    job = distributed.job_id()
    if d.main and job and not restarted:
        path = run_dir / JOB_FILE
        restarted = path.is_file() and path.read_text(encoding="utf-8").strip() == job
    resume = distributed.agree(d, flag or restarted, device)
    resumed = distributed.agree(d, resume and (run_dir / "last.pt").exists(), device)
    return resume, resumed


def record_job(run_dir: Path) -> None:
    """Rank 0 notes the torchrun job writing `run_dir`, so its restarted launchers resume."""
    job = distributed.job_id()
    if job:
        write_text(run_dir / JOB_FILE, job + "\n", "the torchrun job id")


def training_state(
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    device: torch.device,
    state: TrainState,
) -> dict[str, Any]:
    """What `last.pt` holds besides the model, for a resumed run to continue exactly."""
    return {
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(),
        "rng": rng_state(device),
        "state": asdict(state),
    }


def read_last(d: Dist, path: Path, device: torch.device) -> dict[str, Any]:
    """The checkpoint at `path` (rank 0's file) on every rank."""
    raw = distributed.broadcast_bytes(d, path.read_bytes() if d.main else None, device)
    assert raw is not None
    return checkpoint.load(path, raw)


def restore(
    data: dict[str, Any],
    path: Path,
    m: ModelConfig,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    device: torch.device,
) -> TrainState:
    """Put the model and the training state of `data` (read from `path`) back in place; its
    model config must be `m`."""
    if data.get("train_state") is None:
        raise MtError(f"{path}: holds no training state to resume from")
    for key, rate in data["train_state"]["state"].get("dropout", {}).items():
        setattr(m, key, rate)  # train.dropout_by_epochs chose them: the checkpoint holds them
    if data["config"]["model"] != asdict(m):
        raise MtError(f"{path}: model config differs from the one being resumed")
    ts = data["train_state"]
    load_weights(model, data["model"])  # an adapter run's: the adapter alone
    optimizer.load_state_dict(ts["optimizer"])
    scaler.load_state_dict(ts["scaler"])
    set_rng_state(ts["rng"], device)
    return TrainState(**ts["state"])


def trim_metrics(path: Path, step: int) -> int:
    """Drop the records of `path` past `step` (logged by a run killed after its checkpoint);
    returns how many. The file is rewritten atomically, and only when something is dropped."""
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    with path.open(encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a kill: never a whole record
                dropped += 1
                continue
            if isinstance(record, dict) and record.get("step", 0) > step:
                dropped += 1
            else:
                kept.append(line if line.endswith("\n") else line + "\n")
    if dropped:
        write_text(path, "".join(kept), "the metrics log")
    return dropped

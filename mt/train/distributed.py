"""PyTorch DDP under `torchrun`: who this process is, what a restart means, and the few
collectives training needs.

`torchrun --nproc_per_node=N -m mt train CONFIG` sets WORLD_SIZE, RANK and LOCAL_RANK; without
them everything here is a no-op, so single-process training takes the same code path. Under
torchrun the group is formed even for one process, so one GPU can smoke-test the DDP path (NCCL,
the DDP wrapper, the collectives).

Several nodes need not share a filesystem: global rank 0 alone writes the run directory
(tokenizer, checkpoints, logs) and sends what the others need (the tokenizer, the state of
`last.pt`) over the process group; each node's local rank 0 prepares that node's token stores.
A worker that torchrun starts again after a failure (`--max-restarts`) resumes by itself.
Every collective waits at most `train.collective_timeout_s`: a hung or vanished peer ends the
run with one line instead of holding every other process forever.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist

from mt.errors import MtError

T = TypeVar("T")


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    active: bool = False  # in a process group (under torchrun): DDP and collectives on
    timeout_s: float = 0.0  # how long a collective may wait for the others

    @property
    def main(self) -> bool:
        """Global rank 0: the one process that writes the run directory."""
        return self.rank == 0

    @property
    def node_main(self) -> bool:
        """Local rank 0: the process that prepares this node's token stores."""
        return self.local_rank == 0


def init(device: torch.device, timeout_s: float = 600.0) -> tuple[Dist, torch.device]:
    """Join the process group torchrun describes; CUDA ranks get their own GPU."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return Dist(), device
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo",
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    return Dist(rank, world, local, active=True, timeout_s=timeout_s), device


def restarted() -> bool:
    """Whether torchrun started this worker again after a failure (`--max-restarts`): such a
    worker continues from `last.pt` as if `--resume` were given."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0


def guarded(d: Dist, work: Callable[[], T]) -> T:
    """`work()`, with a collective that failed or timed out (a peer hung, died or was killed)
    turned into one line."""
    if not d.active:
        return work()
    try:
        return work()
    except RuntimeError as err:
        if not collective_failure(err):
            raise
        first = (str(err).strip().splitlines() or ["no detail"])[0][:200]
        raise MtError(
            f"train: rank {d.rank}: another process did not answer within "
            f"train.collective_timeout_s ({d.timeout_s:g} s) or left the group; stopping "
            f"({type(err).__name__}: {first})",
            code=1,
        ) from None


def collective_failure(err: BaseException) -> bool:
    """Whether `err` is a collective that timed out or lost a peer: torch's own DistError
    (NCCL, the store), or the plain RuntimeError gloo raises from its transport."""
    text = str(err)
    return isinstance(err, dist.DistError) or "gloo/" in text or "NCCL" in text


def barrier(d: Dist) -> None:
    if d.active:
        dist.barrier()


def sum_all(d: Dist, values: list[float], device: torch.device) -> list[float]:
    """Element-wise sum of `values` over all ranks (token counts, loss sums)."""
    if not d.active:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def all_sum(d: Dist, t: torch.Tensor) -> torch.Tensor:
    """`t` summed over all ranks, left on the device: no host sync, unlike `sum_all`."""
    if d.active:
        dist.all_reduce(t)
    return t


def agree(d: Dist, flag: bool, device: torch.device) -> bool:
    """Rank 0's decision for everyone (stop now, patience ran out)."""
    if not d.active:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.broadcast(t, src=0)
    return bool(t.item())


def highest(d: Dist, value: int, device: torch.device) -> int:
    """The largest `value` of any rank: a signal that reached one process stops them all."""
    if not d.active:
        return value
    t = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def broadcast_bytes(d: Dist, data: bytes | None, device: torch.device) -> bytes | None:
    """Rank 0's `data` on every rank (None stays None): how the tokenizer and the state of
    `last.pt` reach nodes that do not share rank 0's filesystem."""
    if not d.active:
        return data
    size = torch.tensor([-1 if data is None else len(data)], dtype=torch.long, device=device)
    dist.broadcast(size, src=0)
    n = int(size.item())
    if n < 0:
        return None
    if d.main:
        assert data is not None
        buf = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
    else:
        buf = torch.empty(n, dtype=torch.uint8, device=device)
    if n:
        dist.broadcast(buf, src=0)
    return data if d.main else bytes(buf.cpu().numpy().tobytes())


def shutdown(d: Dist) -> None:
    if d.active and dist.is_initialized():
        dist.destroy_process_group()

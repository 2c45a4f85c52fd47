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
import sys
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
    if rank == 0 and shared_rendezvous_store():
        print(
            "note: torchrun restarts workers (--max-restarts) but shares its rendezvous store "
            "across restarts, where a restarted group can read the old group's addresses; "
            "launch it with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "
            "(docs/more-than-one-gpu-or-machine.md)",
            file=sys.stderr,
            flush=True,
        )
    return Dist(rank, world, local, active=True, timeout_s=timeout_s), device


def shared_rendezvous_store() -> bool:
    """Whether this torchrun job may restart its workers while its agents share one store
    over every round: a restarted group can then find keys of the old one."""
    restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    return restarts > 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def restart_count() -> int:
    """How often torchrun's agent on this node restarted its workers after a failure
    (`--max-restarts`). An agent whose own workers were healthy restarts them for the others
    without counting, so this is 0 on some nodes of a restarted job."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def job_id() -> str:
    """The rendezvous id of this torchrun job (`--rdzv-id`; `--standalone` makes a fresh one),
    "" outside torchrun or for torchrun's default id, which every job shares."""
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    return "" if run == "none" else run


def guarded(d: Dist, work: Callable[[], T]) -> T:
    """`work()`, with a collective that failed or timed out (a peer hung, died or was killed)
    turned into one line."""
    if not d.active:
        return work()
    try:
        return work()
    except RuntimeError as err:
        cause = collective_failure(err)
        if cause is None:
            raise
        first = (str(cause).strip().splitlines() or ["no detail"])[0][:240]
        raise MtError(
            f"train: rank {d.rank}: another process did not answer within "
            f"train.collective_timeout_s ({d.timeout_s:g} s) or left the group; stopping "
            f"({first})",
            code=1,
        ) from None


def collective_failure(err: BaseException) -> BaseException | None:
    """The collective that timed out or lost a peer behind `err`, if one did: torch's own
    DistError (NCCL, the store), or the plain RuntimeError gloo raises from its transport. The
    chain is searched too: a worker of the DataLoader killed along with the group can raise
    while the collective's error is handled."""
    seen: BaseException | None = err
    for _ in range(8):  # a chain is short; bounded all the same
        if seen is None:
            return None
        text = str(seen)
        if isinstance(seen, dist.DistError) or "gloo/" in text or "NCCL" in text:
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


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


def from_rank0(d: Dist, value: float, device: torch.device) -> float:
    """Rank 0's `value` on every rank: its clock rules the time budget, so every rank takes
    the same learning rate (train.cooldown) and stops at the same step."""
    if not d.active:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.broadcast(t, src=0)
    return float(t.item())


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


def wrap(d: Dist, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """`model` in DDP when in a process group (which copies rank 0's weights to all), else
    `model` itself."""
    if not d.active:
        return model
    ids = [device.index] if device.type == "cuda" else None
    # The only buffer is the constant sinusoid table: nothing to broadcast each step.
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, broadcast_buffers=False)


def shutdown(d: Dist) -> None:
    if d.active and dist.is_initialized():
        dist.destroy_process_group()

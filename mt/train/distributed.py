"""PyTorch DDP under `torchrun`: who this process is, and the few collectives training needs.

`torchrun --nproc_per_node=N -m mt train CONFIG` sets WORLD_SIZE, RANK and LOCAL_RANK; without
them everything here is a no-op, so single-process training takes the same code path. Under
torchrun the group is formed even for one process, so one GPU can smoke-test the DDP path (NCCL,
the DDP wrapper, the collectives). Rank 0 alone writes the tokenizer, caches, checkpoints and
logs; the others wait at barriers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    active: bool = False  # in a process group (under torchrun): DDP and collectives on

    @property
    def main(self) -> bool:
        return self.rank == 0


def init(device: torch.device) -> tuple[Dist, torch.device]:
    """Join the process group torchrun describes; CUDA ranks get their own GPU."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return Dist(), device
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(rank, world, local, active=True), device


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


def shutdown(d: Dist) -> None:
    if d.active and dist.is_initialized():
        dist.destroy_process_group()

"""Token-budget batches from length buckets, and collation with padding masks.

Sorting by length before cutting batches keeps padding small, so a budget of `max_tokens`
(counting padding) is spent on real tokens. Batch order is reshuffled every epoch from
(seed, epoch), which makes the data position of a run reproducible and therefore resumable.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from mt.tokenizer import BOS, EOS, PAD


@dataclass
class Batch:
    src: torch.Tensor  # (B, S) source ids ending in EOS, right-padded
    tgt_in: torch.Tensor  # (B, T) BOS + target ids
    tgt_out: torch.Tensor  # (B, T) target ids + EOS; PAD where there is no token
    src_tokens: int  # real (non-pad) source tokens
    tgt_tokens: int  # real target tokens, the loss normaliser

    @property
    def src_pad_mask(self) -> torch.Tensor:
        """(B, S) True where the source is padding."""
        return self.src.eq(PAD)

    def to(self, device: torch.device) -> Batch:
        return Batch(
            self.src.to(device, non_blocking=True),
            self.tgt_in.to(device, non_blocking=True),
            self.tgt_out.to(device, non_blocking=True),
            self.src_tokens,
            self.tgt_tokens,
        )


def pad(seqs: list[list[int]], value: int = PAD) -> torch.Tensor:
    """(B, max_len) tensor, right-padded with `value`."""
    width = max((len(s) for s in seqs), default=0)
    out = torch.full((len(seqs), max(width, 1)), value, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def collate(src: list[list[int]], tgt: list[list[int]]) -> Batch:
    tgt_in = pad([[BOS] + t for t in tgt])
    tgt_out = pad([t + [EOS] for t in tgt])
    return Batch(
        src=pad(src),
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        src_tokens=sum(len(s) for s in src),
        tgt_tokens=sum(len(t) + 1 for t in tgt),
    )


def token_batches(
    sizes: list[int], max_tokens: int, seed: int | None = None, epoch: int = 0
) -> list[list[int]]:
    """Index lists whose padded size (count x longest) stays within `max_tokens`.

    With a seed, examples of equal size are shuffled and the batch order is shuffled, both from
    (seed, epoch); without one the order is deterministic (for decoding). An example longer than
    the budget gets a batch of its own rather than being dropped.
    """
    rng = random.Random(seed * 100_003 + epoch) if seed is not None else None
    order = list(range(len(sizes)))
    if rng is not None:
        rng.shuffle(order)  # random order within equal sizes after the stable sort below
    order.sort(key=lambda i: sizes[i])
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        size = max(sizes[i], 1)
        if current and max(longest, size) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, size)
    if current:
        batches.append(current)
    if rng is not None:
        rng.shuffle(batches)
    return batches


def shard(batches: list[list[int]], rank: int, world: int) -> list[list[int]]:
    """This rank's batches; every rank gets the same count so DDP steps stay in lockstep."""
    if world == 1:
        return batches
    usable = len(batches) - len(batches) % world
    return batches[rank:usable:world]

"""Token-budget batches from length buckets, and collation with padding masks.

Sorting by length before cutting batches keeps padding small, so a budget of `max_tokens`
(counting padding) is spent on real tokens. Batch order is reshuffled every epoch from
(seed, epoch), which makes the data position of a run reproducible and therefore resumable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
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

    def pin_memory(self) -> Batch:
        """Page-locked copies, so `to(cuda, non_blocking=True)` overlaps the step (DataLoader)."""
        return Batch(
            self.src.pin_memory(),
            self.tgt_in.pin_memory(),
            self.tgt_out.pin_memory(),
            self.src_tokens,
            self.tgt_tokens,
        )

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
    sizes: Sequence[int] | np.ndarray,
    max_tokens: int,
    seed: int | None = None,
    epoch: int = 0,
    items: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Index arrays whose padded size (count x longest) stays within `max_tokens`.

    `items` are the indices to batch (default: all of `sizes`; repeats allowed, for corpora
    sampled more than once per epoch). With a seed, items of equal size are shuffled and the
    batch order is shuffled, both from (seed, epoch); without one the order is deterministic (for
    decoding). An item longer than the budget gets a batch of its own rather than being dropped.
    Everything is numpy: the only Python loop runs once per batch, not per sentence.
    """
    sizes = np.asarray(sizes)
    rng = np.random.default_rng([seed, epoch]) if seed is not None else None
    if items is None:
        items = np.arange(len(sizes), dtype=np.int64)
    if len(items) == 0:
        return []
    if rng is not None:
        items = items[rng.permutation(len(items))]  # random order within equal sizes
    s = np.maximum(sizes[items], 1)
    if s.max() < 1 << 16:
        s = s.astype(np.uint16)  # numpy's stable sort is a radix sort for 16-bit keys
    order = np.argsort(s, kind="stable")
    items, s = items[order], s[order].astype(np.int64)
    bounds = []
    i, n = 0, len(s)
    while i < n:
        # The most items from i on whose count x size (the last, longest) fits the budget:
        # count x size grows with count, so bisect between 1 (always taken) and an upper bound.
        lo, hi = 1, min(n - i, max(max_tokens // int(s[i]), 1))
        if s[i + hi - 1] * hi <= max_tokens:
            lo = hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if s[i + mid - 1] * mid <= max_tokens:
                lo = mid
            else:
                hi = mid
        i += lo
        bounds.append(i)
    batches = np.split(items, bounds[:-1])
    if rng is not None:
        batches = [batches[j] for j in rng.permutation(len(batches))]
    return batches


def shard(batches: list[np.ndarray], rank: int, world: int) -> list[np.ndarray]:
    """This rank's batches; every rank gets the same count so DDP steps stay in lockstep."""
    if world == 1:
        return batches
    usable = len(batches) - len(batches) % world
    return batches[rank:usable:world]

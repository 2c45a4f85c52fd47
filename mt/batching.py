"""Token-budget batches from length buckets, and collation with padding masks.

Sorting by length before cutting batches keeps padding small, so a budget of `max_tokens`
(counting padding) is spent on real tokens. Batch order is reshuffled every epoch from
(seed, epoch), which makes the data position of a run reproducible and therefore resumable.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

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
    # (B,) bool on the host: the rows of corpora marked `general` (finetune.keep_on: general);
    # None where no corpus is marked. Bookkeeping, not model input: `to` leaves it on the host.
    general: torch.Tensor | None = None

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
            self.general,
        )

    def to(self, device: torch.device) -> Batch:
        return Batch(
            self.src.to(device, non_blocking=True),
            self.tgt_in.to(device, non_blocking=True),
            self.tgt_out.to(device, non_blocking=True),
            self.src_tokens,
            self.tgt_tokens,
            self.general,
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


class Batches(Sequence[np.ndarray]):
    """An epoch's batches: one index array and the (start, end) of each batch in it.

    Millions of examples make hundreds of thousands of batches; a list of arrays would be an
    object per batch, this is three arrays. Indexing gives a batch (a view), slicing gives
    Batches (how ranks take their share and a resumed run skips what it has done).
    """

    def __init__(self, items: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self.items, self.starts, self.ends = items, starts, ends

    def __len__(self) -> int:
        return len(self.starts)

    @overload
    def __getitem__(self, i: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, i: slice) -> Batches: ...

    def __getitem__(self, i: int | slice) -> np.ndarray | Batches:
        if isinstance(i, slice):
            return Batches(self.items, self.starts[i], self.ends[i])
        return self.items[self.starts[i] : self.ends[i]]

    def __iter__(self) -> Iterator[np.ndarray]:
        for a, b in zip(self.starts.tolist(), self.ends.tolist()):
            yield self.items[a:b]


def token_batches(
    sizes: Sequence[int] | np.ndarray,
    max_tokens: int,
    seed: int | None = None,
    epoch: int = 0,
    items: np.ndarray | None = None,
) -> Batches:
    """Index arrays whose padded size (count x longest) stays within `max_tokens`.

    `items` are the indices to batch (default: all of `sizes`; repeats allowed, for corpora
    sampled more than once per epoch). With a seed, items of equal size are shuffled and the
    batch order is shuffled, both from (seed, epoch); without one the order is deterministic (for
    decoding). An item longer than the budget gets a batch of its own rather than being dropped.
    Everything is numpy: Python loops run once per distinct size, never once per sentence.
    """
    sizes = np.asarray(sizes)
    if sizes.size and sizes.max() < 1 << 16:
        sizes = sizes.astype(np.uint16, copy=False)  # numpy's stable sort is a radix sort here
    keys = np.maximum(sizes if items is None else sizes[items], 1)  # an empty pair costs 1
    order = np.argsort(keys, kind="stable")
    items = order if items is None else items[order]
    if len(items) < 1 << 31:
        items = items.astype(np.int32)  # half the memory of an epoch plan
    if len(items) == 0:
        return Batches(items, np.zeros(0, np.int64), np.zeros(0, np.int64))
    s = keys[order]
    if seed is not None:
        # Random order within each run of equal size: shuffling a run in place touches only
        # that run (cache-friendly), where permuting everything first would touch it all.
        rng = np.random.default_rng([seed, epoch])
        edges = np.flatnonzero(np.diff(s)) + 1
        for lo, hi in zip([0, *edges.tolist()], [*edges.tolist(), len(s)]):
            rng.shuffle(items[lo:hi])
    ends = _greedy_cuts(s, max_tokens)
    starts = np.concatenate([[0], ends[:-1]])
    if seed is not None:
        shuffled = rng.permutation(len(ends))
        starts, ends = starts[shuffled], ends[shuffled]
    return Batches(items, starts, ends)


def _greedy_cuts(sorted_sizes: np.ndarray, max_tokens: int) -> np.ndarray:
    """End positions of the batches a greedy pass over ascending sizes would cut.

    Greedy: an item joins the open batch while (count + 1) x its size fits the budget (sizes
    ascend, so the newest item is the longest); otherwise it opens a new batch. Within a run of
    equal size `s` that is a batch of `max_tokens // s` items at a time, so the loop runs once
    per distinct size (a few hundred), not once per batch or item.
    """
    values, runs = np.unique(sorted_sizes, return_counts=True)
    cuts: list[np.ndarray] = []
    pos = count = 0  # items placed so far, items in the open batch
    for size, run in zip(values.tolist(), runs.tolist()):
        cap = max(max_tokens // size, 1)
        if count >= cap:  # the open batch cannot take even one item of this size
            cuts.append(np.array([pos]))
            count = 0
        take = min(cap - count, run)
        pos, count, run = pos + take, count + take, run - take
        if run:  # the open batch is full: close it, cut whole batches of `cap`, keep the last open
            full, rest = divmod(run, cap)
            if rest == 0:
                full, rest = full - 1, cap
            cuts.append(pos + cap * np.arange(full + 1))
            pos += cap * full + rest
            count = rest
    if count:
        cuts.append(np.array([pos]))
    return np.concatenate(cuts).astype(np.int64) if cuts else np.zeros(0, np.int64)


def shard(batches: Batches, rank: int, world: int) -> Batches:
    """This rank's batches; every rank gets the same count so DDP steps stay in lockstep."""
    if world == 1:
        return batches
    usable = len(batches) - len(batches) % world
    return batches[rank:usable:world]

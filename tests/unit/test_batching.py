"""Token-budget batches, epoch shuffling, collation and sharding."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
import torch

from mt.batching import collate, pad, shard, token_batches
from mt.tokenizer import BOS, EOS, PAD


def random_sizes(n: int = 500, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(1, 60) for _ in range(n)]


def as_lists(batches: list[np.ndarray]) -> list[list[int]]:
    return [b.tolist() for b in batches]


def reference_batches(sizes: list[int], max_tokens: int, items: list[int] | None = None):
    """The plain greedy rule: sort by size (stable), grow a batch while count x longest fits."""
    items = list(range(len(sizes))) if items is None else list(items)
    order = sorted(items, key=lambda i: max(sizes[i], 1))
    batches: list[list[int]] = []
    for i in order:
        size = max(sizes[i], 1)
        if batches and (len(batches[-1]) + 1) * size <= max_tokens:
            batches[-1].append(i)  # sorted: the new item is the batch's longest
        else:
            batches.append([i])
    return batches


def size_profile(batches, sizes) -> Counter:
    """The multiset of batches as sorted size lists: what shuffling equal sizes must not change."""
    return Counter(tuple(sorted(sizes[i] for i in b)) for b in batches)


@pytest.mark.parametrize("seed", [None, 3])
def test_batches_respect_the_budget(seed):
    sizes = random_sizes() + [300, 999]  # two examples longer than the budget
    batches = token_batches(sizes, max_tokens=256, seed=seed, epoch=1)
    assert all(isinstance(b, np.ndarray) and b.dtype.kind == "i" for b in batches)
    for batch in batches:
        longest = max(sizes[i] for i in batch)
        assert len(batch) * longest <= 256 or len(batch) == 1
    alone = [b for b in batches if len(b) * max(sizes[i] for i in b) > 256]
    assert sorted(i for b in alone for i in b.tolist()) == [500, 501]  # kept, each on its own


def test_batches_are_not_wastefully_small():
    sizes = [10] * 100
    batches = token_batches(sizes, max_tokens=100)
    assert [len(b) for b in batches] == [10] * 10


@pytest.mark.parametrize("seed", [None, 7])
def test_each_example_exactly_once(seed):
    sizes = random_sizes(n=777)
    for epoch in range(3):
        flat = [i for b in token_batches(sizes, 300, seed, epoch) for i in b.tolist()]
        assert sorted(flat) == list(range(777))


def test_batches_group_similar_lengths():
    sizes = random_sizes()
    for batch in token_batches(sizes, 256, seed=1):
        lengths = [sizes[i] for i in batch]
        assert max(lengths) - min(lengths) <= 10  # sorted by length before cutting


def test_epochs_reshuffle_reproducibly():
    sizes = random_sizes()
    e0 = as_lists(token_batches(sizes, 256, seed=5, epoch=0))
    e1 = as_lists(token_batches(sizes, 256, seed=5, epoch=1))
    assert e0 != e1
    assert e0 == as_lists(token_batches(sizes, 256, seed=5, epoch=0))
    assert e1 == as_lists(token_batches(sizes, 256, seed=5, epoch=1))
    assert e0 != as_lists(token_batches(sizes, 256, seed=6, epoch=0))


def test_equal_sizes_are_shuffled_within_the_length():
    sizes = [4] * 64
    a = token_batches(sizes, 16, seed=1, epoch=0)
    b = token_batches(sizes, 16, seed=1, epoch=1)
    assert {tuple(sorted(x.tolist())) for x in a} != {tuple(sorted(x.tolist())) for x in b}


def test_without_seed_the_order_is_by_length():
    sizes = [5, 1, 3, 3, 2]
    assert as_lists(token_batches(sizes, 6)) == [[1, 4], [2, 3], [0]]
    assert as_lists(token_batches([], 10)) == []
    assert as_lists(token_batches(np.array(sizes), 6, items=np.array([], np.int64))) == []


@pytest.mark.parametrize("trial", range(6))
def test_numpy_batches_equal_the_plain_greedy_rule(trial):
    rng = random.Random(trial)
    n = rng.choice([1, 2, 17, 300, 2000])
    top = rng.choice([3, 60, 200, 70_000])  # 70,000: sizes too wide for the 16-bit sort keys
    sizes = [rng.randint(0, top) for _ in range(n)]  # 0 counts as 1, like an empty pair
    budget = rng.choice([1, 50, 256, 4096, 100_000])
    expected = reference_batches(sizes, budget)
    assert as_lists(token_batches(sizes, budget)) == expected
    assert as_lists(token_batches(np.array(sizes, np.int64), budget)) == expected
    for epoch in range(2):
        seeded = as_lists(token_batches(sizes, budget, seed=trial, epoch=epoch))
        # A seed only shuffles equal sizes and the batch order: the same cuts, the same sizes.
        assert size_profile(seeded, sizes) == size_profile(expected, sizes)
        assert sorted(i for b in seeded for i in b) == list(range(n))


def test_uint16_sizes_do_not_overflow():
    sizes = np.array([60_000, 60_000, 5, 5], np.uint16)  # 2 x 60,000 overflows 16 bits
    batches = as_lists(token_batches(sizes, 100_000))
    assert batches == [[2, 3], [0], [1]]


def test_items_select_and_repeat():
    sizes = random_sizes(n=50, seed=2)
    items = np.array([3, 3, 3, 7, 7, 10, 49, 0], np.int64)
    for seed in (None, 4):
        batches = token_batches(sizes, 64, seed=seed, epoch=1, items=items)
        flat = [i for b in batches for i in b.tolist()]
        assert Counter(flat) == Counter(items.tolist())  # repeats are kept, nothing else added
        for b in batches:
            assert len(b) * max(sizes[i] for i in b) <= 64 or len(b) == 1
    expected = reference_batches(sizes, 64, items.tolist())
    assert as_lists(token_batches(sizes, 64, items=items)) == expected


def test_items_equal_to_all_indices_change_nothing():
    sizes = random_sizes(n=300, seed=4)
    everything = np.arange(300, dtype=np.int64)
    for seed in (None, 9):
        a = as_lists(token_batches(sizes, 200, seed=seed, epoch=2))
        b = as_lists(token_batches(sizes, 200, seed=seed, epoch=2, items=everything))
        assert a == b


def test_collate_shapes_and_special_tokens():
    src = [[5, 6, 7, EOS], [8, EOS]]
    tgt = [[9, 10], [11, 12, 13]]
    b = collate(src, tgt)
    assert b.src.tolist() == [[5, 6, 7, EOS], [8, EOS, PAD, PAD]]
    assert b.tgt_in.tolist() == [[BOS, 9, 10, PAD], [BOS, 11, 12, 13]]
    assert b.tgt_out.tolist() == [[9, 10, EOS, PAD], [11, 12, 13, EOS]]
    assert b.src.dtype == torch.long and b.tgt_in.shape == b.tgt_out.shape == (2, 4)
    assert b.src_pad_mask.tolist() == [[False] * 4, [False, False, True, True]]
    assert b.src_tokens == 6
    assert b.tgt_tokens == 7  # targets plus EOS, the loss normaliser
    assert b.tgt_tokens == int(b.tgt_out.ne(PAD).sum())
    moved = b.to(torch.device("cpu"))
    assert torch.equal(moved.src, b.src) and moved.tgt_tokens == 7


def test_collate_empty_target():
    b = collate([[5, EOS]], [[]])
    assert b.tgt_in.tolist() == [[BOS]]
    assert b.tgt_out.tolist() == [[EOS]]


def test_pad():
    assert pad([[1], [2, 3, 4]], value=-1).tolist() == [[1, -1, -1], [2, 3, 4]]
    assert pad([[]]).shape == (1, 1)


@pytest.mark.parametrize(("n", "world"), [(10, 2), (11, 2), (11, 3), (3, 4), (9, 1)])
def test_shard_equal_counts_and_disjoint(n, world):
    batches = [[i] for i in range(n)]
    parts = [shard(batches, r, world) for r in range(world)]
    assert len({len(p) for p in parts}) == 1
    assert len(parts[0]) == n // world
    seen = [b[0] for p in parts for b in p]
    assert len(seen) == len(set(seen))
    assert len(seen) == n - n % world  # only the remainder is dropped

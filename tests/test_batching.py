"""Token-budget batches, epoch shuffling, collation and sharding."""

from __future__ import annotations

import random

import pytest
import torch

from mt.batching import collate, pad, shard, token_batches
from mt.tokenizer import BOS, EOS, PAD


def random_sizes(n: int = 500, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(1, 60) for _ in range(n)]


@pytest.mark.parametrize("seed", [None, 3])
def test_batches_respect_the_budget(seed):
    sizes = random_sizes() + [300, 999]  # two examples longer than the budget
    batches = token_batches(sizes, max_tokens=256, seed=seed, epoch=1)
    for batch in batches:
        longest = max(sizes[i] for i in batch)
        assert len(batch) * longest <= 256 or len(batch) == 1
    alone = [b for b in batches if len(b) * max(sizes[i] for i in b) > 256]
    assert sorted(i for b in alone for i in b) == [500, 501]  # kept, each on its own


def test_batches_are_not_wastefully_small():
    sizes = [10] * 100
    batches = token_batches(sizes, max_tokens=100)
    assert [len(b) for b in batches] == [10] * 10


@pytest.mark.parametrize("seed", [None, 7])
def test_each_example_exactly_once(seed):
    sizes = random_sizes(n=777)
    for epoch in range(3):
        flat = [i for b in token_batches(sizes, 300, seed, epoch) for i in b]
        assert sorted(flat) == list(range(777))


def test_batches_group_similar_lengths():
    sizes = random_sizes()
    for batch in token_batches(sizes, 256, seed=1):
        lengths = [sizes[i] for i in batch]
        assert max(lengths) - min(lengths) <= 10  # sorted by length before cutting


def test_epochs_reshuffle_reproducibly():
    sizes = random_sizes()
    e0 = token_batches(sizes, 256, seed=5, epoch=0)
    e1 = token_batches(sizes, 256, seed=5, epoch=1)
    assert e0 != e1
    assert e0 == token_batches(sizes, 256, seed=5, epoch=0)
    assert e1 == token_batches(sizes, 256, seed=5, epoch=1)
    assert e0 != token_batches(sizes, 256, seed=6, epoch=0)


def test_equal_sizes_are_shuffled_within_the_length():
    sizes = [4] * 64
    a = token_batches(sizes, 16, seed=1, epoch=0)
    b = token_batches(sizes, 16, seed=1, epoch=1)
    assert {tuple(sorted(x)) for x in a} != {tuple(sorted(x)) for x in b}


def test_without_seed_the_order_is_by_length():
    sizes = [5, 1, 3, 3, 2]
    assert token_batches(sizes, 6) == [[1, 4], [2, 3], [0]]
    assert token_batches([], 10) == []


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

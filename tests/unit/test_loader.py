"""Batches straight from token stores: collation, epoch plans over weighted corpora, the loader."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from mt.batching import Batch, collate
from mt.data.loader import TrainingSet, collate_store, iterate
from mt.data.store import StoreWriter, TokenStore, token_dtype
from mt.tokenizer import BOS, EOS, PAD

Pairs = list[tuple[list[int], list[int]]]


def random_pairs(n: int, seed: int, max_len: int = 25) -> Pairs:
    rng = random.Random(seed)
    pairs = [
        (
            [rng.randrange(4, 500) for _ in range(rng.randint(1, max_len))],
            [rng.randrange(4, 500) for _ in range(rng.randint(0, max_len))],
        )
        for _ in range(n)
    ]
    pairs[0] = ([7], [])  # an empty target: BOS alone in, EOS alone out
    return pairs


def make_store(folder: Path, pairs: Pairs) -> TokenStore:
    dtype = token_dtype(500)
    writer = StoreWriter(folder, dtype)
    for k in range(0, len(pairs), 64):
        part = pairs[k : k + 64]
        sides = []
        for j in (0, 1):
            seqs = [p[j] for p in part]
            flat = np.array([i for s in seqs for i in s], dtype)
            sides.append((flat, np.array([len(s) for s in seqs], np.int64)))
        writer.append(sides[0], sides[1])
    writer.finish({})
    return TokenStore.open(folder)


def reference(pairs: Pairs, idx) -> Batch:
    """What `mt.batching.collate` makes of the same pairs (the source gets its EOS first)."""
    return collate([pairs[i][0] + [EOS] for i in idx], [pairs[i][1] for i in idx])


def assert_same_batch(a: Batch, b: Batch) -> None:
    for name in ("src", "tgt_in", "tgt_out"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype == torch.long, name
        assert torch.equal(x, y), name
    assert (a.src_tokens, a.tgt_tokens) == (b.src_tokens, b.tgt_tokens)


def rows(batch: Batch) -> Counter:
    """The batch's pairs as a multiset (source with EOS, target with EOS), padding removed."""
    out = Counter()
    for s, ti, to in zip(batch.src.tolist(), batch.tgt_in.tolist(), batch.tgt_out.tolist()):
        s = [i for i in s if i != PAD]
        to = [i for i in to if i != PAD]
        assert [i for i in ti if i != PAD][1:] == to[:-1]  # tgt_in is tgt_out shifted right
        out[(tuple(s), tuple(to))] += 1
    return out


@pytest.fixture(scope="module")
def two_stores(tmp_path_factory) -> tuple[list[TokenStore], list[Pairs]]:
    root = tmp_path_factory.mktemp("stores")
    pairs = [random_pairs(300, seed=1), random_pairs(120, seed=2, max_len=40)]
    return [make_store(root / f"s{k}", p) for k, p in enumerate(pairs)], pairs


# --- collation ----------------------------------------------------------------------------------


def test_collate_store_equals_collate(two_stores):
    (store, _), (pairs, _) = two_stores
    rng = np.random.default_rng(0)
    for size in (1, 2, 17, 300):
        idx = rng.choice(300, size=size, replace=size > 100)  # any order, repeats allowed
        assert_same_batch(collate_store(store, idx), reference(pairs, idx))
    assert_same_batch(collate_store(store, np.array([0])), reference(pairs, [0]))


def test_collate_store_by_hand(tmp_path):
    store = make_store(tmp_path / "s", [([5, 6, 7], [9, 10]), ([8], [11, 12, 13]), ([4], [])])
    b = collate_store(store, np.array([1, 0, 2]))
    assert b.src.tolist() == [[8, EOS, PAD, PAD], [5, 6, 7, EOS], [4, EOS, PAD, PAD]]
    assert b.tgt_in.tolist() == [[BOS, 11, 12, 13], [BOS, 9, 10, PAD], [BOS, PAD, PAD, PAD]]
    assert b.tgt_out.tolist() == [[11, 12, 13, EOS], [9, 10, EOS, PAD], [EOS, PAD, PAD, PAD]]
    assert (b.src_tokens, b.tgt_tokens) == (8, 8)  # 5 + 3 EOS each side


def test_pair_sizes_are_the_longer_side_with_eos(two_stores):
    (store, _), (pairs, _) = two_stores
    assert store.sizes.tolist() == [max(len(s), len(t)) + 1 for s, t in pairs]


def test_mixed_corpora_in_one_batch(two_stores):
    stores, pairs = two_stores
    data = TrainingSet(stores, [1.0, 1.0])
    idx = np.array([5, 310, 0, 419, 300, 5, 299])  # 300 + k is pair k of the second corpus
    batch = data[idx]
    flat = pairs[0] + pairs[1]
    expected = reference(flat, idx)
    assert rows(batch) == rows(expected)
    assert batch.src.shape == expected.src.shape and batch.tgt_in.shape == expected.tgt_in.shape
    assert (batch.src_tokens, batch.tgt_tokens) == (expected.src_tokens, expected.tgt_tokens)


def test_rows_of_general_corpora_are_marked(two_stores):
    stores, pairs = two_stores
    idx = np.array([5, 310, 0, 419, 300, 5, 299])
    data = TrainingSet(stores, [1.0, 1.0], general=[False, True])
    batch = data[idx]
    second = {(tuple(s + [EOS]), tuple(t + [EOS])) for s, t in pairs[1]}
    first = {(tuple(s + [EOS]), tuple(t + [EOS])) for s, t in pairs[0]}
    assert batch.general is not None and batch.general.dtype == torch.bool
    assert batch.general.shape == (len(idx),)
    for s, to, mark in zip(batch.src.tolist(), batch.tgt_out.tolist(), batch.general.tolist()):
        pair = (tuple(i for i in s if i != PAD), tuple(i for i in to if i != PAD))
        assert pair in (second if mark else first), pair
    assert int(batch.general.sum()) == 3  # 310, 419, 300
    alone = TrainingSet(stores[1:], [1.0], general=[True])[np.array([0, 3])]
    assert alone.general.tolist() == [True, True]
    # no corpus marked: no mask at all, as before the option
    assert TrainingSet(stores, [1.0, 1.0], general=[False, False])[idx].general is None
    assert TrainingSet(stores, [1.0, 1.0])[idx].general is None


# --- epoch plans --------------------------------------------------------------------------------


def epoch_counts(data: TrainingSet, seed: int, epoch: int, max_tokens: int = 400) -> Counter:
    batches = data.epoch_batches(max_tokens, seed, epoch)
    for b in batches:
        assert len(b) * int(data.sizes[b].max()) <= max_tokens or len(b) == 1
    return Counter(i for b in batches for i in b.tolist())


def test_weight_one_covers_every_pair_once(two_stores):
    stores, _ = two_stores
    for data in (TrainingSet(stores[:1], [1.0]), TrainingSet(stores, [1.0, 1.0])):
        for epoch in range(3):
            counts = epoch_counts(data, seed=3, epoch=epoch)
            assert sorted(counts) == list(range(len(data))) and set(counts.values()) == {1}


def per_corpus(counts: Counter, data: TrainingSet) -> list[Counter]:
    """For each corpus: how many of its pairs were taken how many times ({times: pairs})."""
    out = []
    for k in range(len(data.stores)):
        lo, hi = int(data.starts[k]), int(data.starts[k + 1])
        times = Counter(counts.get(i, 0) for i in range(lo, hi))
        out.append(times)
    return out


def test_weights_half_and_two(two_stores):
    stores, _ = two_stores
    half = TrainingSet(stores, [1.0, 0.5])
    plans = [epoch_counts(half, seed=5, epoch=e) for e in range(3)]
    for counts in plans:
        assert per_corpus(counts, half) == [Counter({1: 300}), Counter({1: 60, 0: 60})]
    second = [frozenset(i for i in c if i >= 300) for c in plans]
    assert len(set(second)) == 3  # a fresh half of the second corpus every epoch
    assert plans[1] == epoch_counts(half, seed=5, epoch=1)
    assert [b.tolist() for b in half.epoch_batches(400, 5, 1)] == [
        b.tolist() for b in half.epoch_batches(400, 5, 1)
    ]
    assert plans[0] != epoch_counts(half, seed=6, epoch=0)

    double = TrainingSet(stores, [2.0, 1.0])
    for epoch in range(2):
        counts = epoch_counts(double, seed=5, epoch=epoch)
        assert per_corpus(counts, double) == [Counter({2: 300}), Counter({1: 120})]

    mixed = TrainingSet(stores, [1.5, 0.25])
    e0, e1 = (epoch_counts(mixed, seed=5, epoch=e) for e in (0, 1))
    assert per_corpus(e0, mixed) == [Counter({1: 150, 2: 150}), Counter({0: 90, 1: 30})]
    assert e0 != e1 and per_corpus(e1, mixed) == per_corpus(e0, mixed)


# --- the loader ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n_stores", [1, 2])
def test_workers_give_the_same_batches_in_the_same_order(two_stores, n_stores):
    stores, _ = two_stores
    data = TrainingSet(stores[:n_stores], [1.0, 0.5][:n_stores])
    batches = data.epoch_batches(300, seed=1, epoch=0)
    assert len(batches) > 10
    here = list(iterate(data, batches, workers=0, pin=False))
    there = list(iterate(data, batches, workers=1, pin=False))
    assert len(here) == len(there) == len(batches)
    for a, b in zip(here, there):
        assert_same_batch(a, b)
    for idx, b in zip(batches, here):  # and each is the batch of its index array
        assert b.src.size(0) == len(idx)


def test_closing_the_stream_early_stops_the_worker(two_stores):
    stores, _ = two_stores
    data = TrainingSet(stores[:1], [1.0])
    batches = data.epoch_batches(300, seed=2, epoch=0)
    stream = iterate(data, batches, workers=1, pin=False)
    first = [next(stream) for _ in range(3)]
    stream.close()  # what training does when it stops inside an epoch
    for idx, b in zip(batches, first):
        assert_same_batch(b, collate_store(stores[0], idx))

"""Subword regularisation (`tokenizer.sample_alpha`): sampled segmentations of the training text
prepared ahead as token stores, one per copy, read one copy per epoch."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from support.tasks import reverse_task_config

from mt.config import Config, DataConfig, TokenizerConfig
from mt.config_file import load_config
from mt.data.loader import TrainingSet
from mt.data.prepare import prepare


def pairs(store, n: int) -> list[tuple[list[int], list[int]]]:
    return [store.pair(i) for i in range(n)]


@pytest.fixture(scope="module")
def sampled(multi30k_dir, tmp_path_factory):
    cfg = Config()
    cfg.data = DataConfig(root=str(multi30k_dir), max_train_examples=300, max_valid_examples=20)
    cfg.tokenizer = TokenizerConfig(
        vocab_size=400, input_sentence_size=2000, sample_alpha=0.5, sample_copies=3
    )
    run_dir = tmp_path_factory.mktemp("sampled") / "run"
    return cfg, run_dir, prepare(cfg.data, cfg.tokenizer, cfg.train.seed, run_dir, log=False)


def test_each_copy_is_the_same_text_segmented_otherwise(sampled):
    cfg, _, prepared = sampled
    tok = prepared.tokenizer
    (best,) = prepared.train
    assert len(prepared.sampled) == 3 and all(len(c) == 1 for c in prepared.sampled)
    copies = [c[0] for c in prepared.sampled]
    n = 100
    for store in copies:
        assert len(store) == len(best) == 300  # no pair is long enough to be dropped
        for (s, t), (bs, bt) in zip(pairs(store, n), pairs(best, n)):
            assert tok.src.decode(s) == tok.src.decode(bs)  # the same sentence
            assert tok.tgt.decode(t) == tok.tgt.decode(bt)
        changed = sum(p != q for p, q in zip(pairs(store, n), pairs(best, n)))
        assert changed > n // 2  # mostly segmented otherwise than the best segmentation
        assert store.src.sum() != best.src.sum()
    assert pairs(copies[0], n) != pairs(copies[1], n) != pairs(copies[2], n)
    # Dev is never sampled: the best segmentation.
    (dev,) = prepared.valid
    assert dev.pair(0) == (tok.src.encode(dev_line(cfg)), dev.pair(0)[1])


def dev_line(cfg: Config) -> str:
    from mt.data.corpus import read_parallel

    return read_parallel(cfg.data, "val", 1)[0][0]


def test_a_copy_built_again_is_the_same(sampled, tmp_path):
    cfg, run_dir, prepared = copy.deepcopy(sampled)
    cfg.data.cache_dir = str(tmp_path / "cache")  # a fresh cache: every store is built again
    again = prepare(
        cfg.data, cfg.tokenizer, cfg.train.seed, run_dir, log=False, tokenizer=prepared.tokenizer
    )
    for a, b in zip(prepared.sampled, again.sampled):
        assert a[0].folder != b[0].folder
        assert np.array_equal(a[0].src, b[0].src) and np.array_equal(a[0].tgt, b[0].tgt)


def test_an_epoch_reads_one_copy_in_turn(sampled):
    _, _, prepared = sampled
    data = TrainingSet(prepared.train, [1.0], copies=prepared.sampled)
    assert data.stores == prepared.train  # until an epoch picks a copy
    for epoch in range(5):
        data.use_copy(epoch)
        store = prepared.sampled[epoch % 3][0]
        assert data.stores == [store]
        assert np.array_equal(data.sizes, store.sizes)
        (idx, *_) = data.epoch_batches(2048, 1, epoch)
        batch = data[idx]
        s, t = store.pair(int(idx[0]))
        assert batch.src[0, : len(s)].tolist() == s and batch.tgt_out[0, : len(t)].tolist() == t


def test_a_run_with_sampling_trains_on_the_copies(tmp_path, mt_cli):
    config = reverse_task_config(tmp_path, max_steps=30, log_every=1)
    sets = ["tokenizer.sample_alpha=0.5", "tokenizer.sample_copies=2"]
    run_dir = tmp_path / "run"
    result = mt_cli("train", config, "--run-dir", run_dir, "--set", sets[0], "--set", sets[1])
    assert result.rc == 0, result.err
    stores = [p for p in (run_dir / "cache").iterdir() if p.name.startswith("train-")]
    assert len(stores) == 3  # the best segmentation and two sampled copies
    # The first epoch had as many steps as copy 0 has batches, not the best segmentation.
    cfg = load_config(config, sets)
    prepared = prepare(cfg.data, cfg.tokenizer, cfg.train.seed, run_dir, build=False, log=False)
    data = TrainingSet(prepared.train, [1.0], copies=prepared.sampled)
    steps_best = len(data.epoch_batches(cfg.train.max_tokens, cfg.train.seed, 0))
    data.use_copy(0)
    steps_copy = len(data.epoch_batches(cfg.train.max_tokens, cfg.train.seed, 0))
    assert steps_copy != steps_best
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").open()]
    assert max(r["step"] for r in records if r.get("epoch") == 0) == steps_copy
    assert any(r.get("epoch") == 1 for r in records)

"""Preparing token stores: the vectorised filter, the drop counts, the tokenizer's reservoir
sample, a real Multi30k slice encoded exactly as sentencepiece encodes it, several corpora."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import numpy as np
import pytest
from support.references import keep_pair

import mt.data.build as build
import mt.data.prepare as prep
from mt.config import Config, CorpusConfig, DataConfig, TokenizerConfig
from mt.data.build import FILTERS, drop_reasons
from mt.data.cache import Filter
from mt.data.corpus import Source, pair_chunks, read_parallel
from mt.data.prepare import prepare, sample_pairs
from mt.data.store import TokenStore
from mt.tokenizer import EOS, Tokenizer, train_tokenizer


def write_pairs(root: Path, name: str, src: list[str], tgt: list[str]) -> Source:
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{name}.de").write_text("".join(s + "\n" for s in src), encoding="utf-8")
    (root / f"{name}.en").write_text("".join(t + "\n" for t in tgt), encoding="utf-8")
    return Source(name, str(root), "text", "de", "en")


def small_chunks(monkeypatch, chunk: int) -> None:
    """Make preparation read `chunk` pairs at a time, to cross chunk boundaries on small data."""
    for module in (build, prep):  # a store's build and the tokenizer's sample
        monkeypatch.setattr(module, "pair_chunks", functools.partial(pair_chunks, chunk=chunk))


def all_pairs(store: TokenStore) -> list[tuple[list[int], list[int]]]:
    return [store.pair(i) for i in range(len(store))]


# --- the filter ---------------------------------------------------------------------------------


@pytest.mark.parametrize("trial", range(4))
def test_drop_reasons_agree_with_keep_pair(trial):
    rng = np.random.default_rng(trial)
    n = 3000
    ls = rng.integers(0, 50, n)
    lt = rng.integers(0, 50, n)
    ls[:50] = 0  # plenty of empty sides
    lt[25:75] = 0
    f = Filter(int(rng.integers(1, 45)), float(rng.choice([1.0, 1.5, 2.0, 2.7, 3.0])))
    reason = drop_reasons(ls.astype(np.uint16), lt.astype(np.int64), f)
    assert reason.shape == (n,)
    for r, a, b in zip(reason.tolist(), ls.tolist(), lt.tolist()):
        empty = a == 0 or b == 0
        keep = keep_pair([7] * a + [EOS], [7] * b, f.max_len, f.max_ratio)
        too_long = a + 1 > f.max_len or b + 1 > f.max_len
        # 0 exactly when kept; otherwise the first filter in FILTERS order that drops it.
        expected = 0 if keep and not empty else 1 if empty else 2 if too_long else 3
        assert r == expected, (a, b, f)
    assert set(reason.tolist()) == {0, 1, 2, 3}  # every branch was taken


def test_drop_reasons_boundaries():
    f = Filter(max_len=5, max_ratio=2.0)
    ls = np.array([4, 5, 4, 1, 1, 1, 0, 3, 0])
    lt = np.array([4, 4, 5, 1, 2, 3, 9, 0, 0])
    # With EOS: 5/5 kept, 6 too long, 6 too long, 2/2, 2/3 ratio 1.5, 2/4 ratio 2 kept, empties.
    assert drop_reasons(ls, lt, f).tolist() == [0, 2, 2, 0, 0, 0, 1, 1, 1]
    assert drop_reasons(np.array([1]), np.array([4]), f).tolist() == [3]  # 2 vs 5: 2.5
    assert drop_reasons(np.array([], np.int64), np.array([], np.int64), f).tolist() == []


def test_drop_counts_in_the_summary(tmp_path, monkeypatch):
    rng = random.Random(1)
    words = ["Hund", "Katze", "Mann", "Frau", "spielt", "im", "Park", "ein", "zwei", "drei"]
    src = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 14))) for _ in range(400)]
    tgt = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 14))) for _ in range(400)]
    tok = train_tokenizer(src, tgt, TokenizerConfig(vocab_size=40))
    source = write_pairs(tmp_path / "d", "train", src, tgt)
    f = Filter(max_len=12, max_ratio=2.0)
    small_chunks(monkeypatch, 37)
    store = build.build_store(source, tok, tmp_path / "store", f, log=False)

    src_ids, tgt_ids = tok.src.encode(src), tok.tgt.encode(tgt)
    reason = drop_reasons(
        np.array([len(s) for s in src_ids]), np.array([len(t) for t in tgt_ids]), f
    )
    counts = np.bincount(reason, minlength=4).tolist()
    assert min(counts) > 10  # the data exercises every filter
    summary = store.meta["summary"]
    assert summary["pairs_read"] == 400
    assert summary["pairs_kept"] == len(store) == counts[0]
    assert summary["dropped"] == {name: counts[i + 1] for i, name in enumerate(FILTERS)}
    assert summary["source"] == str(tmp_path / "d" / "train.de")
    kept = [(s, t) for s, t, r in zip(src_ids, tgt_ids, reason) if r == 0]
    assert all_pairs(store) == kept


# --- the tokenizer's sample ---------------------------------------------------------------------


def test_sample_is_everything_when_small(tmp_path):
    src = [f"s{i}" for i in range(12)]
    source = write_pairs(tmp_path, "train", src, [f"t{i}" for i in range(12)])
    assert sample_pairs([source], 20, 0, seed=0) == (src, [f"t{i}" for i in range(12)])
    assert sample_pairs([source], 12, 0, seed=0)[0] == src
    got, _ = sample_pairs([source], 20, 5, seed=0)  # a limit per corpus, as in preparation
    assert got == src[:5]


def test_reservoir_sample_is_uniform(tmp_path, monkeypatch):
    """Every pair is equally likely to be sampled, wherever it is in the stream."""
    n_items, n, trials = 12, 4, 800
    a = write_pairs(
        tmp_path / "a", "train", [f"s{i}" for i in range(7)], [f"t{i}" for i in range(7)]
    )
    b = write_pairs(
        tmp_path / "b", "train", [f"s{i}" for i in range(7, 12)], [f"t{i}" for i in range(7, 12)]
    )
    small_chunks(monkeypatch, 4)  # chunks of 4, 3 | 4, 1: chunk and corpus boundaries
    counts = np.zeros(n_items)
    for seed in range(trials):
        src, tgt = sample_pairs([a, b], n, 0, seed)
        assert len(src) == len(tgt) == n
        assert [t[1:] for t in tgt] == [s[1:] for s in src]  # pairs stay aligned
        ids = [int(s[1:]) for s in src]
        assert len(set(ids)) == n  # without replacement
        counts[ids] += 1
    expected = trials * n / n_items
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # 11 degrees of freedom: P(chi2 > 26.2) < 0.006 for a uniform sampler (less, as the n picks
    # of a trial are distinct); an off-by-one in the slot draw (U[0, k) for U[0, k]) gives 50-90.
    assert chi2 < 26.2, counts.tolist()
    assert sample_pairs([a, b], n, 0, 3) == sample_pairs([a, b], n, 0, 3)


# --- a real slice -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def multi30k_run(multi30k_dir, tmp_path_factory) -> tuple[Config, Path, prep.Prepared]:
    cfg = Config()
    cfg.data = DataConfig(
        root=str(multi30k_dir), max_train_examples=3000, max_valid_examples=300, max_len=40
    )
    cfg.tokenizer = TokenizerConfig(vocab_size=500, input_sentence_size=2000)
    run_dir = tmp_path_factory.mktemp("prep") / "run"
    return cfg, run_dir, prepare(cfg.data, cfg.tokenizer, cfg.train.seed, run_dir, log=False)


def test_multi30k_slice_holds_the_sentencepiece_ids(multi30k_run):
    cfg, run_dir, prepared = multi30k_run
    tok = prepared.tokenizer
    assert Tokenizer.load(run_dir).fingerprint() == tok.fingerprint()  # saved for training
    assert tok.src_vocab_size == 500
    src, tgt = read_parallel(cfg.data, "train", 3000)
    (store,) = prepared.train
    assert store.src.dtype == np.uint16
    kept = []
    for s, t in zip(src, tgt):
        s_ids, t_ids = tok.src.encode(s), tok.tgt.encode(t)
        if s_ids and t_ids and keep_pair(s_ids + [EOS], t_ids, 40, cfg.data.max_len_ratio):
            kept.append((s_ids, t_ids))
    assert 2000 < len(kept) < 2900  # max_len 40 drops the longer sentences
    assert all_pairs(store) == kept
    assert store.meta["summary"]["pairs_read"] == 3000
    # The dev store is not filtered: every pair, in order.
    vs, vt = read_parallel(cfg.data, "val", 300)
    assert all_pairs(prepared.valid[0]) == list(zip(tok.src.encode(vs), tok.tgt.encode(vt)))
    assert prepared.weights == [1.0]


def test_prepared_again_is_only_opened(multi30k_run, monkeypatch):
    cfg, run_dir, prepared = multi30k_run

    def fail(*args, **kwargs):
        raise AssertionError("prepared again")

    monkeypatch.setattr(build, "build_store", fail)
    monkeypatch.setattr(prep, "train_tokenizer", fail)
    again = prepare(cfg.data, cfg.tokenizer, cfg.train.seed, run_dir, log=False)
    assert [s.folder for s in again.train] == [s.folder for s in prepared.train]
    assert again.valid[0].folder == prepared.valid[0].folder
    only_open = prepare(
        cfg.data, cfg.tokenizer, cfg.train.seed, run_dir, build=False, log=False
    )  # what other DDP ranks do
    assert len(only_open.train[0]) == len(prepared.train[0])


# --- several corpora ----------------------------------------------------------------------------


def test_two_corpora_give_one_store_each(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    rng = random.Random(2)
    words = ["ka", "lo", "mi", "nu", "pe", "ri", "so", "tu"]

    def sentences(n: int) -> list[str]:
        return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 6))) for _ in range(n)]

    a_src, a_tgt = sentences(30), sentences(30)
    b_src, b_tgt = sentences(50), sentences(50)
    (root / "clean.tsv").write_text(
        "".join(f"{s}\t{t}\n" for s, t in zip(a_src, a_tgt)), encoding="utf-8"
    )
    write_pairs(root / "crawl", "web", b_src, b_tgt)
    write_pairs(root, "val", a_src[:5], a_tgt[:5])
    cfg = Config()
    cfg.data = DataConfig(
        root=str(root),
        corpora=[
            CorpusConfig(name="clean.tsv", format="tsv", weight=2.0),
            CorpusConfig(name="web", root=str(root / "crawl"), weight=0.5),
        ],
    )
    cfg.tokenizer = TokenizerConfig(vocab_size=30)
    prepared = prepare(cfg.data, cfg.tokenizer, cfg.train.seed, tmp_path / "run", log=False)
    tok = prepared.tokenizer
    assert prepared.weights == [2.0, 0.5]
    clean, web = prepared.train

    def kept(src: list[str], tgt: list[str]) -> list[tuple[list[int], list[int]]]:
        pairs = zip(tok.src.encode(src), tok.tgt.encode(tgt))
        return [(s, t) for s, t in pairs if keep_pair(s + [EOS], t, 128, 3.0)]

    assert all_pairs(clean) == kept(a_src, a_tgt)
    assert all_pairs(web) == kept(b_src, b_tgt)
    assert len(clean) > 20 and len(web) > 35
    assert len(prepared.valid[0]) == 5
    names = sorted(p.name.split("-")[0] for p in (tmp_path / "run" / "cache").iterdir())
    assert names == ["clean.tsv", "val", "web"]


def test_cache_dir_setting_holds_the_stores(tmp_path):
    write_pairs(tmp_path / "data", "train", ["ka lo", "mi nu pe"], ["lo ka", "pe nu mi"])
    write_pairs(tmp_path / "data", "val", ["ka"], ["ka"])
    cfg = Config()
    cfg.data = DataConfig(root=str(tmp_path / "data"), cache_dir=str(tmp_path / "shared"))
    cfg.tokenizer = TokenizerConfig(vocab_size=20)
    prepared = prepare(cfg.data, cfg.tokenizer, cfg.train.seed, tmp_path / "run", log=False)
    assert prepared.train[0].folder.parent == tmp_path / "shared"
    assert len(list((tmp_path / "shared").iterdir())) == 2
    assert not (tmp_path / "run" / "cache").exists()

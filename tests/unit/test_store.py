"""The token store: round trips, plain `.npy` files, its size on disk, and writes that fail
(an error mid-write, a really full filesystem) without leaving a half store behind."""

from __future__ import annotations

import errno
import json
import os
import pickle
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

import mt.data.build as build
import mt.data.store as store_module
from mt.config import TokenizerConfig
from mt.data.corpus import Source, pair_chunks
from mt.data.store import StoreError, StoreWriter, TokenStore, token_dtype
from mt.errors import MtError
from mt.tokenizer import train_tokenizer

Pairs = list[tuple[list[int], list[int]]]
STORE_FILES = ("src.npy", "tgt.npy", "src.idx.npy", "tgt.idx.npy", "sizes.npy", "meta.json")


def random_pairs(n: int, vocab: int, seed: int = 0, max_len: int = 30) -> Pairs:
    rng = random.Random(seed)
    return [
        (
            [rng.randrange(vocab) for _ in range(rng.randint(0, max_len))],
            [rng.randrange(vocab) for _ in range(rng.randint(0, max_len))],
        )
        for _ in range(n)
    ]


def side(pairs: Pairs, k: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """One side of `pairs` as the writer takes it: (flat ids, lengths)."""
    seqs = [p[k] for p in pairs]
    flat = np.array([i for s in seqs for i in s], dtype=dtype)
    return flat, np.array([len(s) for s in seqs], dtype=np.int64)


def write_store(folder: Path, pairs: Pairs, vocab: int, pieces: int = 3) -> None:
    dtype = token_dtype(vocab)
    writer = StoreWriter(folder, dtype)
    step = max(len(pairs) // pieces, 1)
    for i in range(0, len(pairs), step):
        part = pairs[i : i + step]
        writer.append(side(part, 0, dtype), side(part, 1, dtype))
    writer.finish({"note": "test"})


def leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if ".tmp-" in p.name]


@pytest.mark.parametrize(
    ("vocab", "dtype"),
    [(600, np.uint16), (65_536, np.uint16), (65_537, np.int32), (250_000, np.int32)],
)
def test_round_trip(tmp_path, vocab, dtype):
    pairs = random_pairs(500, vocab, seed=vocab)
    pairs[7] = ([], [])  # empty sides survive too
    pairs[8] = ([vocab - 1] * 3, [0])  # the largest id
    folder = tmp_path / "store"
    write_store(folder, pairs, vocab, pieces=7)
    store = TokenStore.open(folder)
    assert len(store) == 500
    assert store.src.dtype == store.tgt.dtype == np.dtype(dtype)
    assert [store.pair(i) for i in range(500)] == pairs
    ls, lt = store.lengths()
    assert ls.tolist() == [len(s) for s, _ in pairs]
    assert lt.tolist() == [len(t) for _, t in pairs]
    meta = store.meta
    assert meta["pairs"] == 500 and meta["note"] == "test"
    assert meta["tokens"] == {"src": int(ls.sum()), "tgt": int(lt.sum())}


def test_files_are_plain_npy(tmp_path):
    pairs = random_pairs(200, 1000, seed=1)
    write_store(tmp_path / "store", pairs, 1000)
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == sorted(STORE_FILES)
    for k, name in enumerate(("src", "tgt")):
        flat = np.load(tmp_path / "store" / f"{name}.npy")  # no mmap, no mt: plain numpy
        idx = np.load(tmp_path / "store" / f"{name}.idx.npy")
        assert flat.dtype == np.uint16 and idx.dtype == np.int64
        assert flat.tolist() == [i for p in pairs for i in p[k]]
        assert idx.tolist() == np.concatenate([[0], np.cumsum([len(p[k]) for p in pairs])]).tolist()
        # The data starts on a 64-byte boundary, so a map of it is aligned for any dtype.
        mapped = np.load(tmp_path / "store" / f"{name}.npy", mmap_mode="r")
        assert mapped.offset % 64 == 0
    sizes = np.load(tmp_path / "store" / "sizes.npy")
    assert sizes.dtype == np.uint16
    assert sizes.tolist() == [max(len(src), len(tgt)) + 1 for src, tgt in pairs]


def test_bytes_on_disk(tmp_path):
    overheads = []
    for n in (10, 5_000):
        pairs = random_pairs(n, 8000, seed=n)
        folder = tmp_path / f"s{n}"
        write_store(folder, pairs, 8000)
        tokens = sum(len(s) + len(t) for s, t in pairs)
        size = sum(p.stat().st_size for p in folder.iterdir())
        # 2 bytes a token; a pair: 2 int64 offsets and its uint16 batching size
        overheads.append(size - 2 * tokens - 18 * n)
    assert all(0 < o < 1500 for o in overheads), overheads
    assert abs(overheads[0] - overheads[1]) < 16  # a constant: only meta.json's digits differ


def test_an_empty_store_opens(tmp_path):
    write_store(tmp_path / "store", [], 100)
    store = TokenStore.open(tmp_path / "store")
    assert len(store) == 0 and store.lengths()[0].tolist() == []


def test_offsets_that_disagree_are_not_trusted(tmp_path):
    folder = tmp_path / "store"
    write_store(folder, random_pairs(20, 100), 100)
    idx = np.load(folder / "src.idx.npy")
    idx[-1] -= 1
    np.save(folder / "src.idx.npy", idx)
    with pytest.raises(StoreError, match="disagree"):
        TokenStore.open(folder)


def test_pickling_maps_again_instead_of_copying(tmp_path):
    pairs = random_pairs(3000, 600, seed=2)
    write_store(tmp_path / "store", pairs, 600)
    store = TokenStore.open(tmp_path / "store")
    data = pickle.dumps(store)
    assert len(data) < 1000  # the folder, not the arrays: a loader worker maps the same files
    copy = pickle.loads(data)
    assert [copy.pair(i) for i in range(0, 3000, 97)] == [pairs[i] for i in range(0, 3000, 97)]


# --- failures while writing ---------------------------------------------------------------------


def test_abort_mid_write_keeps_the_previous_store(tmp_path):
    folder = tmp_path / "cache" / "train-abc"
    old = random_pairs(50, 300, seed=3)
    write_store(folder, old, 300)
    writer = StoreWriter(folder, token_dtype(300))
    new = random_pairs(40, 300, seed=4)
    writer.append(side(new, 0, np.dtype(np.uint16)), side(new, 1, np.dtype(np.uint16)))
    assert leftovers(folder.parent)  # the new store is written beside the old one
    writer.abort()
    assert leftovers(folder.parent) == []
    assert [TokenStore.open(folder).pair(i) for i in range(50)] == old


def test_write_error_mid_write_keeps_the_previous_store(tmp_path, monkeypatch):
    folder = tmp_path / "cache" / "train-abc"
    old = random_pairs(50, 300, seed=3)
    write_store(folder, old, 300)
    real = store_module._Appender.append
    calls = []

    def failing(self, values):
        calls.append(1)
        if len(calls) > 6:  # the offsets' first zero and one full append went through
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, values)

    monkeypatch.setattr(store_module._Appender, "append", failing)
    with pytest.raises(MtError) as info:
        write_store(folder, random_pairs(40, 300, seed=4), 300)
    assert "cannot write the token store (No space left on device)" in str(info.value)
    assert str(folder) in str(info.value)
    assert leftovers(folder.parent) == []
    assert [TokenStore.open(folder).pair(i) for i in range(50)] == old


def test_reading_error_in_a_later_chunk_leaves_no_store(tmp_path, monkeypatch):
    root = tmp_path / "d"
    root.mkdir()
    lines = [f"Ein Hund {i}." for i in range(30)]
    (root / "train.de").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "train.en").write_bytes(
        ("\n".join(lines[:25]) + "\n").encode() + b"bad \xff\n" + b"x\n" * 4
    )
    tok = train_tokenizer(lines, lines, TokenizerConfig(vocab_size=40))
    monkeypatch.setattr(build, "pair_chunks", lambda s, limit=0: pair_chunks(s, 4, limit))
    appended = []
    real = StoreWriter.append
    monkeypatch.setattr(
        StoreWriter, "append", lambda self, *a: appended.append(1) or real(self, *a)
    )
    folder = tmp_path / "cache" / "train-x"
    with pytest.raises(MtError) as info:
        build.build_store(Source("train", str(root), "text", "de", "en"), tok, folder, None)
    assert str(info.value) == f"{root / 'train.en'}:26: invalid UTF-8"
    assert len(appended) == 6  # six chunks of four were written before the bad one
    assert list(folder.parent.iterdir()) == []


# --- a real full filesystem ---------------------------------------------------------------------


@pytest.fixture
def tiny_fs(tmp_path):
    """A 1 MiB tmpfs (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "fs"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip() or done.returncode}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def fill_a_store(folder: Path) -> MtError:
    """Write about 3 MiB of pairs into `folder`; returns the error that stops it."""
    rng = np.random.default_rng(0)
    writer = StoreWriter(folder, np.dtype(np.uint16))
    with pytest.raises(MtError) as info:
        for _ in range(30):
            lengths = rng.integers(1, 40, 2_000)
            flat = rng.integers(0, 600, int(lengths.sum())).astype(np.uint16)
            writer.append((flat, lengths), (flat, lengths))
        writer.finish({})
    return info.value


def test_full_filesystem_is_a_user_error(tiny_fs):
    cache = tiny_fs / "cache"
    old = random_pairs(20, 300, seed=5)
    write_store(cache / "train-abc", old, 300)
    err = fill_a_store(cache / "train-abc")
    assert str(cache / "train-abc") in str(err)
    assert "cannot write the token store (No space left on device)" in str(err)
    assert "\n" not in str(err)
    assert leftovers(cache) == []
    assert [TokenStore.open(cache / "train-abc").pair(i) for i in range(20)] == old
    err = fill_a_store(cache / "valid-abc")  # no previous store: nothing at all is left
    assert leftovers(cache) == [] and not (cache / "valid-abc").exists()


def test_full_filesystem_message_names_a_real_path(tiny_fs):
    folder = tiny_fs / "cache" / "train-abc"
    folder.parent.mkdir()
    err = fill_a_store(folder)
    named = Path(str(err).split(": cannot write")[0])
    # The store folder or one of its files, not a path made of the folder and the temp name.
    assert named == folder or (named.parent == folder and named.name in STORE_FILES), str(err)


def test_full_filesystem_through_build_store(tiny_fs, tmp_path):
    root = tmp_path / "d"
    root.mkdir()
    rng = random.Random(0)
    words = ["Hund", "Katze", "Mann", "Frau", "spielt", "liest", "im", "Park", "ein", "zwei"]
    lines = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(40_000)]
    for lang in ("de", "en"):
        (root / f"train.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    tok = train_tokenizer(lines[:500], lines[:500], TokenizerConfig(vocab_size=40))
    folder = tiny_fs / "cache" / "train-abc"
    folder.parent.mkdir()
    source = Source("train", str(root), "text", "de", "en")
    with pytest.raises(MtError) as info:
        build.build_store(source, tok, folder, build.Filter(128, 3.0), log=False)
    assert str(folder) in str(info.value) and "No space left on device" in str(info.value)
    assert list(folder.parent.iterdir()) == []


def test_a_store_without_meta_json_is_not_trusted(tmp_path):
    folder = tmp_path / "store"
    write_store(folder, random_pairs(5, 50), 50)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["format"] == store_module.FORMAT_VERSION and meta["dtype"] == "<u2"
    (folder / "meta.json").unlink()
    with pytest.raises(StoreError, match="meta.json"):
        TokenStore.open(folder)

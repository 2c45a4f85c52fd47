"""Reading parallel corpora in every format, their errors, the length filter and the token store
cache (built once, reused, rebuilt when its inputs change or it cannot be trusted)."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
from support.references import keep_pair

import mt.data.build as build
from mt.config import CorpusConfig, DataConfig, TokenizerConfig
from mt.data.build import open_or_build
from mt.data.cache import Filter
from mt.data.corpus import (
    Source,
    line_chunks,
    pair_chunks,
    read_lines,
    read_parallel,
    split_source,
    train_sources,
)
from mt.data.store import FORMAT_VERSION, TokenStore
from mt.errors import MtError
from mt.tokenizer import EOS, Tokenizer, train_tokenizer

DE = ["Ein Hund läuft.", "Zwei Männer spielen im Park.", "Eine Frau liest ein Buch."]
EN = ["A dog runs.", "Two men play in the park.", "A woman reads a book."]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    rng = random.Random(0)
    words = " ".join(DE + EN).replace(".", " .").split()
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 8))) for _ in range(300)]
    return train_tokenizer(lines + DE, EN, TokenizerConfig(vocab_size=60))


def write_text(root: Path, name: str, de: list[str], en: list[str], gz: bool = False) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for lang, lines in (("de", de), ("en", en)):
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        if gz:
            (root / f"{name}.{lang}.gz").write_bytes(gzip.compress(data))
        else:
            (root / f"{name}.{lang}").write_bytes(data)


def text_cfg(root: Path, **kw) -> DataConfig:
    return DataConfig(root=str(root), src_lang="de", tgt_lang="en", **kw)


def text_source(root: Path, name: str = "train", fmt: str = "text") -> Source:
    return Source(name, str(root), fmt, "de", "en")


def read_all(source: Source, chunk: int, limit: int = 0) -> tuple[list[str], list[str]]:
    src: list[str] = []
    tgt: list[str] = []
    for s, t in pair_chunks(source, chunk, limit):
        assert 0 < len(s) == len(t) <= chunk
        src += s
        tgt += t
    return src, tgt


# --- reading ------------------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True])
def test_text_and_gzip(tmp_path, gz):
    write_text(tmp_path, "train", DE, EN, gz=gz)
    assert read_parallel(text_cfg(tmp_path), "train") == (DE, EN)


def test_plain_text_wins_over_gzip(tmp_path):
    write_text(tmp_path, "train", DE[:1], EN[:1], gz=True)
    write_text(tmp_path, "train", DE, EN)
    assert read_parallel(text_cfg(tmp_path), "train") == (DE, EN)


def test_read_lines_newlines(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"one\r\ntwo\n\nfour")
    assert read_lines(path) == ["one", "two", "", "four"]
    path.write_bytes(b"one\n")
    assert read_lines(path) == ["one"]  # a final newline adds no empty line
    path.write_bytes(b"")
    assert read_lines(path) == []


def test_only_newline_ends_a_line(tmp_path):
    # Unicode line separators, form feeds and lone CRs are text inside a line: splitting on them
    # would shift every later source line against its target.
    lines = ["a\u2028b", "c\x0cd", "e\x85f", "g\rh", "i\x1cj"]
    path = tmp_path / "a.txt"
    path.write_bytes("\n".join(lines).encode("utf-8") + b"\n")
    assert read_lines(path) == lines


def test_line_chunks_are_the_lines_in_pieces(tmp_path):
    lines = [f"line {i}" for i in range(23)]
    path = tmp_path / "a.txt.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    chunks = list(line_chunks(path, chunk=5))
    assert [len(c) for c in chunks] == [5, 5, 5, 5, 3]
    assert [line for c in chunks for line in c] == lines


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 100])
@pytest.mark.parametrize("limit", [0, 1, 4, 6, 7, 50])
def test_pair_chunks_and_limit(tmp_path, chunk, limit):
    de = [f"de {i}" for i in range(7)]
    en = [f"en {i}" for i in range(7)]
    write_text(tmp_path, "train", de, en)
    n = limit or 7
    assert read_all(text_source(tmp_path), chunk, limit) == (de[:n], en[:n])


def test_tsv(tmp_path):
    (tmp_path / "train.tsv").write_text(
        "".join(f"{d}\t{e}\n" for d, e in zip(DE, EN)), encoding="utf-8"
    )
    cfg = text_cfg(tmp_path, format="tsv")
    assert read_parallel(cfg, "train.tsv") == (DE, EN)


def test_tsv_wrong_columns_names_the_line(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("a\tb\nc\td\te\nf\tg\n", encoding="utf-8")
    with pytest.raises(MtError) as info:
        read_parallel(text_cfg(tmp_path, format="tsv"), "train.tsv")
    assert f"{path}:2:" in str(info.value) and "found 3" in str(info.value)


def test_tsv_error_in_a_later_chunk_names_the_file_line(tmp_path):
    path = tmp_path / "train.tsv"
    rows = [f"s{i}\tt{i}" for i in range(10)]
    rows[7] = "no tab here"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(MtError) as info:
        read_all(text_source(tmp_path, "train.tsv", "tsv"), chunk=3)
    assert str(info.value).startswith(f"{path}:8: expected 2 tab-separated columns, found 1")


def test_jsonl_both_shapes_and_blank_lines(tmp_path):
    records = [
        json.dumps({"de": DE[0], "en": EN[0]}),
        "",
        json.dumps({"translation": {"de": DE[1], "en": EN[1]}}, ensure_ascii=False),
        json.dumps({"en": EN[2], "de": DE[2], "id": 7}),
    ]
    (tmp_path / "train.jsonl").write_text("\n".join(records) + "\n", encoding="utf-8")
    assert read_parallel(text_cfg(tmp_path, format="jsonl"), "train.jsonl") == (DE, EN)
    # A chunk of blank lines only is skipped, not passed on as an empty chunk.
    assert read_all(text_source(tmp_path, "train.jsonl", "jsonl"), chunk=1) == (DE, EN)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("{not json", ["invalid JSON"]),
        ('{"de": "x"}', ["missing language", "en"]),
        ('{"translation": {"en": "x"}}', ["missing language", "de"]),
        ('["x", "y"]', ["expected an object"]),
        ('{"de": "x", "en": 3}', ["must be strings"]),
    ],
)
def test_jsonl_errors_name_the_line(tmp_path, line, words):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"de": "a", "en": "b"}) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(MtError) as info:
        read_parallel(text_cfg(tmp_path, format="jsonl"), "train.jsonl")
    message = str(info.value)
    assert message.startswith(f"{path}:2:")
    for word in words:
        assert word in message


def test_jsonl_error_in_a_later_chunk_names_the_file_line(tmp_path):
    path = tmp_path / "train.jsonl"
    rows = [json.dumps({"de": f"d{i}", "en": f"e{i}"}) for i in range(9)]
    rows[6] = json.dumps({"de": "only german"})
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(MtError) as info:
        read_all(text_source(tmp_path, "train.jsonl", "jsonl"), chunk=4)
    assert str(info.value) == f"{path}:7: missing language 'en'"


@pytest.mark.parametrize("gz", [False, True])
def test_invalid_utf8_names_the_line(tmp_path, gz):
    write_text(tmp_path, "train", DE, EN)
    data = b"good line\nsecond\nbad \xff\xfe here\nfourth\n"
    bad = tmp_path / ("train.en.gz" if gz else "train.en")
    if gz:
        (tmp_path / "train.en").unlink()
        bad.write_bytes(gzip.compress(data))
    else:
        bad.write_bytes(data)
    with pytest.raises(MtError) as info:
        read_parallel(text_cfg(tmp_path), "train")
    assert str(info.value) == f"{bad}:3: invalid UTF-8"


@pytest.mark.parametrize("chunk", [1, 3, 4, 100])
def test_invalid_utf8_and_nul_line_numbers_count_earlier_chunks(tmp_path, chunk):
    lines = [f"line {i} ü".encode() for i in range(12)]
    path = tmp_path / "a.txt"
    path.write_bytes(b"\n".join(lines[:9] + [b"bad \xc3 byte"] + lines[10:]) + b"\n")
    with pytest.raises(MtError) as info:
        list(line_chunks(path, chunk))
    assert str(info.value) == f"{path}:10: invalid UTF-8"
    path.write_bytes(b"\n".join(lines[:7] + [b"nul \0 byte"] + lines[8:]) + b"\n")
    with pytest.raises(MtError) as info:
        list(line_chunks(path, chunk))
    assert str(info.value).startswith(f"{path}:8: NUL byte")


def test_line_count_mismatch_names_both_counts(tmp_path):
    write_text(tmp_path, "train", DE, EN[:2])
    with pytest.raises(MtError) as info:
        read_parallel(text_cfg(tmp_path), "train")
    message = str(info.value)
    assert "has 3 lines" in message and "has 2" in message
    assert str(tmp_path / "train.de") in message and str(tmp_path / "train.en") in message


@pytest.mark.parametrize(("n_src", "n_tgt"), [(10, 11), (11, 10), (12, 8), (8, 12), (9, 0)])
@pytest.mark.parametrize("chunk", [3, 4, 5])
def test_line_count_mismatch_in_a_later_chunk_gives_the_full_counts(tmp_path, n_src, n_tgt, chunk):
    write_text(tmp_path, "train", [f"d{i}" for i in range(n_src)], [f"e{i}" for i in range(n_tgt)])
    with pytest.raises(MtError) as info:
        read_all(text_source(tmp_path), chunk)
    message = str(info.value)
    assert f"{tmp_path / 'train.de'} has {n_src} lines" in message
    assert f"{tmp_path / 'train.en'} has {n_tgt}" in message


def test_empty_corpus_is_an_error(tmp_path):
    write_text(tmp_path, "train", [], [])
    with pytest.raises(MtError, match="empty corpus"):
        read_parallel(text_cfg(tmp_path), "train")
    (tmp_path / "e.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(MtError, match="empty corpus"):
        read_parallel(text_cfg(tmp_path, format="jsonl"), "e.jsonl")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(MtError) as info:
        read_parallel(text_cfg(tmp_path), "train")
    assert str(tmp_path / "train.de") in str(info.value) and "not found" in str(info.value)


def test_truncated_gzip_is_a_user_error(tmp_path):
    write_text(tmp_path, "train", DE * 50, EN * 50, gz=True)
    path = tmp_path / "train.de.gz"
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(MtError) as info:
        read_parallel(text_cfg(tmp_path), "train")
    assert str(info.value).startswith(f"{path}: after line ")
    assert "truncated or damaged" in str(info.value)


def test_hf_save_to_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"de": d, "en": e} for d, e in zip(DE, EN)]
    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"translation": rows}),
            "validation": datasets.Dataset.from_list(rows[:1]),  # flat columns work too
        }
    )
    dd.save_to_disk(str(tmp_path / "hf"))
    cfg = text_cfg(tmp_path / "hf", format="hf")
    assert read_parallel(cfg, "train") == (DE, EN)
    assert read_parallel(cfg, "validation") == (DE[:1], EN[:1])
    assert read_all(split_source(cfg, "train"), chunk=2) == (DE, EN)  # Arrow batches of 2
    with pytest.raises(MtError, match="no split named 'test'"):
        read_parallel(cfg, "test")
    single = datasets.Dataset.from_list(rows)
    single.save_to_disk(str(tmp_path / "one"))
    assert read_parallel(text_cfg(tmp_path / "one", format="hf"), "anything") == (DE, EN)


def test_hf_record_without_a_language_names_the_row(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"de": d, "fr": e} for d, e in zip(DE, EN)]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(
        str(tmp_path / "hf")
    )
    with pytest.raises(MtError) as info:
        read_parallel(text_cfg(tmp_path / "hf", format="hf"), "train")
    assert str(info.value) == f"{tmp_path / 'hf'} [train] row 0: missing language 'en'"


def test_hf_folder_that_is_not_a_dataset(tmp_path):
    (tmp_path / "junk").mkdir()
    with pytest.raises(MtError, match="cannot load dataset"):
        read_parallel(text_cfg(tmp_path / "junk", format="hf"), "train")


def test_real_multi30k_slice(multi30k_dir):
    src, tgt = read_parallel(DataConfig(root=str(multi30k_dir)), "val")
    assert len(src) == len(tgt) == 1014
    assert all(s.strip() and t.strip() for s, t in zip(src, tgt))
    assert read_parallel(DataConfig(root=str(multi30k_dir)), "val", limit=10) == (
        src[:10],
        tgt[:10],
    )


def test_train_sources_from_corpora(tmp_path):
    cfg = text_cfg(tmp_path, format="tsv", hf_subset="de-en")
    (only,) = train_sources(cfg)
    assert only == Source("train", str(tmp_path), "tsv", "de", "en", "de-en", 1.0)
    cfg.corpora = [
        CorpusConfig(name="clean.tsv", weight=2.0),
        CorpusConfig(name="crawl", root="/elsewhere", format="text", hf_subset="x", weight=0.3),
    ]
    a, b = train_sources(cfg)
    assert a == Source("clean.tsv", str(tmp_path), "tsv", "de", "en", "de-en", 2.0)
    assert b == Source("crawl", "/elsewhere", "text", "de", "en", "x", 0.3)
    assert a.paths() == [tmp_path / "clean.tsv"]
    assert b.paths() == [Path("/elsewhere/crawl.de"), Path("/elsewhere/crawl.en")]
    assert split_source(cfg, "val") == Source("val", str(tmp_path), "tsv", "de", "en", "de-en")


# --- filtering ----------------------------------------------------------------------------------


def test_keep_pair_counts_eos_on_both_sides():
    src = [5, 6, EOS]  # 3 tokens, EOS included
    assert keep_pair(src, [5, 6], max_len=3, max_ratio=3.0)  # target 2 + EOS
    assert not keep_pair(src, [5, 6, 7], max_len=3, max_ratio=3.0)  # target 4 with EOS
    assert not keep_pair([5, 6, 7, EOS], [5], max_len=3, max_ratio=3.0)
    assert keep_pair([5] * 5 + [EOS], [5], max_len=10, max_ratio=3.0)  # 6 vs 2: ratio 3
    assert not keep_pair([5] * 6 + [EOS], [5], max_len=10, max_ratio=3.0)  # 7 vs 2
    assert not keep_pair([EOS], [5, 6, 7], max_len=10, max_ratio=3.0)  # 1 vs 4


# --- the token store cache ----------------------------------------------------------------------


def stores_in(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if not p.name.startswith("."))


def test_store_filters_and_limits(tmp_path, tokenizer):
    long_de = " ".join(["Hund"] * 40)
    de = DE + [long_de, "Hund", ""]
    en = EN + ["A dog.", "A dog runs.", "Nothing on the left."]  # 1 + EOS vs 7 + EOS: ratio 4
    write_text(tmp_path / "d", "train", de, en)
    source, cache = text_source(tmp_path / "d"), tmp_path / "cache"
    src_ids, tgt_ids = tokenizer.src.encode(de), tokenizer.tgt.encode(en)

    full = open_or_build(source, tokenizer, cache, None, log=False)
    assert len(full) == 6
    assert [full.pair(i) for i in range(6)] == list(zip(src_ids, tgt_ids))  # no EOS stored
    assert full.meta["summary"]["pairs_read"] == full.meta["summary"]["pairs_kept"] == 6

    kept = open_or_build(source, tokenizer, cache, Filter(20, 3.0), log=False)
    expected = [
        (s, t) for s, t in zip(src_ids, tgt_ids) if s and t and keep_pair(s + [EOS], t, 20, 3.0)
    ]
    assert len(kept) == 3 == len(expected)
    assert [kept.pair(i) for i in range(len(kept))] == expected
    assert kept.meta["summary"]["dropped"] == {"empty": 1, "too_long": 1, "ratio": 1}

    limited = open_or_build(source, tokenizer, cache, None, limit=2, log=False)
    assert [limited.pair(i) for i in range(len(limited))] == list(zip(src_ids, tgt_ids))[:2]
    assert len(stores_in(cache)) == 3


def test_no_pair_passing_the_filter_is_an_error(tmp_path, tokenizer):
    write_text(tmp_path / "d", "train", DE, EN)
    cache = tmp_path / "cache"
    with pytest.raises(MtError, match="no pair passes"):
        open_or_build(text_source(tmp_path / "d"), tokenizer, cache, Filter(2, 3.0), log=False)
    assert list(cache.iterdir()) == []  # neither a store nor a temporary folder


def forbid_building(monkeypatch) -> None:
    def fail(*args, **kwargs):
        raise AssertionError("read and encoded again instead of mapping the store")

    monkeypatch.setattr(build, "build_store", fail)
    monkeypatch.setattr(build, "pair_chunks", fail)


def test_store_is_reused(tmp_path, tokenizer, monkeypatch, capsys):
    write_text(tmp_path / "d", "train", DE, EN)
    source, cache, f = text_source(tmp_path / "d"), tmp_path / "cache", Filter(128, 3.0)
    first = open_or_build(source, tokenizer, cache, f)
    (folder,) = stores_in(cache)
    stamp = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    capsys.readouterr()
    forbid_building(monkeypatch)
    second = open_or_build(source, tokenizer, cache, f)
    assert capsys.readouterr().err.startswith("ready: ")
    assert [second.pair(i) for i in range(3)] == [first.pair(i) for i in range(3)]
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == stamp
    # Training maps the arrays read-only instead of loading them.
    assert isinstance(second.src, np.memmap) and not second.src.flags.writeable
    # Other processes only open (build=False): the same store.
    third = open_or_build(source, tokenizer, cache, f, build=False, log=False)
    assert third.folder == folder


def test_other_processes_never_build(tmp_path, tokenizer):
    write_text(tmp_path / "d", "train", DE, EN)
    with pytest.raises(MtError, match="token store missing"):
        open_or_build(text_source(tmp_path / "d"), tokenizer, tmp_path / "cache", None, build=False)


def count_builds(monkeypatch) -> list[Path]:
    built: list[Path] = []
    real = build.build_store

    def counting(source, tokenizer, folder, *args, **kwargs):
        built.append(folder)
        return real(source, tokenizer, folder, *args, **kwargs)

    monkeypatch.setattr(build, "build_store", counting)
    return built


def test_store_rebuilt_when_tokenizer_changes(tmp_path, tokenizer, monkeypatch):
    write_text(tmp_path / "d", "train", DE, EN)
    source, cache = text_source(tmp_path / "d"), tmp_path / "cache"
    open_or_build(source, tokenizer, cache, None, log=False)
    other = train_tokenizer(DE * 20, EN * 20, TokenizerConfig(vocab_size=40))
    assert other.fingerprint() != tokenizer.fingerprint()
    built = count_builds(monkeypatch)
    again = open_or_build(source, other, cache, None, log=False)
    assert len(built) == 1 and len(stores_in(cache)) == 2
    assert [again.pair(i)[0] for i in range(3)] == other.src.encode(DE)
    assert [again.pair(i)[1] for i in range(3)] == other.tgt.encode(EN)


def test_store_rebuilt_when_data_or_settings_change(tmp_path, tokenizer, monkeypatch):
    root = tmp_path / "d"
    write_text(root, "train", DE, EN)
    source, cache = text_source(root), tmp_path / "cache"
    built = count_builds(monkeypatch)
    open_or_build(source, tokenizer, cache, Filter(128, 3.0), log=False)
    write_text(root, "train", DE[:2], EN[:2])
    os.utime(root / "train.de", ns=(1, 1))  # a different mtime even on coarse clocks
    changed = open_or_build(source, tokenizer, cache, Filter(128, 3.0), log=False)
    assert len(changed) == 2
    assert len(open_or_build(source, tokenizer, cache, None, log=False)) == 2
    assert len(open_or_build(source, tokenizer, cache, Filter(128, 2.5), log=False)) == 2
    assert len(open_or_build(source, tokenizer, cache, None, limit=1, log=False)) == 1
    assert len(built) == 5 and len(set(built)) == 5
    assert len(stores_in(cache)) == 5
    open_or_build(source, tokenizer, cache, None, limit=1, log=False)  # nothing new: reused
    assert len(built) == 5


def _garbage(folder: Path) -> None:
    for f in folder.iterdir():
        f.write_bytes(b"garbage")


def _empty_array(folder: Path) -> None:
    (folder / "src.npy").write_bytes(b"")


def _cut_array(folder: Path) -> None:
    data = (folder / "tgt.npy").read_bytes()
    (folder / "tgt.npy").write_bytes(data[:-3])


def _missing_array(folder: Path) -> None:
    (folder / "tgt.idx.npy").unlink()


def _meta(change):
    def damage(folder: Path) -> None:
        meta = json.loads((folder / "meta.json").read_text())
        (folder / "meta.json").write_text(json.dumps(change(meta)))

    return damage


def _drop_tokens(meta: dict) -> dict:
    del meta["tokens"]
    return meta


DAMAGES = {
    "garbage": _garbage,
    "empty array file": _empty_array,
    "cut array file": _cut_array,
    "missing array file": _missing_array,
    "meta.json not JSON": lambda folder: (folder / "meta.json").write_text("{"),
    "meta.json a list": lambda folder: (folder / "meta.json").write_text("[1]"),
    "meta.json wrong pairs": _meta(lambda m: {**m, "pairs": m["pairs"] + 1}),
    "meta.json wrong dtype": _meta(lambda m: {**m, "dtype": "<i4"}),
    "meta.json without tokens": _meta(_drop_tokens),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_store_is_rebuilt(tmp_path, tokenizer, capsys, damage):
    write_text(tmp_path / "d", "train", DE, EN)
    source, cache = text_source(tmp_path / "d"), tmp_path / "cache"
    first = open_or_build(source, tokenizer, cache, None, log=False)
    pairs = [first.pair(i) for i in range(3)]
    del first  # drop the maps before damaging the files under them
    (folder,) = stores_in(cache)
    DAMAGES[damage](folder)
    again = open_or_build(source, tokenizer, cache, None, log=False)
    assert f"{folder}: rebuilding the token store" in capsys.readouterr().err
    assert [again.pair(i) for i in range(3)] == pairs
    assert TokenStore.open(folder).meta["pairs"] == 3
    assert [p.name for p in cache.iterdir()] == [folder.name]  # no temporary folder left


def test_older_format_store_is_rebuilt_with_a_note(tmp_path, tokenizer, capsys):
    write_text(tmp_path / "d", "train", DE, EN)
    source, cache = text_source(tmp_path / "d"), tmp_path / "cache"
    open_or_build(source, tokenizer, cache, None, log=False)
    (folder,) = stores_in(cache)
    _meta(lambda m: {**m, "format": FORMAT_VERSION - 1})(folder)
    again = open_or_build(source, tokenizer, cache, None, log=False)
    err = capsys.readouterr().err.strip()
    assert err == (
        f"{folder}: rebuilding the token store "
        f"(format {FORMAT_VERSION - 1}, this mt reads format {FORMAT_VERSION})"
    )
    assert again.meta["format"] == FORMAT_VERSION
    assert json.loads((folder / "meta.json").read_text())["format"] == FORMAT_VERSION
    # A process that may not build says what is wrong instead of using it.
    _meta(lambda m: {**m, "format": FORMAT_VERSION + 1})(folder)
    with pytest.raises(MtError, match="token store cannot be used"):
        open_or_build(source, tokenizer, cache, None, build=False, log=False)

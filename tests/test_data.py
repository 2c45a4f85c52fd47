"""Reading parallel corpora in every format, their errors, the length filter and the token cache."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import pytest

from mt.config import DataConfig, TokenizerConfig
from mt.data import keep_pair, load_corpus, read_lines, read_parallel
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


def test_jsonl_both_shapes_and_blank_lines(tmp_path):
    records = [
        json.dumps({"de": DE[0], "en": EN[0]}),
        "",
        json.dumps({"translation": {"de": DE[1], "en": EN[1]}}, ensure_ascii=False),
        json.dumps({"en": EN[2], "de": DE[2], "id": 7}),
    ]
    (tmp_path / "train.jsonl").write_text("\n".join(records) + "\n", encoding="utf-8")
    assert read_parallel(text_cfg(tmp_path, format="jsonl"), "train.jsonl") == (DE, EN)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("{not json", ["invalid JSON"]),
        ('{"de": "x"}', ["missing key", "en"]),
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


def test_line_count_mismatch_names_both_counts(tmp_path):
    write_text(tmp_path, "train", DE, EN[:2])
    with pytest.raises(MtError) as info:
        read_parallel(text_cfg(tmp_path), "train")
    message = str(info.value)
    assert "has 3 lines" in message and "has 2" in message
    assert str(tmp_path / "train.de") in message and str(tmp_path / "train.en") in message


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
    with pytest.raises(MtError, match="cannot read"):
        read_parallel(text_cfg(tmp_path), "train")


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
    with pytest.raises(MtError, match="no split named 'test'"):
        read_parallel(cfg, "test")
    single = datasets.Dataset.from_list(rows)
    single.save_to_disk(str(tmp_path / "one"))
    assert read_parallel(text_cfg(tmp_path / "one", format="hf"), "anything") == (DE, EN)


def test_hf_folder_that_is_not_a_dataset(tmp_path):
    (tmp_path / "junk").mkdir()
    with pytest.raises(MtError, match="cannot load dataset"):
        read_parallel(text_cfg(tmp_path / "junk", format="hf"), "train")


def test_real_multi30k_slice(multi30k_dir):
    src, tgt = read_parallel(DataConfig(root=str(multi30k_dir)), "val")
    assert len(src) == len(tgt) == 1014
    assert all(s.strip() and t.strip() for s, t in zip(src, tgt))


# --- filtering ----------------------------------------------------------------------------------


def test_keep_pair_counts_eos_on_both_sides():
    src = [5, 6, EOS]  # 3 tokens, EOS included
    assert keep_pair(src, [5, 6], max_len=3, max_ratio=3.0)  # target 2 + EOS
    assert not keep_pair(src, [5, 6, 7], max_len=3, max_ratio=3.0)  # target 4 with EOS
    assert not keep_pair([5, 6, 7, EOS], [5], max_len=3, max_ratio=3.0)
    assert keep_pair([5] * 5 + [EOS], [5], max_len=10, max_ratio=3.0)  # 6 vs 2: ratio 3
    assert not keep_pair([5] * 6 + [EOS], [5], max_len=10, max_ratio=3.0)  # 7 vs 2
    assert not keep_pair([EOS], [5, 6, 7], max_len=10, max_ratio=3.0)  # 1 vs 4


def test_load_corpus_filters_and_limits(tmp_path, tokenizer):
    long_de = " ".join(["Hund"] * 40)
    de = DE + [long_de, "Hund"]
    en = EN + ["A dog.", " ".join(["dog"] * 30)]
    write_text(tmp_path / "d", "train", de, en)
    cfg = text_cfg(tmp_path / "d", max_len=20, max_len_ratio=3.0)
    cache = tmp_path / "cache"
    full = load_corpus(cfg, "train", tokenizer, cache, filter_lengths=False)
    assert len(full) == 5
    assert full.src == tokenizer.encode_src(de)
    assert full.tgt == tokenizer.encode_tgt(en)
    kept = load_corpus(cfg, "train", tokenizer, cache, filter_lengths=True)
    expected = [(s, t) for s, t in zip(full.src, full.tgt) if keep_pair(s, t, cfg.max_len, 3.0)]
    assert len(kept) == 3 == len(expected)
    assert list(zip(kept.src, kept.tgt)) == expected
    limited = load_corpus(cfg, "train", tokenizer, cache, filter_lengths=False, limit=2)
    assert limited.src == full.src[:2]


def test_no_pair_passing_the_filter_is_an_error(tmp_path, tokenizer):
    write_text(tmp_path / "d", "train", DE, EN)
    cfg = text_cfg(tmp_path / "d", max_len=2)
    with pytest.raises(MtError, match="no pair passes"):
        load_corpus(cfg, "train", tokenizer, tmp_path / "cache", filter_lengths=True)


# --- the token cache ----------------------------------------------------------------------------


def forbid_encoding(monkeypatch) -> None:
    def fail(self, lines):
        raise AssertionError("tokenized again instead of reading the cache")

    monkeypatch.setattr(Tokenizer, "encode_src", fail)
    monkeypatch.setattr(Tokenizer, "encode_tgt", fail)


def test_cache_is_reused(tmp_path, tokenizer, monkeypatch):
    write_text(tmp_path / "d", "train", DE, EN)
    cfg, cache = text_cfg(tmp_path / "d"), tmp_path / "cache"
    first = load_corpus(cfg, "train", tokenizer, cache, filter_lengths=True)
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 1
    forbid_encoding(monkeypatch)
    second = load_corpus(cfg, "train", tokenizer, cache, filter_lengths=True)
    assert second.src == first.src and second.tgt == first.tgt
    # The cached corpus is plain lists, as fast to index as the fresh one.
    assert type(second.src) is list and type(second.src[0]) is list
    assert type(second.tgt) is list


def test_cache_rebuilt_when_tokenizer_changes(tmp_path, tokenizer, monkeypatch):
    write_text(tmp_path / "d", "train", DE, EN)
    cfg, cache = text_cfg(tmp_path / "d"), tmp_path / "cache"
    load_corpus(cfg, "train", tokenizer, cache, filter_lengths=True)
    other = train_tokenizer(DE * 20, EN * 20, TokenizerConfig(vocab_size=40))
    assert other.fingerprint() != tokenizer.fingerprint()
    calls = []
    real = Tokenizer.encode_src

    def counting(self, lines):
        calls.append(len(lines))
        return real(self, lines)

    monkeypatch.setattr(Tokenizer, "encode_src", counting)
    again = load_corpus(cfg, "train", other, cache, filter_lengths=True)
    assert calls == [3]
    assert again.src == real(other, DE)


def test_cache_rebuilt_when_data_or_settings_change(tmp_path, tokenizer, monkeypatch):
    root = tmp_path / "d"
    write_text(root, "train", DE, EN)
    cfg, cache = text_cfg(root), tmp_path / "cache"
    load_corpus(cfg, "train", tokenizer, cache, filter_lengths=True)
    write_text(root, "train", DE[:2], EN[:2])
    os.utime(root / "train.de", ns=(1, 1))  # a different mtime even on coarse clocks
    changed = load_corpus(cfg, "train", tokenizer, cache, filter_lengths=True)
    assert len(changed) == 2
    unfiltered = load_corpus(cfg, "train", tokenizer, cache, filter_lengths=False)
    assert len(unfiltered) == 2
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 3


def test_damaged_cache_is_rebuilt(tmp_path, tokenizer):
    write_text(tmp_path / "d", "train", DE, EN)
    cfg, cache = text_cfg(tmp_path / "d"), tmp_path / "cache"
    first = load_corpus(cfg, "train", tokenizer, cache, filter_lengths=False)
    (folder,) = list(cache.iterdir())
    for f in folder.iterdir():
        f.write_bytes(b"garbage")
    again = load_corpus(cfg, "train", tokenizer, cache, filter_lengths=False)
    assert again.src == first.src and again.tgt == first.tgt

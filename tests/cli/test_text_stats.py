"""`mt text-stats`: a case table and length bounds added to a checkpoint that has none."""

from __future__ import annotations

import gzip
from pathlib import Path

from mt.checkpoint import load, save
from mt.textstats import TextStats


def _without_stats(tiny_run: Path, path: Path) -> Path:
    data = load(tiny_run / "best.pt")
    data["tokenizer"] = {k: v for k, v in data["tokenizer"].items() if k != "text"}
    save(data, path)
    return path


def _slice(src: Path, dst: Path, n: int) -> Path:
    with gzip.open(src, "rt", encoding="utf-8") as f:
        dst.write_text("".join(line for _, line in zip(range(n), f)), encoding="utf-8")
    return dst


def test_adds_a_table_and_bounds_from_text(mt_cli, tiny_run, multi30k_dir, tmp_path):
    old = _without_stats(tiny_run, tmp_path / "old.pt")
    de = _slice(multi30k_dir / "train.de.gz", tmp_path / "de.txt", 3000)
    en = _slice(multi30k_dir / "train.en.gz", tmp_path / "en.txt", 3000)
    out = tmp_path / "new.pt"
    result = mt_cli("text-stats", old, "--source", de, "--target", en, "-o", out)
    assert result.rc == 0, result.err
    assert "de case table" in result.err and "de-en length bounds" in result.err
    stats = TextStats.from_dict(load(out)["tokenizer"]["text"])
    assert stats.spellings("de")["mann"] == "Mann" and stats.spellings("de")["ein"] == "ein"
    lo, hi = stats.lengths["de-en"]
    assert 0.3 <= lo < 0.83 < hi <= 3.0  # around de-en's median ratio of characters
    assert load(out)["model"].keys() == load(old)["model"].keys()
    # Source text alone: the table only; a later call replaces the language's table.
    again = mt_cli("text-stats", out, "--source", de, "-o", out, "--force")
    assert again.rc == 0, again.err
    assert TextStats.from_dict(load(out)["tokenizer"]["text"]).lengths == stats.lengths
    translated = mt_cli("translate", out, "--greedy", stdin="EIN MANN MIT EINEM BALL.\n")
    assert translated.rc == 0 and translated.out.strip().isupper()


def test_bad_inputs_are_one_line_and_exit_2(mt_cli, tiny_run, multi30k_dir, tmp_path):
    de = _slice(multi30k_dir / "train.de.gz", tmp_path / "de.txt", 300)
    en = _slice(multi30k_dir / "train.en.gz", tmp_path / "en.txt", 299)
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    ckpt = tiny_run / "best.pt"
    out = tmp_path / "out.pt"
    cases = {
        "file not found": ["--source", tmp_path / "nope.txt", "-o", out],
        "differ in length after line 299": ["--source", de, "--target", en, "-o", out],
        "no words to count": ["--source", empty, "-o", out],
        "exists; add --force": ["--source", de, "-o", de],
    }
    for message, args in cases.items():
        result = mt_cli("text-stats", ckpt, *args)
        assert result.rc == 2, (message, result.err)
        assert message in result.err and len(result.err.strip().splitlines()) == 1
    few = mt_cli("text-stats", ckpt, "--source", de, "--target", de, "-o", out)
    assert few.rc == 0  # 300 pairs: enough for bounds
    short = _slice(multi30k_dir / "train.de.gz", tmp_path / "few.txt", 50)
    result = mt_cli("text-stats", ckpt, "--source", short, "--target", short, "-o", out, "--force")
    assert result.rc == 2 and "too few lines" in result.err
    missing = mt_cli("text-stats", tmp_path / "none.pt", "--source", de, "-o", out, "--force")
    assert missing.rc == 2 and "checkpoint not found" in missing.err
    assert not (tmp_path / "none.pt").exists()

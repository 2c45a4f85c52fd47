"""Doubt flags and confidence: constructed failures fire, references of the test set rarely do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_in_process

from mt.data.corpus import read_lines
from mt.decode.doubt import DoubtCount, confidence, flags, looped
from mt.decode.steps import length_penalty


@pytest.fixture(scope="module")
def test_pair(multi30k_dir: Path) -> tuple[list[str], list[str]]:
    de = [x.strip() for x in read_lines(multi30k_dir / "test_2016_flickr.de.gz")]
    en = [x.strip() for x in read_lines(multi30k_dir / "test_2016_flickr.en.gz")]
    return de, en


def test_constructed_failures_fire():
    src = "Zwei Hunde spielen im Schnee neben einem roten Haus."
    assert flags(src, src) == ["copy"]
    assert "copy" in flags(src, "zwei HUNDE spielen im Schnee, neben einem roten Haus")
    assert flags(src, "Two dogs play in the snow next to a red house.") == []
    assert "loop" in flags(src, "Two dogs dogs dogs play in the snow next to a house.")
    assert "loop" in flags(src, "Two dogs play in the snow in the snow in the snow.")
    assert "loop" in flags(src, "This is tuuuuming the ommmmmm of the house now.")
    assert "loop" not in flags("Sie schreit: Aaaaah!", "She screams: Aaaaah!")  # the source's own
    assert flags(src, "Two dogs.") == ["short"]
    assert flags(src, " ".join(["Two dogs play in the snow next to a red house."] * 3)) == ["long"]
    assert flags("Ja.", "Yes.") == [] and flags("Ja.", "") == []  # too short for a ratio
    assert flags("", "") == []


def test_looped_counts_runs_in_a_row_only():
    assert looped("a b a b a b".split())
    assert not looped("a b c a b d a b".split())  # three times, never in a row
    assert not looped("a a".split())


def test_truncated_paragraphs_are_short(test_pair):
    de, en = test_pair
    fired = 0
    for i in range(0, 500, 5):
        paragraph = " ".join(de[i : i + 5])
        fired += "short" in flags(paragraph, " ".join(en[i : i + 2]))  # stopped after two
    assert fired >= 0.9 * 100


def test_references_are_rarely_flagged(test_pair):
    de, en = test_pair
    count = DoubtCount()
    for s, r in zip(de, en):
        count.add(flags(s, r))
    assert count.lines == 1000
    assert count.share <= 0.02, count.summary()


def test_confidence_is_per_token_log_probability():
    # greedy: a sum over 4 tokens and EOS
    assert confidence(4, -2.5, beam=False, alpha=0.6) == pytest.approx(-0.5)
    # beam: the length penalty of 5 positions undone
    score = -2.5 / length_penalty(5, 0.6)
    assert confidence(4, score, beam=True, alpha=0.6) == pytest.approx(-0.5)
    assert confidence(4, float("nan"), beam=False, alpha=0.6) is None


def test_jsonl_carries_confidence_and_flags_and_the_gate(tiny_run, tmp_path, capsys, monkeypatch):
    src = tmp_path / "in.de"
    url = "https://example.com/ein/hund"
    src.write_text(f"Ein Hund rennt durch das Gras.\n{url}\n\n", encoding="utf-8")
    ckpt = tiny_run / "best.pt"
    args = ["translate", ckpt, "-i", src, "--device", "cpu", "--output-format", "jsonl"]
    rc, out, err = run_in_process(args, capsys, monkeypatch)
    assert rc == 0, err
    records = [json.loads(x) for x in out.splitlines()]
    assert len(records) == 3
    assert records[0]["confidence"] < 0 and isinstance(records[0]["flags"], list)
    assert records[1]["translation"] == url and records[1]["flags"] == ["copy"]  # kept as is
    assert records[2]["flags"] == [] and records[2]["confidence"] is None
    rc, _, err = run_in_process([*args, "--max-doubt", "0"], capsys, monkeypatch)
    assert rc == 1 and "flagged" in err and "copy 1" in err
    rc, _, err = run_in_process([*args, "--max-doubt", "0.9"], capsys, monkeypatch)
    assert rc == 0 and "copy 1" in err
    rc, _, err = run_in_process([*args, "--max-doubt", "2"], capsys, monkeypatch)
    assert rc == 2 and "--max-doubt" in err

"""Doubt flags and confidence: constructed failures fire, references of the test set rarely do."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from support.inprocess import run_in_process

from mt.data.corpus import read_lines
from mt.search.steps import length_penalty
from mt.translation.doubt import MIN_CHARS, DoubtCount, confidence, flags, looped


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


@pytest.fixture(scope="module")
def val_sets(multi30k_dir: Path) -> dict[str, list[str]]:
    """Multi30k's val set in its four languages (1,014 lines each, parallel)."""
    return {
        lang: [x.strip() for x in read_lines(multi30k_dir / f"val.{lang}.gz")]
        for lang in ("de", "en", "fr", "cs")
    }


def test_thresholds_fire_on_under_one_percent_of_references(val_sets):
    # The length rule's SHORT and LONG sit at the 0.5% and 99.5% quantiles of the character
    # ratios of Multi30k's references pooled over its twelve directions: SHORT at 0.55 would
    # flag more than 1% of these human translations. None of them is a loop or a copy.
    count = DoubtCount()
    for a, b in itertools.permutations(val_sets, 2):
        for s, r in zip(val_sets[a], val_sets[b]):
            count.add(flags(s, r))
    assert count.lines == 12 * 1014
    assert count.by_flag["copy"] == 0 and count.by_flag["loop"] == 0, count.summary()
    assert count.by_flag["short"] <= 0.01 * count.lines, count.summary()
    assert count.by_flag["long"] <= 0.01 * count.lines, count.summary()


@pytest.mark.parametrize("src_lang", ["de", "fr"])
def test_translations_that_lost_half_their_words_are_short_into_english(val_sets, src_lang):
    # The other side of the window: into English (from the longer German and French) a
    # translation cut to half its words is flagged on most lines, and cut to two fifths on
    # nearly all, so SHORT cannot be lowered much either.
    pairs = [
        (s, r.split())
        for s, r in zip(val_sets[src_lang], val_sets["en"])
        if sum(not c.isspace() for c in s) >= MIN_CHARS
    ]
    half = sum("short" in flags(s, " ".join(w[: len(w) // 2])) for s, w in pairs)
    two_fifths = sum("short" in flags(s, " ".join(w[: len(w) * 2 // 5])) for s, w in pairs)
    assert half >= 0.85 * len(pairs)
    assert two_fifths >= 0.95 * len(pairs)


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

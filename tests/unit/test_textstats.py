"""The training text's statistics (mt.textstats): a case table and length bounds counted on
real Multi30k slices, kept in checkpoints, used by recasing and the doubt flags."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest
import torch

from mt.checkpoint import load, load_model, save
from mt.config import TokenizerConfig
from mt.data.corpus import read_lines
from mt.textstats import (
    LONG,
    SHORT,
    TextStats,
    case_key,
    case_table,
    count_spellings,
    count_stats,
)
from mt.tokenizer import train_tokenizer
from mt.train.nodes import pack, unpack
from mt.translation.casing import case_back, usual_case
from mt.translation.doubt import DoubtCount, flags
from mt.translation.requests import Plan, Request
from mt.translation.session import Session
from mt.translation.stages import spelling_cost

LANGS = ("de", "en", "fr", "cs")


@pytest.fixture(scope="module")
def slices(multi30k_dir: Path) -> dict[str, dict[str, list[str]]]:
    """The first 6,000 training lines and the val set of de, en, fr and cs (parallel)."""
    out: dict[str, dict[str, list[str]]] = {"train": {}, "val": {}}
    for lang in LANGS:
        out["train"][lang] = [x.strip() for x in read_lines(multi30k_dir / f"train.{lang}.gz")][
            :6000
        ]
        out["val"][lang] = [x.strip() for x in read_lines(multi30k_dir / f"val.{lang}.gz")]
    return out


@pytest.fixture(scope="module")
def stats(slices) -> TextStats:
    train = slices["train"]
    return count_stats((a, b, [(train[a], train[b])]) for a, b in itertools.permutations(LANGS, 2))


def testcase_table_counts_words_where_case_is_not_their_position(slices):
    counts: Counter[str] = Counter()
    count_spellings(slices["train"]["de"], counts)
    # `Ein` starts most lines, but mid-sentence it is `ein`: only the latter is counted.
    assert counts["ein"] > 0 and counts["Ein"] < counts["ein"] / 10
    assert counts["Mann"] > 10 * counts["mann"]
    table = {case_key(w): w for w in case_table(counts)}
    assert table["ein"] == "ein" and table["zwei"] == "zwei" and table["mann"] == "Mann"
    assert table["ball"] == "Ball" and table["strasse"] == "Straße"
    words = case_table(counts, max_words=50)
    assert len(words) == 50 and words[0] == "einem"  # the most frequent mid-sentence word
    few: Counter[str] = Counter()
    count_spellings(["EIN MANN LÄUFT.", "Ein Hund: Zwei Katzen. Drei"], few)
    assert few == Counter({"Hund": 1, "Katzen": 1})  # caps lines and sentence starts skipped


def test_length_bounds_per_direction_keep_references_unflagged(stats, slices):
    val = slices["val"]
    for a, b in itertools.permutations(LANGS, 2):
        bounds = stats.bounds(a, b)
        assert 0.3 <= bounds[0] < 1 < bounds[1] <= 3.0
        count = DoubtCount()
        for s, r in zip(val[a], val[b]):
            count.add(flags(s, r, bounds))
        assert count.share <= 0.02, f"{a}-{b}: {count.summary()}"
    # Into Czech the fixed bounds are strict: de-cs references flagged over 2% of the time.
    fixed = DoubtCount()
    for s, r in zip(val["de"], val["cs"]):
        fixed.add(flags(s, r, (SHORT, LONG)))
    assert fixed.share > 0.02
    # Into German they are lenient: half a reference goes unflagged; per direction it is caught.
    half = [" ".join(r.split()[: len(r.split()) // 2]) for r in val["de"]]
    caught = [
        sum("short" in flags(s, h, bd) for s, h in zip(val["en"], half))
        for bd in ((SHORT, LONG), stats.bounds("en", "de"))
    ]
    assert caught[0] < 0.5 * len(half) and caught[1] > 0.85 * len(half)


def test_bounds_lookup_and_round_trip(stats):
    into_cs = [stats.bounds(a, "cs") for a in ("de", "en", "fr")]
    pooled = stats.bounds(None, "cs")
    assert pooled == (min(b[0] for b in into_cs), max(b[1] for b in into_cs))
    assert TextStats().bounds("de", "en") == (SHORT, LONG)
    assert TextStats({}, {"de-en": (0.6, 1.3)}).bounds(None, None) == (0.6, 1.3)
    back = TextStats.from_dict(stats.to_dict())
    assert back == stats
    assert back.spellings("de")["mann"] == "Mann" and back.spellings("en")["man"] == "man"
    assert back.spellings(None)["mann"] == "Mann"  # no source language: every table


def test_the_statistics_travel_with_the_tokenizer_rank_0_sends(stats, slices):
    """Under torchrun, global rank 0 alone holds the run directory, where the statistics are
    counted and kept; the other nodes get them with the tokenizer it sends (mt.train.nodes),
    as an imported model's piece tables, and write nothing."""
    train = slices["train"]
    tok = train_tokenizer(train["de"][:2000], train["en"][:2000], TokenizerConfig(vocab_size=300))
    tok.text_stats = stats
    back = unpack(pack(tok))
    assert back.text_stats == stats and back.src_proto == tok.src_proto and back.joint
    tok.text_stats, tok.pieces = None, (["<pad>", "a"], ["<pad>", "b"])
    back = unpack(pack(tok))
    assert back.text_stats is None and back.pieces == tok.pieces


def test_recasing_with_a_table_on_real_lines(stats, multi30k_dir):
    test = [x.strip() for x in read_lines(multi30k_dir / "test_2016_flickr.de.gz")][:300]
    table = stats.spellings("de")

    def words_right(cost, table) -> int:
        right = 0
        for line in test:
            back = usual_case(line.upper(), cost, False, table).split()
            right += sum(x == y for x, y in zip(back, line.split()))
        return right

    assert usual_case("EIN JUNGE SPIELT MIT EINEM BALL IM PARK.", len, False, table) == (
        "Ein Junge spielt mit einem Ball im Park."
    )
    assert usual_case("Zwei Männer In Einem Park", len, True, table) == "Zwei Männer in einem Park"
    total = sum(len(line.split()) for line in test)
    assert words_right(len, table) >= 0.93 * total  # 6,000 lines counted; unknowns lower case
    assert words_right(len, table) > words_right(len, None)


def test_prepared_run_keeps_its_statistics_and_old_checkpoints_still_recase(
    tiny_run: Path, tmp_path: Path
):
    data = load(tiny_run / "best.pt")
    kept = TextStats.from_dict(data["tokenizer"]["text"])
    assert kept.spellings("de")["mann"] == "Mann" and kept.spellings("de")["ein"] == "ein"
    assert set(kept.lengths) == {"de-en"}
    assert load_model(tiny_run / "best.pt").tokenizer.text_stats == kept
    # A checkpoint written before the statistics: no table, the fixed bounds, still recased.
    old = {**data, "tokenizer": {k: v for k, v in data["tokenizer"].items() if k != "text"}}
    save(old, tmp_path / "old.pt")
    translator = Session([tmp_path / "old.pt"], "cpu").translator()
    assert translator.tokenizer.text_stats is None
    assert translator.length_bounds(Request("x")) == (SHORT, LONG)
    line = "EIN MANN MIT EINEM BALL IM PARK."
    usual = usual_case(line, spelling_cost(translator.tokenizer))
    got = translator.translate([Request(line, plan=Plan(recase=True))])[0]
    plain = translator.translate([Request(usual, plan=Plan(recase=False))])[0]
    assert got.text == case_back(plain.text, "upper")
    # With the table the same line is asked in the table's case.
    new = Session([tiny_run / "best.pt"], "cpu").translator()
    assert new.length_bounds(Request("x")) == kept.lengths["de-en"]
    got = new.translate([Request(line, plan=Plan(recase=True))])[0]
    asked = usual_case(line, spelling_cost(new.tokenizer), False, kept.spellings("de"))
    assert asked == "Ein Mann mit einem Ball im Park."
    plain = new.translate([Request(asked, plan=Plan(recase=False))])[0]
    assert got.text == case_back(plain.text, "upper")
    assert torch.load(tmp_path / "old.pt", weights_only=True)["tokenizer"].get("text") is None

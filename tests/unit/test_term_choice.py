"""The guard's choice among a beam's outputs (mt.translation.terms.preferred): where the best
output misses a term, the best other output that writes it is taken, and no constrained
search is run for that line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mt.glossary import Glossary
from mt.search.steps import Hypothesis
from mt.translation.requests import Request
from mt.translation.terms import missing, preferred


def test_missing_counts_forms_and_exact_spellings():
    assert missing(["hound"], "The hounds run.", "en") == []
    assert missing(["hound"], "The hounds run.", "en", exact=True) == ["hound"]
    assert missing(["hound", "hound"], "A hound and hounds.", "en") == []
    assert missing(["hound", "hound"], "A hound and hounds.", "en", exact=True) == ["hound"]
    assert missing(["red car", "hound"], "A dog by the red cars.", "en") == ["hound"]
    assert missing(["hound"], "Houndstooth.", "en") == ["hound"]  # word boundaries


GLOSSARY = Glossary.from_pairs([("Hund", "hound"), ("Katze", "cat")], "de", tgt_lang="en")


def _outputs(texts: list[str]) -> list[Hypothesis]:
    return [Hypothesis([i + 4], -0.1 * (i + 1)) for i in range(len(texts))]


def test_preferred_takes_the_best_output_that_writes_the_missed_terms_exactly():
    texts = ["A dog runs.", "The dogs run.", "Hounds run.", "A hound runs.", "The hound ran."]
    hyps = _outputs(texts)
    r = Request("Ein Hund rennt.", glossary=GLOSSARY, prefer=["hound"])
    got_h, got_t = preferred(hyps, texts, r, 1)
    # "Hounds run." inflects the missed term, so the first exact one goes first.
    assert got_t == ["A hound runs."] and got_h == [hyps[3]]
    got_h, got_t = preferred(hyps, texts, r, 3)
    assert got_t == ["A hound runs.", "A dog runs.", "The dogs run."]
    # None holds it: the order stays, cut to nbest (the guard then constrains the line).
    none = ["A dog runs.", "Dogs run.", "A dog ran."]
    assert preferred(_outputs(none), none, r, 2)[1] == none[:2]
    # A request without terms keeps search's order.
    assert preferred(hyps, texts, Request("Ein Hund rennt."), 2)[1] == texts[:2]


def test_a_term_the_best_output_writes_inflected_may_stay_inflected():
    """The terms the best output holds keep its form; those it missed must be exact."""
    texts = ["Two hounds and a kitten.", "Two hounds and cats.", "Two hounds and a cat."]
    r = Request("Zwei Hunde und eine Katze.", glossary=GLOSSARY, prefer=["hound", "cat"])
    assert preferred(_outputs(texts), texts, r, 1)[1] == ["Two hounds and a cat."]


@pytest.fixture(scope="module")
def session(tiny_run: Path):
    from mt.translation.session import Session

    return Session([tiny_run / "best.pt"], "cpu")


def test_the_guard_takes_a_beam_output_holding_the_term_without_a_second_search(
    session, monkeypatch: pytest.MonkeyPatch
):
    """On the fixtures' tiny model: a glossary whose target word only a lower output of the
    beam writes gives that output, and the constrained search is never called."""
    from mt.search import dispatch
    from mt.translation.options import DecodeOptions
    from mt.translation.requests import Plan

    lines = ["Ein Mann fährt Fahrrad auf der Straße.", "Zwei Hunde spielen im Schnee."]
    beam = session.translator().cfg.beam
    wide = session.translator(DecodeOptions(nbest=beam, glossary_boost=0.0))
    found = None
    for line in lines:
        texts = wide.translate([Request(line)])[0].texts
        for k, text in enumerate(texts[1:], 1):
            new = [w.strip(".,") for w in text.split() if w.strip(".,").isalpha()]
            new = [w for w in new if len(w) > 2 and missing([w], texts[0], "en")]
            if new:
                found = (line, new[0], texts, k)
                break
        if found:
            break
    assert found, "the tiny model's beams should differ in a word"
    line, word, texts, k = found
    src_word = max(line.rstrip(".").split(), key=len)
    glossary = Glossary.from_pairs([(src_word, word)], "de", tgt_lang="en")

    def refuse(*_args, **_kwargs):
        raise AssertionError("the constrained search ran")

    monkeypatch.setattr(dispatch, "constrained_beam_search", refuse)
    guard = session.translator(DecodeOptions(glossary_boost=0.0))
    [out] = guard.translate([Request(line, plan=Plan(), glossary=glossary)])
    j = next(j for j, x in enumerate(texts) if not missing([word], x, "en", exact=True))
    assert 0 < j <= k and out.text == texts[j]
    assert out.hypotheses and math.isfinite(out.hypotheses[0].score)

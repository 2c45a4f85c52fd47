"""sacrebleu wrappers: known scores and their signatures."""

from __future__ import annotations

import pytest

from mt.metrics import bleu, format_scores, score

REFS = [
    "A dog runs across the green grass.",
    "Two men are playing football in the park.",
    "A woman in a red coat reads a book on a bench.",
]


def test_identical_hypotheses_score_perfectly():
    s = score(REFS, REFS)
    assert s.bleu == pytest.approx(100.0)
    assert s.bleu_lc == pytest.approx(100.0)
    assert s.chrf == pytest.approx(100.0)
    assert s.ter == pytest.approx(0.0)
    assert s.sentences == 3
    assert bleu(REFS, REFS) == pytest.approx(100.0)


def test_unrelated_hypotheses_score_near_zero():
    hyps = ["xyz qqq", "nothing here at all", "completely different words"]
    s = score(hyps, REFS)
    assert s.bleu < 5.0
    assert s.ter > 50.0


def test_partial_match_is_between():
    hyps = ["A dog runs across the grass.", REFS[1], "A woman reads a book."]
    value = bleu(hyps, REFS)
    assert 20.0 < value < 100.0
    assert score(hyps, REFS).bleu == pytest.approx(value)


def test_signatures_present():
    s = score(REFS, REFS)
    assert "tok:13a" in s.bleu_signature and "case:mixed" in s.bleu_signature
    assert "case:lc" in s.bleu_lc_signature
    assert "nrefs:1" in s.bleu_signature
    assert s.chrf_signature.startswith("nrefs:1") and "nc:6" in s.chrf_signature
    assert s.ter_signature
    text = format_scores(s)
    assert text.splitlines()[0].startswith("BLEU ")
    assert s.bleu_signature in text and s.ter_signature in text
    d = s.as_dict()
    assert d["bleu"] == s.bleu and d["bleu_signature"] == s.bleu_signature


def test_lowercase_bleu_ignores_case():
    hyps = [r.upper() for r in REFS]
    s = score(hyps, REFS)
    assert s.bleu_lc == pytest.approx(100.0)
    assert s.bleu < 10.0
    assert s.bleu_lc >= s.bleu
    mixed = [REFS[0].lower(), REFS[1], REFS[2].swapcase()]
    m = score(mixed, REFS)
    assert m.bleu < m.bleu_lc == pytest.approx(100.0)


def test_lengths_must_match():
    with pytest.raises(ValueError):
        score(REFS[:2], REFS)

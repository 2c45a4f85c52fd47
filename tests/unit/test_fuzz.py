"""Fuzzed lines of nested tags, entities, placeholders and empty elements on the tiny model:
one output line each, the source's spans exactly, no exception (the generator and check of
scripts/tools/fuzz_spans.py, from tests/support/, driven by hypothesis; the script runs 10,000
lines)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.span_checks import span_failures
from support.span_inputs import FUZZ_WORDS, fuzz_line

from mt.translation.session import DecodeOptions, Session

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def translators(tiny_run):
    session = Session([tiny_run / "best.pt"], "cpu")
    return {
        "beam": session.translator(),
        "greedy": session.translator(DecodeOptions(greedy=True)),
        "nbest": session.translator(DecodeOptions(beam=3, nbest=3)),
    }


SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.parametrize("path", ["beam", "greedy", "nbest", "html"])
def test_fuzzed_lines_keep_their_spans(translators, path) -> None:
    translator = translators["beam" if path == "html" else path]

    @SETTINGS
    @given(st.randoms(use_true_random=False), st.integers(1, 6))
    def run(rng: random.Random, n: int) -> None:
        lines = [fuzz_line(rng, html=path == "html") for _ in range(n)]
        assert span_failures(translator, lines, html=path == "html") == []

    run()


def test_the_generator_makes_the_hard_cases() -> None:
    """The lines the fuzzing is for do come up: only spans, empty and nested elements,
    spans side by side."""
    rng = random.Random(0)
    lines = [fuzz_line(rng) for _ in range(2000)]
    only_spans = [x for x in lines if x and not any(w in x for w in FUZZ_WORDS)]
    assert len(only_spans) > 50
    assert any("></" in x for x in lines)  # an empty element
    assert any(x.count("<b>") + x.count("<i>") >= 2 for x in lines)
    assert any("%s%d" in x or "}{" in x or "%s." in x for x in lines)
    assert "" in lines

"""tests/support/span_checks.py and span_inputs.py: the yardstick the span benchmarks, the fuzzer
and the span tests count by, and the injected lines they share."""

from __future__ import annotations

import random

from support.span_checks import kept, same_spans, span_counts
from support.span_inputs import KINDS, SPANS, inject_text


def test_span_checks_count_each_span_as_often_as_it_occurs():
    src = "Open %s and %s in {dir}"
    assert span_counts(src) == {"%s": 2, "{dir}": 1}
    assert span_counts(src, ["c-format"]) == {"%s": 2}  # the string's own format flags only
    assert same_spans("Öffne %s und %s in {dir}", src)
    assert not same_spans("Öffne %s in {dir}", src)  # one %s lost
    assert not same_spans("Öffne %s und %s in {dir} {dir}", src)  # one {dir} too many
    assert same_spans("Öffne %s und %s", src, ["c-format"])  # {dir} is no span for c-format
    assert kept("a <b>x</b> b", "c <b>y</b> d", ["<b>", "</b>"])
    assert not kept("a <b>x b", "c <b>y</b> d", ["<b>", "</b>"])


def test_injected_lines_hold_the_spans_they_name_at_word_boundaries():
    """Line k gets spans of kind k (in turn), one or two of them; the sentence's words stay in
    order, and a tag pair goes around one word."""
    rng = random.Random(1)
    line = "Ein Mann fährt mit dem Fahrrad durch die Stadt ."
    for k in range(2 * len(KINDS)):
        out, spans = inject_text(line, k, rng)
        kind = KINDS[k % len(KINDS)]
        assert spans and all(out.count(s) >= spans.count(s) for s in spans), (out, spans)
        if kind == "tag":
            assert len(spans) == 2 * (1 + k % 2)  # an opening and a closing tag per pair
            assert all(s in SPANS["tag"] or s.startswith("</") for s in spans)
        else:
            assert len(spans) == 1 + k % 2 and set(spans) <= set(SPANS[kind])
        words = out
        for s in sorted(set(spans), key=len, reverse=True):
            words = words.replace(s, " ")
        assert words.split() == line.split()  # nothing of the sentence lost or moved

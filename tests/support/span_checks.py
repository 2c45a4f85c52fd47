"""Whether a translation kept its protected spans: the one yardstick of the span benchmark
(scripts/bench/protect.py), the software-strings study, the span fuzzer and the tests that fuzz
on the tiny model, so their figures and their verdicts count the same thing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from mt.spans import find_spans
from mt.translation.requests import Plan, Request
from mt.translation.translator import Translator, translate_stream


def span_counts(text: str, flags: Iterable[str] | None = None) -> Counter:
    """Each protected span of `text` (as `mt.spans.find_spans` finds them for gettext `flags`)
    and how often it occurs."""
    return Counter(s.text for s in find_spans(text, flags))


def same_spans(out: str, src: str, flags: Iterable[str] | None = None) -> bool:
    """Whether `out` holds exactly the spans of `src`, each as often."""
    return span_counts(out, flags) == span_counts(src, flags)


def kept(out: str, src: str, spans: list[str]) -> bool:
    """Whether every one of `spans` occurs in `out` as written and as often as in `src`."""
    return all(out.count(x) == src.count(x) for x in set(spans))


def span_failures(translator: Translator, lines: list[str], html: bool) -> list[str]:
    """Failures (one line each) of translating `lines` as `mt translate` does: an error, a
    line that comes back as two, or spans that differ from the source's (the fuzzer's check)."""
    if html:
        asked = [
            Request(x, where=f"fuzz:{i}", plan=Plan(html=True)) for i, x in enumerate(lines, 1)
        ]
        outs = list(translate_stream(translator, asked))
    else:
        outs = list(translate_stream(translator, lines, Plan(recase=False)))
    if len(outs) != len(lines):
        return [f"{len(lines)} lines in, {len(outs)} out"]
    bad = []
    for k, (line, t) in enumerate(zip(lines, outs)):
        if t.error:
            bad.append(f"line {k}: {t.error}: {line!r}")
        elif "\n" in t.text or not all(same_spans(x, line) for x in t.texts):
            bad.append(f"line {k}: spans differ: {line!r} -> {t.text!r}")
    return bad

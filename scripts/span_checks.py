"""Whether a translation kept its protected spans: the one yardstick of the span benchmark
(scripts/bench/protect.py), the software-strings study and the span fuzzer, so their figures
count the same thing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def span_counts(text: str, flags: Iterable[str] | None = None) -> Counter:
    """Each protected span of `text` (as `mt.spans.find_spans` finds them for gettext `flags`)
    and how often it occurs."""
    from mt.spans import find_spans

    return Counter(s.text for s in find_spans(text, flags))


def same_spans(out: str, src: str, flags: Iterable[str] | None = None) -> bool:
    """Whether `out` holds exactly the spans of `src`, each as often."""
    return span_counts(out, flags) == span_counts(src, flags)


def kept(out: str, src: str, spans: list[str]) -> bool:
    """Whether every one of `spans` occurs in `out` as written and as often as in `src`."""
    return all(out.count(x) == src.count(x) for x in set(spans))

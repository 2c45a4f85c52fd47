"""Spans under way: where text appended to a line could still complete a span (`mt.spans`).

The span patterns are compiled here for the `regex` module, whose partial matching says
whether a string could still grow into a match. `mt.spans.bans` asks, at each step of a
search, where in a hypothesis a span is under way (`open_starts`), which patterns are still
alive there (`alive_patterns`), and, piece by piece, whether a span grows, is completed or dies
(`growth`). The patterns are the only source: nothing here lists the endings of a span.

An ICU argument is written as one recursive pattern here (the balanced braces
`mt.spans._icu_spans` counts). An e-mail address counts only once its `@` is written: before
that its local part is any word (`ka`), and what would complete it is a piece holding `@` and
a domain, which the ban finds whatever word precedes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache, lru_cache

import regex

from mt.spans import _ICU, PATTERNS, WIDEST, _compiled
from mt.spans.regex_facts import character_tests, last_tests

_KEYWORDS = r"plural|select|selectordinal|number|date|time|spellout|ordinal|duration"
_ICU_WHOLE = (
    rf"\{{\s*[A-Za-z_]\w*\s*,\s*(?:{_KEYWORDS})\s*(?:\}}|,(?:[^{{}}\n]|(?&icub))*\}})"
    r"(?(DEFINE)(?<icub>\{(?:[^{}\n]|(?&icub))*\}))"
)
# Each pattern in `find_spans`'s order, the ICU argument last: (kind, expression). The flat
# form of the ICU argument (for `re`, which has no recursion) makes the same character tests.
GROWING = [(kind, p) for _, kind, p in PATTERNS] + [("icu", _ICU_WHOLE)]
_FLAT = [p for _, _, p in PATTERNS] + [_ICU.pattern + r"[^{}\n]\{\}"]
EMAIL = next(k for k, (kind, _) in enumerate(GROWING) if kind == "email")
ALL = frozenset(range(len(GROWING)))
WINDOW_CHARS = 300  # a span still open after this many characters is taken for text


@cache
def _each() -> list[regex.Pattern[str]]:
    return [regex.compile(p) for _, p in GROWING]


@lru_cache(maxsize=64)
def _union(among: frozenset[int]) -> regex.Pattern[str] | None:
    """The patterns of `among` but e-mail as one expression, in `find_spans`'s order: at a
    position it matches as `find_spans` does when the others cannot match there."""
    parts = [f"(?:{GROWING[k][1]})" for k in sorted(among) if k != EMAIL]
    return regex.compile("|".join(parts)) if parts else None


def alive_patterns(text: str, i: int) -> frozenset[int]:
    """The patterns (indices of `GROWING`) that match `text[i:]` up to its end, partly or
    wholly (by any way through the pattern, not only the one a match takes: `www.x.` may
    grow into `www.x.de`): those that appended text could still complete or extend from `i`."""
    out = []
    for k, pattern in enumerate(_each()):
        if k == EMAIL and "@" not in text[i:]:
            continue
        if pattern.fullmatch(text, i, partial=True) is not None:
            out.append(k)
    return frozenset(out)


def growth(text: str, i: int, done: int, among: frozenset[int] = ALL) -> tuple[bool, bool, bool]:
    """For a span of the patterns `among` that starts at `text[i]` (the characters before it
    read by lookbehinds): (alive, at_end, final). `alive`: a pattern matches `text[i:]` up
    to its end, partly or wholly, so appending text could still complete a span there (a
    whole span at the end may grow: `$HO` -> `$HOME`, or be undone: `%s` -> `%so`).
    `at_end`: a whole span from `i` ends at the end, after `done` (what follows `done`
    completed it). `final`: a whole span from `i` ends after `done` and before the end,
    where nothing appended changes it."""
    alive = at_end = final = False
    union = _union(among)
    email = EMAIL in among and "@" in text[i:]
    for pattern in (union, _each()[EMAIL] if email else None):
        if pattern is None:
            continue
        m = pattern.match(text, i, partial=True)
        if m is None:
            continue
        # The match `find_spans` would take may end before the end (`www.x` in `www.x.`), where
        # a longer one appended text completes may still run through it (`www.x.de`).
        alive |= m.end() == len(text) or pattern.fullmatch(text, i, partial=True) is not None
        if not m.partial and m.end() > done:
            at_end |= m.end() == len(text)
            final |= m.end() < len(text)
    return alive, at_end, final


@lru_cache(maxsize=64)
def final_test(among: frozenset[int]) -> re.Pattern[str]:
    """One character test that the last character of every span of the patterns `among`
    passes (`>` for a tag, `;` for an entity, a conversion letter for `%s`): a piece holding
    no character that passes it completes none of those spans."""
    tests = set().union(*(last_tests(_FLAT[k]) for k in among))
    return re.compile("|".join(sorted(tests)) or "(?!)")


def class_map(chars: Iterable[str], among: frozenset[int] = ALL) -> dict[int, str]:
    """A `str.translate` table that writes each of `chars` as the representative of its
    class: characters that every test of the patterns `among` (each literal and class, and
    `\\b`'s word test) treats alike are one class, so those patterns match the mapped text
    where they match the text, and texts that differ only within classes share one reading
    (`mt.spans.bans` walks the vocabulary once for all of them)."""
    # A character's answers to each pattern's tests, the word and space tests last: two
    # characters agree on all of them where they agree on every test of the union.
    patterns = sorted(among) + [len(_FLAT)]
    reps: dict[tuple[tuple[bool, ...], ...], str] = {}
    out = {}
    ascii_ = [chr(i) for i in range(32, 127)] + [chr(i) for i in range(32)] + [chr(127)]
    for c in ascii_ + sorted(set(chars) - set(ascii_)):
        sig = tuple(_answers(k, c) for k in patterns)
        out[ord(c)] = reps.setdefault(sig, c)
    return out


@lru_cache(maxsize=1 << 14)
def _answers(k: int, c: str) -> tuple[bool, ...]:
    """Whether `c` passes each character test of pattern `k` (`_FLAT`; `len(_FLAT)`: the word
    and space tests), kept: a search asks `class_map` for a few dozen sets of patterns over
    the same characters."""
    return tuple(bool(t.fullmatch(c)) for t in _tests(k))


@cache
def _tests(k: int) -> list[re.Pattern[str]]:
    """The character tests of pattern `k`, or (`len(_FLAT)`) the word and space tests."""
    if k == len(_FLAT):
        return [re.compile(r"\w"), re.compile(r"\s")]
    return [re.compile(t) for t in sorted(character_tests(_FLAT[k]))]


@lru_cache(maxsize=1)
def _starters() -> tuple[str, str]:
    """(characters a span of any syntax can start with, those of them that start only
    addresses: URLs and e-mail, which hold no white space), read off the patterns over the
    printable ASCII characters (spans are made of ASCII)."""
    chars = [chr(c) for c in range(33, 127)]
    any_ = [c for c in chars if any(p.match(c, partial=True) for p in _each())]
    others = [p for (kind, _), p in zip(GROWING, _each()) if kind not in ("url", "email")]
    address = [c for c in any_ if not any(p.match(c, partial=True) for p in others)]
    return "".join(any_), "".join(address)


def open_starts(text: str, lo: int = 0) -> list[int]:
    """Positions `i >= lo` of `text` (and within its last `WINDOW_CHARS`) at which a span of
    any syntax is under way: text appended to the line could still complete, or extend, a
    span that starts at `i`. Read from the patterns themselves (`growth`), so a tag with
    braces in its attributes (`<p a {0`) or an ICU argument is open as long as its pattern
    says it is. Addresses hold no white space, so their starts are looked for in the line's
    last word only."""
    starters, address = _starters()
    lo = max(lo, len(text) - WINDOW_CHARS)
    last_word = len(text)
    while last_word > lo and not text[last_word - 1].isspace():
        last_word -= 1
    found = [m.start() for m in _starts_re(starters, address).finditer(text, lo)]
    found += [  # addresses start at a word boundary (`\b`)
        m.start() for m in _WORD_START.finditer(text, last_word) if m.group() in address
    ]
    return [i for i in sorted(found) if growth(text, i, len(text))[0]]


_WORD_START = re.compile(r"(?<!\w)\w")


@lru_cache(maxsize=1)
def _starts_re(starters: str, address: str) -> re.Pattern[str]:
    """The characters that start spans other than addresses, as one character class."""
    return re.compile("[" + re.escape("".join(c for c in starters if c not in address)) + "]")


def reached(text: str, starts: list[int], decided: int = 0) -> list[int]:
    """Those of `starts` (open starts of `text`, ascending) that `find_spans`'s scan of `text`
    plus any appended text can reach. The scan takes a span where it finds one and goes on
    after it, so a start inside a span it takes whatever is appended is never tried: in
    `%%%%%` the scan takes `%%` twice, so the fourth `%` is inside a span and only the fifth
    can start one (`%%` with a `%` appended). Every position before the first start is
    decided (none is open), so the spans the scan finds there now are those it finds with
    any text appended; past a start that it reaches, nothing is decided. A line that may
    hold an ICU argument keeps its starts: its braces are counted apart from the scan.

    Where `text[:decided]` holds no span under way (no open start its scan reaches, within
    `WINDOW_CHARS`), every span the scan takes before `decided` ends there or before, and none
    starts after its last one and runs past `decided` (its start would be open): the scan is
    taken up at `decided`, its one character before read by the lookbehinds."""
    if not starts or "{" in text:
        return starts
    scan, pos = _compiled(WIDEST), decided
    for n, t in enumerate(starts):
        while pos <= t and (m := scan.search(text, pos)) is not None and m.start() < t:
            pos = m.end()
        if pos <= t:
            return starts[n:]
    return []

"""`find_spans` tries its patterns only where a span can start (`mt.spans.STARTS` or a word
boundary): every pattern must begin there, and the guarded scan finds what the bare union of
the patterns finds; and one scan of many lines (`find_spans_each`) finds what a scan of each
line alone finds."""

from __future__ import annotations

import re
from re import _constants as c
from re import _parser as parse

from hypothesis import given, settings
from hypothesis import strategies as st

from mt.spans import DEFAULT, PATTERNS, STARTS, WIDEST, _compiled, find_spans, find_spans_each

BOUNDARY = "\\b"


def _first(items) -> set[str]:
    """The characters a match of the parsed `items` can begin with, `BOUNDARY` for a word
    boundary, "?" for anything else (a class, a repeat that may be empty, ...)."""
    for op, av in items:
        if op in (c.ASSERT, c.ASSERT_NOT) and av[0] < 0:  # a lookbehind takes no character
            continue
        if op == c.LITERAL:
            return {chr(av)}
        if op == c.AT and av == c.AT_BOUNDARY:
            return {BOUNDARY}
        if op == c.SUBPATTERN:
            return _first(av[3])
        if op == c.BRANCH:
            return set().union(*(_first(b) for b in av[1]))
        return {"?"}
    return {"?"}


def test_every_pattern_starts_where_the_guard_looks() -> None:
    """A pattern that could begin at another character would be skipped there by the guard:
    each must begin with one of `STARTS` or at a word boundary."""
    for _, kind, pattern in PATTERNS:
        first = _first(parse.parse(pattern))
        assert first <= set(STARTS) | {BOUNDARY}, (kind, pattern, first)


ALPHABET = st.sampled_from(list("<%&{$}>/;:.@#_-+ \n") + list("abswwwhtpL0159") + ["ä", "ß"])


@settings(max_examples=400, deadline=None)
@given(text=st.lists(ALPHABET, max_size=40).map("".join))
def test_the_guarded_scan_finds_what_the_bare_union_finds(text: str) -> None:
    """On text dense in span characters, the guarded expression matches exactly where, and
    as, the union of the patterns without the guard does."""
    for families in (WIDEST, DEFAULT, frozenset({"printf"})):
        keep = [(i, p) for i, (f, _, p) in enumerate(PATTERNS) if f in families or f == "markup"]
        bare = re.compile("|".join(f"(?P<k{i}>{p})" for i, p in keep), re.DOTALL)
        want = [(m.span(), m.lastgroup) for m in bare.finditer(text)]
        got = [(m.span(), m.lastgroup) for m in _compiled(families).finditer(text)]
        assert got == want, (text, families)


# Characters and whole tokens that make every kind of span, ICU arguments and meta-variables
# (`<Pfad>`, markup only where the line closes it) among them.
LINE_TOKENS = st.sampled_from(
    list("<%&{$}>/;:.@#_- \nasw05")
    + ["{n, plural, ", "one {#} ", "other {# x}", "}", "</b>", "<b>", "<Pfad>", "</Pfad>", "%s"]
)


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.lists(LINE_TOKENS, max_size=12).map("".join), max_size=8))
def test_one_scan_of_many_lines_finds_what_a_scan_of_each_finds(texts: list[str]) -> None:
    """`find_spans_each` scans the lines joined: it must find in each line exactly the spans
    `find_spans` finds in that line alone, whatever the other lines hold (an ICU argument left
    open, a closing tag that would make another line's `<Pfad>` markup)."""
    for families in (WIDEST, DEFAULT, frozenset({"printf"})):
        assert find_spans_each(texts, families) == [find_spans(t, families) for t in texts]


def test_a_line_is_read_apart_from_the_lines_scanned_with_it() -> None:
    """The cases a joined scan gets wrong when it reads the joined text as one line: an ICU
    argument left open in one line hid the arguments of every line after it, and one line's
    `</Pfad>` made another's `<Pfad>` markup."""
    icu = " {n, plural, one {# file} other {# files"
    got = find_spans_each([icu + "}", icu + "}}", "<Pfad>", "</Pfad>"])
    assert got[0] == []
    assert [s.text for s in got[1]] == [icu[1:] + "}}"]
    assert got[2] == []  # a meta-variable: no line of its own closes it
    assert [s.text for s in got[3]] == ["</Pfad>"]

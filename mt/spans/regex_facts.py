"""Facts about a regular expression read off its parsed form (`re._parser`), not its matches.

`mt.spans.open` asks two questions of each span pattern that no match can answer: which
characters a match can end with (a tag always ends on `>`, a `%s` on a letter), and which
character tests it makes at all (so that characters it treats alike can be read as one). Both
come from the expression's parse tree: the last set of its Glushkov automaton, and its atoms.
"""

from __future__ import annotations

import re
from re import _constants as _c
from re import _parser as _p

_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT)
_ZERO_WIDTH = (_c.AT, _c.ASSERT, _c.ASSERT_NOT)
_ATOMS = (_c.LITERAL, _c.NOT_LITERAL, _c.IN, _c.ANY)


def last_tests(pattern: str) -> set[str]:
    """The character tests (expressions that match one character) one of which the last
    character of every match of `pattern` passes: `>` for a tag, `[diouxX...]` for `%s`."""
    return _last_atoms(_p.parse(pattern))


def character_tests(pattern: str) -> set[str]:
    """The character classes `pattern` tests (each literal, class and `.`), written as
    expressions that match one character."""
    out: set[str] = set()

    def collect(items) -> None:
        for op, av in items:
            if op in _ATOMS:
                out.add(_atom_text(op, av))
            elif op in _REPEATS:
                collect(av[2])
            elif op == _c.SUBPATTERN:
                collect(av[3])
            elif op == _c.BRANCH:
                for b in av[1]:
                    collect(b)
            elif op in (_c.ASSERT, _c.ASSERT_NOT):
                collect(av[1])

    collect(_p.parse(pattern))
    return out


def _last_atoms(items) -> set[str]:
    """The atoms (as one-character expressions) that can match the last character of a match
    of the parsed expression `items`."""
    out: set[str] = set()
    for op, av in reversed(list(items)):
        if op in _ZERO_WIDTH:
            continue  # zero width: the character before it ends the match
        if op in _REPEATS:
            out |= _last_atoms(av[2])
            nullable = av[0] == 0 or _nullable(av[2])
        elif op == _c.SUBPATTERN:
            out |= _last_atoms(av[3])
            nullable = _nullable(av[3])
        elif op == _c.BRANCH:
            out = out.union(*(_last_atoms(b) for b in av[1]))
            nullable = any(_nullable(b) for b in av[1])
        else:
            out.add(_atom_text(op, av))
            nullable = False
        if not nullable:
            break
    return out


def _nullable(items) -> bool:
    """Whether the parsed expression `items` can match the empty string."""
    for op, av in items:
        if op in _ZERO_WIDTH:
            continue
        if op in _REPEATS:
            if av[0] > 0 and not _nullable(av[2]):
                return False
        elif op == _c.SUBPATTERN:
            if not _nullable(av[3]):
                return False
        elif op == _c.BRANCH:
            if not any(_nullable(b) for b in av[1]):
                return False
        else:
            return False
    return True


def _atom_text(op, av) -> str:
    """A parsed atom (LITERAL, NOT_LITERAL, IN or ANY) written back as an expression that
    matches one character."""
    if op == _c.ANY:
        return "(?s:.)"
    if op == _c.LITERAL:
        return re.escape(chr(av))
    if op == _c.NOT_LITERAL:
        return "[^" + re.escape(chr(av)) + "]"
    categories = {_c.CATEGORY_WORD: r"\w", _c.CATEGORY_NOT_WORD: r"\W", _c.CATEGORY_DIGIT: r"\d",
                  _c.CATEGORY_NOT_DIGIT: r"\D", _c.CATEGORY_SPACE: r"\s",
                  _c.CATEGORY_NOT_SPACE: r"\S"}  # fmt: skip
    out = []
    for kind, x in av:
        if kind == _c.NEGATE:
            out.insert(0, "^")
        elif kind == _c.LITERAL:
            out.append(re.escape(chr(x)))
        elif kind == _c.RANGE:
            out.append(f"{re.escape(chr(x[0]))}-{re.escape(chr(x[1]))}")
        elif kind == _c.CATEGORY:
            out.append(categories[x])
    return "[" + "".join(out) + "]"

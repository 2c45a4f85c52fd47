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


def ends_on_mark(pattern: str) -> bool:
    """Whether every match of `pattern` ends with a mark: no letter, digit, `_` or space."""
    codes, other = _last_chars(_p.parse(pattern))
    return not other and not any(
        chr(c).isalnum() or chr(c) == "_" or chr(c).isspace() for c in codes
    )


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


def _last_chars(items) -> tuple[set[int], bool]:
    """(the ASCII codes, and whether any other character) a match of the parsed expression
    `items` can end with."""
    codes: set[int] = set()
    other = False
    for op, av in reversed(list(items)):
        if op in _ZERO_WIDTH:
            continue  # zero width: the character before it ends the match
        if op in _REPEATS:
            sub = _last_chars(av[2])
            nullable = av[0] == 0 or _nullable(av[2])
        elif op == _c.SUBPATTERN:
            sub, nullable = _last_chars(av[3]), _nullable(av[3])
        elif op == _c.BRANCH:
            parts = [_last_chars(b) for b in av[1]]
            sub = (set().union(*(x for x, _ in parts)), any(o for _, o in parts))
            nullable = any(_nullable(b) for b in av[1])
        else:
            test = re.compile(_atom_text(op, av))
            sub = ({c for c in range(128) if test.fullmatch(chr(c))},
                   any(test.fullmatch(c) for c in "éß€\u3042"))  # fmt: skip
            nullable = False
        codes |= sub[0]
        other |= sub[1]
        if not nullable:
            break
    return codes, other


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

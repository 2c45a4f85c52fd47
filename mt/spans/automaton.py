"""Where the span patterns stand after a text: the state of `find_spans`'s scan, as a key.

The span ban answers, for each open text a row ends with (`mt.spans.rows`), which pieces would
complete a span there: a walk of the vocabulary and a check of its candidates, costly when a
search meets many open texts once each. Most of them differ in text but not in what can follow:
a model that writes `<ARG2` and then words (`<ARG2 ARG1 is smaller than`) is inside a tag's
attributes at every step, and a `>` completes it whatever the words were. This module gives the
text a key that says so, so those open texts share one answer (`mt.spans.index.PieceIndex.bans`).

The key is the scan's own state. `find_spans` tries the patterns of `PATTERNS` as one
expression (`mt.spans._compiled`) at a start, and `re` takes the first way through it, in the
order its alternatives and repeats prefer. That expression is parsed here (`re._parser`) into a
small automaton, and a text is run through it as a Pike VM runs one: a list of threads, kept in
`re`'s order of preference, each thread where a way through the expression stands after the
text. Two texts whose thread lists are the same lead `re` to the same match on any text
appended, since no pattern looks back further than one character (which the key holds) and
none refers back to a group. Lookarounds here test at most the characters either side of a
position; the parser refuses an expression that needs more, so a pattern added later that
does cannot make the key wrong, only absent.
"""

from __future__ import annotations

import re
import re._constants as C  # noqa: N812 (the parser's own names for its codes)
import re._parser as parser
from dataclasses import dataclass, field
from functools import lru_cache

from mt.spans import WIDEST, _compiled

MOVES = 1 << 14  # moves of the scan kept (`Automaton.step`, `Automaton.settle`)
Move = tuple[tuple[int, ...], bool]  # threads, and whether a match was reached
# Node kinds of the automaton.
CHAR, SPLIT, ASSERT, MATCH = range(4)

_WORD = re.compile(r"\w")
_CATEGORIES = {
    C.CATEGORY_DIGIT: re.compile(r"\d"),
    C.CATEGORY_SPACE: re.compile(r"\s"),
    C.CATEGORY_WORD: _WORD,
}
_NEGATED = {
    C.CATEGORY_NOT_DIGIT: C.CATEGORY_DIGIT,
    C.CATEGORY_NOT_SPACE: C.CATEGORY_SPACE,
    C.CATEGORY_NOT_WORD: C.CATEGORY_WORD,
}


class Unsupported(ValueError):
    """The expression holds a construct the key cannot follow: no key is given."""


@dataclass
class Nodes:
    """The automaton laid flat: node `i` is `kind[i]` with `arg[i]` and its `out[i]` (the
    nodes it leads to, in `re`'s order of preference)."""

    kind: list[int] = field(default_factory=list)
    arg: list[object] = field(default_factory=list)
    out: list[list[int]] = field(default_factory=list)

    def add(self, kind: int, arg: object = None, out: list[int] | None = None) -> int:
        self.kind.append(kind)
        self.arg.append(arg)
        self.out.append(out if out is not None else [])
        return len(self.kind) - 1


def _char_test(op: object, av: object) -> tuple:
    """A one-character test as a hashable description (`_passes` reads it)."""
    if op is C.LITERAL:
        return ("lit", chr(av))  # type: ignore[arg-type]
    if op is C.NOT_LITERAL:
        return ("not", ("lit", chr(av)))  # type: ignore[arg-type]
    if op is C.IN:
        items, negate = [], False
        for iop, iav in av:  # type: ignore[attr-defined]
            if iop is C.NEGATE:
                negate = True
            elif iop is C.LITERAL:
                items.append(("lit", chr(iav)))
            elif iop is C.RANGE:
                items.append(("range", iav[0], iav[1]))
            elif iop is C.CATEGORY:
                items.append(("not", ("cat", _NEGATED[iav])) if iav in _NEGATED else ("cat", iav))
            else:
                raise Unsupported(f"class item {iop}")
        test = ("any", tuple(items))
        return ("not", test) if negate else test
    if op is C.ANY:
        return ("all",)  # the scan's expression is compiled with DOTALL
    raise Unsupported(f"character test {op}")


def _passes(test: tuple, c: str) -> bool:
    """Whether `c` passes `test` (`_char_test`)."""
    what = test[0]
    if what == "lit":
        return c == test[1]
    if what == "not":
        return not _passes(test[1], c)
    if what == "any":
        return any(_passes(t, c) for t in test[1])
    if what == "range":
        return test[1] <= ord(c) <= test[2]
    if what == "cat":
        return _CATEGORIES[test[1]].fullmatch(c) is not None
    return True  # "all"


class Automaton:
    """The scan's expression as an automaton whose thread lists are keys (module docstring)."""

    def __init__(self, pattern: str) -> None:
        self.nodes = Nodes()
        self.match = self.nodes.add(MATCH)
        self.start = self._seq(list(parser.parse(pattern)), self.match)
        self._tests: dict[tuple[int, str], bool] = {}
        # The tests a character before a position meets: lookbehinds and `\b`.
        n = self.nodes
        self._behind_tests = [
            node
            for a in range(len(n.kind))
            if n.kind[a] == ASSERT and _behind(n.arg[a])
            for node in range(len(n.kind))
            if n.kind[node] == CHAR and self._in_body(n.arg[a][3], node)  # type: ignore[index]
        ]
        self._signatures: dict[str | None, tuple] = {}
        # Moves made: inside a tag a model writes the same threads again (`<ARG2 ARG1 ARG2`).
        self._moves: dict[tuple, Move] = {}

    def behind(self, c: str | None) -> tuple:
        """What the expression can tell of `c` as the character before a position: whether it
        is a word character (`\\b`) and which lookbehinds it passes. Texts that end in
        characters of one signature read alike to what follows."""
        out = self._signatures.get(c)
        if out is None:
            tests = tuple(c is not None and self._test(node, c) for node in self._behind_tests)
            out = self._signatures[c] = (_is_word(c), tests)
        return out

    def _in_body(self, entry: int, node: int) -> bool:
        """Whether `node` lies in the lookaround body that starts at `entry`."""
        stack, seen = [entry], set()
        while stack:
            n = stack.pop()
            if n == node:
                return True
            if n in seen or self.nodes.kind[n] == MATCH:
                continue
            seen.add(n)
            stack.extend(self.nodes.out[n])
        return False

    # -- building ------------------------------------------------------------------------
    def _seq(self, items: list, nxt: int) -> int:
        """The entry of `items` matched in turn, then `nxt` (built right to left)."""
        for op, av in reversed(items):
            nxt = self._one(op, av, nxt)
        return nxt

    def _one(self, op: object, av: object, nxt: int) -> int:
        n = self.nodes
        if op in (C.LITERAL, C.NOT_LITERAL, C.IN, C.ANY):
            return n.add(CHAR, _char_test(op, av), [nxt])
        if op is C.SUBPATTERN:
            _, add_flags, del_flags, body = av  # type: ignore[misc]
            if add_flags or del_flags:
                raise Unsupported("inline flags")
            return self._seq(list(body), nxt)
        if op is C.BRANCH:
            return n.add(SPLIT, None, [self._seq(list(alt), nxt) for alt in av[1]])  # type: ignore[index]
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            lo, hi, body = av  # type: ignore[misc]
            greedy = op is C.MAX_REPEAT
            if hi is C.MAXREPEAT:
                loop = n.add(SPLIT)
                inner = self._seq(list(body), loop)
                n.out[loop] = [inner, nxt] if greedy else [nxt, inner]
                entry = loop
            else:  # nested optional copies: x{0,2} as (?:x(?:x)?)?
                entry = nxt
                for _ in range(hi - lo):
                    inner = self._seq(list(body), entry)
                    entry = n.add(SPLIT, None, [inner, nxt] if greedy else [nxt, inner])
            for _ in range(lo):
                entry = self._seq(list(body), entry)
            return entry
        if op is C.AT:
            if av is C.AT_BOUNDARY:
                return n.add(ASSERT, ("b", False), [nxt])
            if av is C.AT_NON_BOUNDARY:
                return n.add(ASSERT, ("b", True), [nxt])
            raise Unsupported(f"anchor {av}")
        if op in (C.ASSERT, C.ASSERT_NOT):
            direction, body = av  # type: ignore[misc]
            sub_match = n.add(MATCH)
            sub = self._seq(list(body), sub_match)
            self._one_character(sub, sub_match, ahead=direction > 0)
            return n.add(ASSERT, ("look", op is C.ASSERT_NOT, direction, sub, sub_match), [nxt])
        raise Unsupported(f"construct {op}")

    def _one_character(self, entry: int, goal: int, ahead: bool) -> None:
        """Refuse a lookaround body that reads more than the one character beside its position:
        a lookahead may test `\\b` before its character, a lookbehind nothing but it."""
        kind, out = self.nodes.kind, self.nodes.out
        stack, seen = [entry], set()
        while stack:
            node = stack.pop()
            if node in seen or node == goal:
                continue
            seen.add(node)
            if kind[node] == SPLIT:
                stack.extend(out[node])
            elif kind[node] == ASSERT and ahead and self.nodes.arg[node][0] == "b":  # type: ignore[index]
                stack.extend(out[node])
            elif kind[node] == CHAR:
                self._reaches(out[node][0], goal)  # raises where a test follows
            else:
                raise Unsupported("a lookaround that reads more than one character")

    # -- running ---------------------------------------------------------------------------
    def _test(self, node: int, c: str) -> bool:
        key = (node, c)
        out = self._tests.get(key)
        if out is None:
            out = self._tests[key] = _passes(self.nodes.arg[node], c)  # type: ignore[arg-type]
        return out

    def _holds(self, node: int, prev: str | None, nxt: str | None) -> bool:
        """Whether the assertion `node` holds between `prev` and `nxt` (None: the text's edge)."""
        arg = self.nodes.arg[node]
        if arg[0] == "b":  # type: ignore[index]
            edge = _is_word(prev) != _is_word(nxt)
            return edge != arg[1]  # type: ignore[index]
        _, negate, direction, sub, sub_match = arg  # type: ignore[misc]
        if direction < 0:
            found = prev is not None and self._one_char(sub, sub_match, None, prev)
        else:
            found = self._one_char(sub, sub_match, prev, nxt, zero_width=True)
        return found != negate

    def _one_char(
        self,
        entry: int,
        goal: int,
        prev: str | None,
        c: str | None,
        zero_width: bool = False,
    ) -> bool:
        """Whether a lookaround's body matches: by no character (`zero_width`, between `prev`
        and `c`) or by the one character `c`, reaching `goal` without a further test."""
        kind, out = self.nodes.kind, self.nodes.out
        stack, seen = [entry], set()
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if node == goal:
                if zero_width:
                    return True
                continue
            if kind[node] == SPLIT:
                stack.extend(out[node])
            elif kind[node] == ASSERT:
                if self._holds(node, prev, c):
                    stack.extend(out[node])
            elif kind[node] == CHAR and c is not None and self._test(node, c):
                if self._reaches(out[node][0], goal):
                    return True
        return False

    def _reaches(self, node: int, goal: int) -> bool:
        """Whether `node` leads to `goal` with no test at all (a lookaround's body ends after
        its one character; `Unsupported` where it tests more)."""
        kind, out = self.nodes.kind, self.nodes.out
        stack, seen = [node], set()
        while stack:
            n = stack.pop()
            if n == goal:
                return True
            if n in seen:
                continue
            seen.add(n)
            if kind[n] == SPLIT:
                stack.extend(out[n])
            elif kind[n] != MATCH:
                raise Unsupported("a lookaround that tests more than one character")
        return False

    def step(self, threads: tuple[int, ...], prev: str | None, c: str) -> Move:
        """The threads after `c` is read (each thread a node it stands before, in order of
        preference), and whether a match ended before `c`: a thread that reaches the end of
        the expression there wins over every thread behind it, which is dropped (as `re`,
        taking the first way that matches, never tries them)."""
        key = (threads, prev, c)
        if (found := self._moves.get(key)) is None:
            leaves, matched = self.closure(threads, prev, c)
            out = self.nodes.out
            moved = tuple(dict.fromkeys(out[n][0] for n in leaves if self._test(n, c)))
            found = self._keep(key, (moved, matched))
        return found

    def settle(self, threads: tuple[int, ...], prev: str | None) -> Move:
        """The same threads taken as far as they go before the next character: to the tests
        that read it (a character, a lookahead, `\\b`), a lookbehind decided by `prev`, and
        cut behind a match that needs nothing more (`%<` is GCC's quote whatever follows, so
        the Ruby `%<name>s` behind it is never tried). Each step reads on from these exactly
        as from the threads they came from, and threads that differ only in the way they
        got there settle alike: the key is the same for more texts."""
        if (found := self._moves.get((threads, prev))) is None:
            found = self._keep((threads, prev), self.closure(threads, prev, None, ahead=False))
        return found

    def _keep(self, key: tuple, found: Move) -> Move:
        """`found`, kept as the move `key` (all dropped at `MOVES`: a server runs on)."""
        if len(self._moves) >= MOVES:
            self._moves.clear()
        self._moves[key] = found
        return found

    def closure(
        self, threads: tuple[int, ...], prev: str | None, nxt: str | None, ahead: bool = True
    ) -> tuple[tuple[int, ...], bool]:
        """The threads followed, in order, through every split and every assertion decided
        between `prev` and `nxt` (None: the text's edge; with `ahead` False the next character
        is not known yet, and the assertions that read it are kept as they are) to the nodes
        that read a character, and whether a match is reached first: the threads behind it
        are dropped."""
        kind, out, arg = self.nodes.kind, self.nodes.out, self.nodes.arg
        leaves: list[int] = []
        seen: set[int] = set()
        for t in threads:
            stack = [t]
            while stack:
                node = stack.pop()
                if node in seen:
                    continue
                seen.add(node)
                k = kind[node]
                if k == SPLIT:
                    stack.extend(reversed(out[node]))
                elif k == ASSERT and (ahead or _behind(arg[node])):
                    if self._holds(node, prev, nxt):
                        stack.append(out[node][0])
                elif node == self.match:
                    return tuple(leaves), True
                else:
                    leaves.append(node)
        return tuple(leaves), False


def _behind(arg: object) -> bool:
    """Whether an assertion's `arg` is a lookbehind (decided by the character before)."""
    return arg[0] == "look" and arg[2] < 0  # type: ignore[index]


def _is_word(c: str | None) -> bool:
    return c is not None and _WORD.fullmatch(c) is not None


@lru_cache(maxsize=1)
def scan() -> Automaton | None:
    """The automaton of `find_spans`'s scan over every syntax (what search may not write), or
    None where the expression holds something it cannot follow."""
    try:
        return Automaton(_compiled(WIDEST).pattern)
    except Unsupported:
        return None


State = tuple[tuple[int, ...], bool, str | None]  # threads, a match seen, the last character


def start_state(prev: str | None) -> State:
    """The scan's state at a start, `prev` the character before it."""
    auto = scan()
    assert auto is not None
    return (auto.start,), False, prev


def advance(state: State, text: str) -> State:
    """`state` after `text` is read, settled (`Automaton.settle`)."""
    auto = scan()
    assert auto is not None
    threads, matched, prev = state
    for c in text:
        if not threads:
            break
        threads, hit = auto.step(threads, prev, c)
        matched |= hit
        prev = c
    if text:
        prev = text[-1]
    threads, hit = auto.settle(threads, prev)
    return threads, matched or hit, prev

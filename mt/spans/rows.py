"""The open text of each row a search writes: where a span is under way, read once per row
from its parent row (`mt.spans.bans` asks this at every step).

A row's open text is what `PieceIndex.completing` needs: the text from just before its first
open start (`mt.spans.open.open_starts`), the line's closing tags before it as a `head`, and
the starts, relative to it. Search extends each row by one piece a step, so the open text of a
row is the open text of its parent row grown by that piece, as long as the first start
survives: which starts survive and which open inside the piece is read off the open text and
the piece alone (the patterns look back one character, which the open text keeps as its
kind: `kind`), so each open text gets an id and the step is kept by (id, piece): a row
ending is a lookup, carried as an integer from row to row (`mt.spans.carry`). A row whose
parent held no open span and whose last piece cannot open one holds none either (open text is
prefix-closed). Only a row whose first start dies, a piece that can open a span after a row
that held none, or one that holds `@` (an address may start before it), is read as text.
"""

from __future__ import annotations

import re

import numpy as np

from mt.spans import CLOSING_TAG, LINE_BREAK, WIDEST, find_spans
from mt.spans.open import WINDOW_CHARS, growth, open_starts, reached

_WORD = re.compile(r"\w+")
SEPARATOR = LINE_BREAK  # ends every span: what a row's closing tags are kept apart by
CACHE = 4096  # steps of open text kept (the oldest dropped first)
STATES = 1 << 16  # open texts given ids before the ids start again

# A row's open text: (head, end, starts in `end`); None where no span is under way.
Open = tuple[str, str, tuple[int, ...]]


class OpenTexts:
    """The open text of rows over the pieces `texts`; `opener[v]`: piece v can hold the start
    of a span under way (`mt.spans.index.PieceIndex.opener`).

    Each open text met has an id (`states`, 0 for none), and the id a state moves to when a
    piece is written is kept (`step`) where it follows from the state and the piece alone, so
    a row's state is carried from its parent's as an integer (`mt.spans.carry`)."""

    def __init__(self, texts: list[str], opener: list[bool]) -> None:
        self.texts, self.opener = texts, opener
        # A piece of word characters only, and a piece ending in one: after such an ending the
        # first continues a word, where no span starts (`_continues`).
        self._wordy = [bool(t) and _WORD.fullmatch(t) is not None for t in texts]
        self._word_end = [bool(t) and _WORD.fullmatch(t[-1]) is not None for t in texts]
        self._opener = np.array(opener, dtype=bool)
        self._steps: dict[tuple[str, int], tuple[str, tuple[int, ...]]] = {}  # `_grow`'s
        self._opens: dict[tuple[int, str], Open | None] = {}  # `_opened`'s
        self.generation = 0  # bumped when the ids start again (`bound`)
        self.states: list[Open | None] = [None]
        self._ids: dict[Open | None, int] = {None: 0}
        self._next: dict[int, int] = {}  # state * len(texts) + piece -> state
        self._table = _EMPTY  # `_next` as arrays of keys, sorted, and their states (`known`)

    def intern(self, state: Open | None) -> int:
        """The id of the open text `state` (0: None)."""
        out = self._ids.get(state)
        if out is None:
            out = self._ids[state] = len(self.states)
            self.states.append(state)
        return out

    def bound(self) -> None:
        """Start the ids again once `STATES` are kept (a server translates without end): rows
        carried from before see the generation change and are read again."""
        if len(self.states) > STATES:
            self.states, self._ids, self._next = [None], {None: 0}, {}
            self._table = _EMPTY
            self.generation += 1

    def known(self, states: np.ndarray, pieces: np.ndarray) -> np.ndarray:
        """(N,) int64: the id `step` kept for each state and piece, -1 where it has none yet;
        for all of a step's rows at once, where a lookup a row costs the search more than the
        rest of its ban. The table is laid out again once `step` has grown it by a quarter:
        what it lacks meanwhile, `step` finds."""
        keys, values = self._table
        if len(self._next) > len(keys) * 5 // 4 + 64:
            keys = np.fromiter(self._next, np.int64, len(self._next))
            values = np.fromiter(self._next.values(), np.int64, len(self._next))
            order = np.argsort(keys)
            self._table = keys, values = keys[order], values[order]
        if not len(keys):
            return np.full(len(states), -1, dtype=np.int64)
        want = states * len(self.texts) + pieces
        at = np.searchsorted(keys, want).clip(max=len(keys) - 1)
        return np.where(keys[at] == want, values[at], -1)

    def step(self, state: int, v: int) -> int | None:
        """The id of the open text `state` (an id, not 0) grown by piece `v`, where it follows
        from the two alone: its first start survives, or every start dies. None where the row
        must be read as text (`of`): a new first start needs the text before it, and a piece
        holding `@` may complete an address that began before the open text."""
        key = state * len(self.texts) + v
        out = self._next.get(key)
        if out is not None:
            return out
        piece = self.texts[v]
        if not piece or "@" in piece:
            return None
        head, end, starts = self.states[state]  # type: ignore[misc]
        grown, now = self._grow(end, starts, v)
        if now and now[0] != starts[0]:
            return None
        out = self._next[key] = self.intern((head, grown, now) if now else None)
        return out

    def read_row(self, row: np.ndarray, last: int) -> Open | None:
        """The open text of the row of tokens `row` whose parent's is not known."""
        if not self._opener[row].any():
            return None
        if "@" not in self.texts[last] and not self._opener[row[:-1]].any():
            return self.of(row, last, None)
        return self.of(row, last, False)

    def of(self, row: np.ndarray, last: int, parent: Open | None | bool) -> Open | None:
        """The open text of the row of tokens `row`, whose last piece is `last`, from the open
        text of the row before it (`parent`: None where it holds none, False where it is not
        known or nothing can be grown from it)."""
        piece = self.texts[last]
        if "@" in piece or parent is False or (parent is not None and not piece):
            text = self.text(row)
            return read(text, open_starts(text))
        if parent is None:
            if self.opener[last] and not self._continues(row, last):
                return self._opened(self.text(row), last)
            return None
        head, end, starts = parent
        grown, now = self._grow(end, starts, last)
        if not now:
            return None
        if now[0] == starts[0]:  # the same first start: the same context and head
            return head, grown, now
        text = self.text(row)
        cut = len(text) - len(grown)
        return read(text, [cut + s for s in now])

    def _opened(self, text: str, last: int) -> Open | None:
        """The open text of `text`, whose last piece `last` follows a row that held no span
        under way. That row's text is decided: the scan of this one goes as far as it went,
        then on into the piece (`read`). Where the line holds no closing tag and no brace and
        fits the window, the open text depends only on the piece and the kind of the
        character before it, and is kept by them (most rows that open a span: ` %` after a
        word, ` '%` after one): every start is in the piece, and no span the scan finds can
        run from before the piece to a start in it (it would have been under way at the end
        of the row before, a span whole at a line's end too), so the text kept begins in the
        piece or at the character before it, read as its kind (`context`)."""
        lo = len(text) - len(self.texts[last])
        plain = len(text) <= WINDOW_CHARS and "</" not in text and "{" not in text
        key = (last, kind(text[lo - 1]) if lo else "")
        if plain and key in self._opens:
            return self._opens[key]
        out = read(text, open_starts(text, lo), lo if lo <= WINDOW_CHARS else 0)
        if plain:
            self._opens[key] = out
        return out

    def _continues(self, row: np.ndarray, last: int) -> bool:
        """Whether the last piece, of word characters only, continues a word of the row: then
        the only spans a word piece can start (addresses, at a word's start) start before it,
        in a row whose open text is known to be none, and open text is prefix-closed."""
        if not self._wordy[last]:
            return False
        for v in row[-2::-1].tolist():
            if self.texts[v]:
                return self._word_end[v]
        return False

    def text(self, row: np.ndarray) -> str:
        """The text of a row of tokens."""
        return "".join(map(self.texts.__getitem__, row.tolist()))

    def _grow(self, end: str, starts: tuple[int, ...], v: int) -> tuple[str, tuple[int, ...]]:
        """`end` with piece `v` appended, and the open starts in it: those of `starts` still
        alive (and within the window), and those opening inside the piece."""
        key = (end, v)
        if key not in self._steps:
            grown, lo = end + self.texts[v], len(end)
            keep = [s for s in starts if s >= len(grown) - WINDOW_CHARS and growth(grown, s, lo)[0]]
            if len(self._steps) >= CACHE:
                self._steps.pop(next(iter(self._steps)))
            self._steps[key] = (grown, tuple(keep + open_starts(grown, lo)))
        return self._steps[key]


_EMPTY = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def read(text: str, starts: list[int], decided: int = 0) -> Open | None:
    """The open text of `text`, whose open starts are `starts`: from just before the first
    (`context`), the line's closing tags before that as `head` (a lone `<Name>` is markup when
    the line closes it, `mt.spans`: they go with it, apart from it: `SEPARATOR` ends any
    span). A start the line's scan cannot reach (`reached`) opens nothing. `decided`: where
    a text before which nothing was under way ends (`mt.spans.open.reached`)."""
    starts = reached(text, starts, decided)
    if not starts:
        return None
    cut = context(text, starts[0])
    closes = sorted(set(CLOSING_TAG.findall(text, 0, cut)))
    head = "".join(f"</{n}>" for n in closes) + SEPARATOR if closes else ""
    as_kind = cut == starts[0] - 1 or (cut == starts[0] - 2 and text[cut + 1] == "%")
    end = kind(text[cut]) + text[cut + 1 :] if as_kind else text[cut:]
    return head, end, tuple(s - cut for s in starts)


def context(text: str, start: int) -> int:
    """Where the text kept for the open text from `start` begins: the character before it
    (read as its `kind`), or, when that character ends a span already written (`%%` before
    `<%`), that span whole. The first character of a line is free to start a span that
    would swallow `start` (`%<` is one), a character an earlier span took is not: the two
    read alike to the lookbehinds but not to `find_spans`'s scan."""
    if start == 0 or text[start - 1].isspace():  # no span ends on a space: most rows
        return max(0, start - 1)
    lo = max(0, start - WINDOW_CHARS)
    for span in find_spans(text[lo:start], WIDEST):
        if span.start < start - 1 - lo < span.end and span.end == start - lo:
            return lo + span.start
    if text[start - 1] == "%" and start >= 2:
        # `%` starts spans of its own (`%<`, `%www`) where its own lookbehind lets it (not
        # after a digit or `%`): it is kept as it is, after the character before it as a kind.
        return start - 2
    return start - 1


def kind(c: str) -> str:
    r"""A character as the patterns' lookbehinds (`\b`, `(?<![\d%])`) see it, so `(%` and
    `:%` share their open text."""
    if c.isspace():
        return " "
    return "5" if c.isdigit() else "%" if c == "%" else "a" if c.isalnum() or c == "_" else "."

"""The open text of each row a search writes: where a span is under way, read once per row
from its parent row (`mt.spans.bans` asks this at every step).

A row's open text is what `PieceIndex.completing` needs: the text from just before its first
open start (`mt.spans.open.open_starts`), the line's closing tags before it as a `head`, and
the starts, relative to it. Search extends each row by one piece a step, so the open text of a
row is the open text of its parent row grown by that piece, as long as the first start
survives: which starts survive and which open inside the piece is read off the open text and
the piece alone (the patterns look back one character, which the open text keeps as its
kind: `kind`), so that step is kept by (open text, piece) and a row ending is a lookup. A row
whose parent held no open span and whose last piece cannot open one holds none either (open
text is prefix-closed). Only a row whose first start dies, or one ending in a piece that holds
`@` (an address may start before it), is read again as text.
"""

from __future__ import annotations

from mt.spans import CLOSING_TAG, LINE_BREAK, WIDEST, find_spans
from mt.spans.open import WINDOW_CHARS, growth, open_starts, reached

SEPARATOR = LINE_BREAK  # ends every span: what a row's closing tags are kept apart by
CACHE = 4096  # rows, and steps of open text, kept (the oldest dropped first)

# A row's open text: (head, end, starts in `end`); None where no span is under way.
Open = tuple[str, str, tuple[int, ...]]


class OpenTexts:
    """The open text of rows over the pieces `texts`; `opener[v]`: piece v can hold the start
    of a span under way (`mt.spans.index.PieceIndex.opener`)."""

    def __init__(self, texts: list[str], opener: list[bool]) -> None:
        self.texts, self.opener = texts, opener
        # By row text, the rows of the last steps: two generations, the older dropped whole
        # when the newer is full (dropping the oldest entry of one dict costs a scan).
        self._rows: dict[str, Open | None] = {}
        self._older: dict[str, Open | None] = {}
        self._steps: dict[tuple[str, int], tuple[str, tuple[int, ...]]] = {}  # `_grow`'s

    def of(self, text: str, last: int, parent_open: bool = True) -> Open | None:
        """The open text of the row `text`, whose last piece is `last`; `parent_open` False
        says the row before it held no piece that can open a span (so no open text)."""
        piece = self.texts[last]
        lo = len(text) - len(piece)
        if not parent_open:
            parent: Open | None | bool = None
        elif not piece or lo <= 0:
            parent = False  # nothing to grow from: read the row whole
        else:
            parent = self.known(text[:lo])
        if "@" in piece or parent is False:
            out = read(text, open_starts(text))
        elif parent is None:
            out = read(text, open_starts(text, lo)) if self.opener[last] else None
        else:
            head, end, starts = parent
            grown, now = self._grow(end, starts, last)
            if not now:
                out = None
            elif now[0] == starts[0]:  # the same first start: the same context and head
                out = (head, grown, now)
            else:
                cut = len(text) - len(grown)
                out = read(text, [cut + s for s in now])
        self.keep(text, out)
        return out

    def known(self, text: str) -> Open | None | bool:
        """The open text of a row read before; False when it was not (or is forgotten)."""
        out = self._rows.get(text, False)
        return self._older.get(text, False) if out is False else out

    def keep(self, text: str, state: Open | None) -> None:
        """Remember the open text of row `text`."""
        if len(self._rows) >= CACHE:
            self._older, self._rows = self._rows, {}
        self._rows[text] = state

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


def read(text: str, starts: list[int]) -> Open | None:
    """The open text of `text`, whose open starts are `starts`: from just before the first
    (`context`), the line's closing tags before that as `head` (a lone `<Name>` is markup when
    the line closes it, `mt.spans`: they go with it, apart from it: `SEPARATOR` ends any
    span). A start the line's scan cannot reach (`reached`) opens nothing."""
    starts = reached(text, starts)
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

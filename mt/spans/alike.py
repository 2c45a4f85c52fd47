"""When two open texts get the same answer from the span ban, though their texts differ.

The ban (`mt.spans.index.PieceIndex.bans`) finds, for each open text a row ends with, the pieces
that would complete a span after it: a walk of the vocabulary and a check of its candidates
with `find_spans`. A search meets many open texts once each (a model that writes `<ARG2` and
then words is inside a tag at every step, each step a new text), and most read alike to
everything that can follow: `key` says what the answer depends on, so the ban computes it once
per key. The reasoning, for a line `head + end + piece`:

- Every span that reaches into the piece starts at an open start of `end` (a pattern matches
  from there to the end, partly or wholly: `mt.spans.open`). A start where the scan's threads
  (`mt.spans.automaton`) have all died is decided: its match, or none, is the same whatever
  follows. With one start still live, the spans that reach into the piece are those the scan
  finds from that start on, provided the scan reaches it (no decided span swallows it).
- From that start on, `re` goes where its threads lead: the same threads after two texts, and a
  last character the expression tells apart no better (lookbehinds, `\\b`), lead to the same
  matches on any piece. What else `find_spans` reads of the line: the closing tags (in the
  head, the open text or the piece) and, for a tag, its head (`<Name` is markup by its name,
  a `/`, a space after it): a name no element and no closing tag begins reads as any other.
- The ban filters by the spans a sentence is allowed, by their text. The spans inside the piece
  are the same text after either open text, and a span through the start is the text under
  way followed by the same part of the piece: the answer is kept with that part alone
  (`mt.spans.index.PieceIndex.bans`), and each open text's own text under way put before it,
  so the key does not depend on what the sentence is allowed.

Lines that may hold an ICU argument (its braces are counted apart from the scan) get no key.
"""

from __future__ import annotations

import re

from mt.spans import CLOSING_TAG, ELEMENTS, WIDEST, _compiled, automaton

_TAG = re.compile(r"<(/?)([A-Za-z][\w:.-]*)(\s*)")  # as `mt.spans._is_markup` reads a tag
CACHE = 4096  # scan states kept, by open text and start


class Alike:
    """Keys of open texts over the target pieces `texts` (module docstring)."""

    def __init__(self, texts: list[str]) -> None:
        # Names a piece closes (`</b>`): a tag of such a name may be markup by what follows.
        self.closing = frozenset(n for t in texts if "</" in t for n in CLOSING_TAG.findall(t))
        self._states: dict[tuple[str, str, int], automaton.State] = {}

    def key(
        self, head: str, end: str, starts: tuple[int, ...], grown: int
    ) -> tuple[tuple, int | None] | None:
        """What the ban's answer after the open text (`head`, `end`, `starts`:
        `mt.spans.rows`) depends on, and the one start still live in `end` (None where none
        is: no span reaches into a piece but the piece's own); None where it cannot be said
        without the text. `grown` > 0: the last `grown` characters of `end` extend the open
        text of the row before, whose scan states are kept."""
        if "{" in end or automaton.scan() is None:
            return None
        line = head + end
        live = [s for s in starts if self._state(head, end, s, grown)[0]]
        # The first live start the scan of the open text reaches (`mt.spans.rows.read` keeps
        # the starts of a line that may hold an ICU argument): before it, every span is decided.
        while live and not _reached(line, len(head) + live[0]):
            live.pop(0)
        if len(live) > 1:
            return None
        closes = frozenset(CLOSING_TAG.findall(line)) if "</" in line else frozenset()
        behind = automaton.scan().behind(line[-1]), line[-1] == "/"  # type: ignore[union-attr]
        if not live:  # no span reaches into a piece but the piece's own
            return (head, closes, None, None, behind), None
        s = live[0]
        threads, matched, _ = self._state(head, end, s, grown)
        return (head, closes, self._tag(end, s, closes), (threads, matched), behind), s

    def _state(self, head: str, end: str, s: int, grown: int) -> automaton.State:
        """The scan's state after the text from start `s` of `end`, from the row before's
        where it is kept."""
        at = (head, end, s)
        state = self._states.get(at)
        if state is None:
            under_way = end[s:]
            parent = (
                self._states.get((head, end[:-grown], s)) if 0 < grown < len(under_way) else None
            )
            if parent is not None:
                state = automaton.advance(parent, end[-grown:])
            else:
                line = head + end
                before = line[len(head) + s - 1] if len(head) + s else None
                state = automaton.advance(automaton.start_state(before), under_way)
            if len(self._states) >= CACHE:
                self._states.pop(next(iter(self._states)))
            self._states[at] = state
        return state

    def _tag(self, end: str, s: int, closes: frozenset[str]) -> tuple | None:
        """What `mt.spans._is_markup` would read of a tag from `s`: a `/` before the name, a
        space after it (then the name does not count), and the name, where one that could
        be an element's or a closed tag's begins with it."""
        m = _TAG.match(end, s)
        if m is None:
            return None
        slash, name, space = m.groups()
        if space:
            return slash, True, None
        low = name.lower()
        known = any(e.startswith(low) for e in ELEMENTS) or any(
            n.startswith(name) for n in self.closing | closes
        )
        return slash, False, name if known else None


def _reached(line: str, pos: int) -> bool:
    """Whether the scan of `line` gets to `pos` rather than taking a span across it (the spans
    before a live start are decided: the same whatever follows)."""
    for m in _compiled(WIDEST).finditer(line):
        if m.start() >= pos:
            return True
        if m.end() > pos:
            return False
    return True

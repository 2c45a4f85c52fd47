"""The span ban's exact check: which spans of `line + piece` reach into the piece, for the
thousand candidate pieces a walk of the vocabulary leaves (`mt.spans.index.PieceIndex`).

The walk keeps every piece on a branch where a span is completed, and `find_spans` itself then
says which do. After a span under way that any word extends (`$ACC`, `%1$`, `%(body`), that is
most of the vocabulary's word pieces, and they read alike: to the patterns alive in the line,
`name` and `value` are the same five characters of one class. So a piece of words and spaces
is checked once per class of its text (`mt.spans.open.class_map` of those patterns), and the
others of the class take its spans' places, each reading its own text at them. Why that is
exact, for two such pieces `p` and `q` that read alike:

- Every span holds a mark (`%<{$&@:.`), so no span lies inside `p` or `q`: a span that reaches
  into either starts in `line`.
- Where in `line` no pattern is alive (`mt.spans.open.alive_patterns`), every match is decided
  before the piece and is the same after both. Where one is, the patterns alive there are among
  those whose classes were read, which match `line + p` where they match `line + q` and
  prefer the same ways through; the dead ones cannot reach the piece. So the scan takes the
  same spans in both places.
- What the scan reads as text rather than by pattern does not reach such a piece: a tag, markup
  or not by its name (`mt.spans._is_markup`), ends on `>`, so none ends inside one. A line that
  may hold an ICU argument (its braces counted apart from the scan) is checked piece by piece.
"""

from __future__ import annotations

from mt.spans import WIDEST, find_spans_each

# For each piece: the spans of `line + piece` that reach into it, and where in `line` the first
# starts if it starts there (-1 where none does).
Completed = tuple[tuple[str, ...], int]
Place = tuple[int, int]  # (start, end) of a span in `line + piece`


def completed_each(line: str, pieces: list[str]) -> list[Completed]:
    """For each piece, the spans of `line + piece` that reach into the piece, and where in
    `line` the first starts if it starts there (-1 where none does; at most one can, as
    spans do not overlap): one pass of the patterns over all the lines at once
    (`mt.spans.find_spans_each`)."""
    return [_texts(line, p, places) for p, places in zip(pieces, _reaching(line, pieces))]


def completed_by_class(
    line: str, pieces: list[str], plain: list[bool], classes: dict[int, str]
) -> list[Completed]:
    """`completed_each(line, pieces)`, with the pieces whose `plain` is True (words and spaces
    only) checked once per class of their text under `classes`: the class map of every pattern
    alive in `line` (module docstring)."""
    if "{" in line:
        return completed_each(line, pieces)
    first: dict[str, int] = {}  # class text -> the piece checked for it
    checked = list(range(len(pieces)))  # the piece whose places each piece takes
    for k, (piece, words) in enumerate(zip(pieces, plain)):
        if words:
            checked[k] = first.setdefault(piece.translate(classes), k)
    own = [k for k in range(len(pieces)) if checked[k] == k]
    places = dict(zip(own, _reaching(line, [pieces[k] for k in own])))
    return [_texts(line, p, places[checked[k]]) for k, p in enumerate(pieces)]


def _reaching(line: str, pieces: list[str]) -> list[list[Place]]:
    """For each piece, the places of the spans of `line + piece` that reach into it."""
    n = len(line)
    return [
        [(s.start, s.end) for s in spans if s.end > n]
        for spans in find_spans_each([line + p for p in pieces], WIDEST)
    ]


def _texts(line: str, piece: str, places: list[Place]) -> Completed:
    """The spans at `places` of `line + piece`, and where the first starts if in `line`."""
    if not places:
        return _NONE
    text = line + piece
    a, b = places[0]
    first = text[a:b]
    spans = (first,) if len(places) == 1 else (first, *(text[a:b] for a, b in places[1:]))
    return spans, a if a < len(line) else -1


_NONE: Completed = ((), -1)

"""What the span ban must ban, found the slow way: every piece of a vocabulary appended to a
row and checked with `find_spans`. `mt.spans.index.PieceIndex` answers the same question from
an index built once; scripts/tools/ban_hunt.py (random rows, thousands of them) and
tests/unit/test_span_index.py (rows hypothesis draws) compare the two at every step.
"""

from __future__ import annotations

from mt.spans import WIDEST, find_spans
from mt.spans.index import PieceIndex, may
from mt.spans.open import open_starts
from mt.spans.rows import read


def scan(texts: list[str], row: str, ok: tuple[str, ...]) -> set[int]:
    """The pieces that complete a span not `ok` after `row`, each checked with `find_spans`."""
    out = set()
    for v, piece in enumerate(texts):
        new = [s.text for s in find_spans(row + piece, WIDEST) if s.end > len(row) and piece]
        if any(not may(x, ok) for x in new):
            out.add(v)
    return out


def wrong(index: PieceIndex, row: str, ok: tuple[str, ...], banned: set[int]) -> str | None:
    """What the index gets wrong after `row` (`banned`: the scan's pieces), or None."""
    state = read(row, open_starts(row))
    own = set() if state is None else set(index.bans(state, ok).tolist())
    extra = own - banned
    missing = banned - own - set(index.alone_spans)
    if not extra and not missing:
        return None
    names = [index.texts[v] for v in sorted(extra)], [index.texts[v] for v in sorted(missing)]
    return f"{row!r} allowed {ok}: banned wrongly {names[0]}, not banned {names[1]}"

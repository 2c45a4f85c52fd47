"""The span ban confirmed as the search needs it: of an open text met for the first time, only
the candidate pieces a row would rank among its best are checked with `find_spans`.

Finding which pieces complete a span after a new open text (`PieceIndex.completing`) costs a
walk of the piece tries, which gives candidates, and a `find_spans` check of each candidate:
~70 checks for a printf under way, most of the ban's cost in a fresh `mt translate`. A search
that keeps each row's best k tokens (greedy, beam) needs the answer only for the candidates
among them. So a row whose open text is new is masked with the candidates confirmed so far
(`Lookup`), and after ranking, the unchecked candidates in its best k are checked
(`Unconfirmed.settle`): one that is banned is masked and the row ranked again, until its
best k hold none unchecked. The best k of the logits with a subset of the bans masked, when
they hold no banned piece, are the best k with every ban masked: the same tokens and scores
(the normaliser is taken before any mask). Sampling and constrained search draw from, or
keep, more than a row's best k, and take the whole ban (`PieceIndex.bans`).

Only where checking some candidates answers as checking all of them does (`find_spans` over
the candidates' lines at once reads the closing tags and ICU arguments of all of them:
`_apart`): other open texts take the whole ban.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mt.spans import CLOSING_TAG
from mt.spans.index import CACHE, PieceIndex, _completed_each, starts_of
from mt.spans.rows import Open


class Lookup:
    """One open text's candidate pieces and the answers checked so far (spans each completes,
    empty when none); `open` holds those not yet checked."""

    __slots__ = ("line", "candidates", "spans", "open", "ids", "known")

    def __init__(self, line: str, candidates: list[int]) -> None:
        self.line, self.candidates = line, candidates
        self.spans: dict[int, tuple[str, ...]] = {}
        self.open = set(candidates)
        self.ids = torch.tensor(candidates, dtype=torch.long)
        # By allowed spans: (answers checked then, the banned pieces as a tensor), so a row
        # ending met again at a later step costs no new tensor until more are checked.
        self.known: dict[tuple[str, ...], tuple[int, torch.Tensor]] = {}

    def banned(self, ok: tuple[str, ...]) -> torch.Tensor:
        """The pieces checked so far that complete a span not `ok`."""
        n, ids = self.known.get(ok, (-1, None))
        if n != len(self.spans) or ids is None:
            ids = torch.tensor(_banned(self, self.spans, ok), dtype=torch.long)
            self.known[ok] = (len(self.spans), ids)
        return ids


def lazy_bans(
    index: PieceIndex, state: Open, ok: tuple[str, ...]
) -> tuple[torch.Tensor, Lookup | None]:
    """The pieces known to be banned after the open text `state` (`PieceIndex.bans` where its
    answer is kept whole or cannot be checked in part), and its `Lookup` where candidates
    are still unchecked (None when none are). Call under `index.lock`."""
    head, end, starts = state
    line = head + end
    if line in index._found:
        return index.bans(state, ok), None
    look = index.lookups.get(line)
    if look is None:
        candidates = index.candidates(head, end, list(starts))
        if not _apart(line, [index.texts[v] for v in candidates]):
            return index.bans(state, ok), None  # the checks of one candidate read the others
        if len(index.lookups) >= CACHE:
            index.lookups.pop(next(iter(index.lookups)))
        look = index.lookups[line] = Lookup(line, candidates)
    if not look.open:
        return index.bans(state, ok), None
    return look.banned(ok), look


def confirm(index: PieceIndex, look: Lookup, ids: list[int], ok: tuple[str, ...]) -> list[int]:
    """Of the candidates `ids` of `look`, those banned under `ok`, checking the ones not yet
    checked; once every candidate is, the answer is kept whole (`PieceIndex.completing`'s).
    Call under `index.lock`."""
    new = [v for v in ids if v in look.open]
    if new:
        found = _completed_each(look.line, [index.texts[v] for v in new])
        for v, x in zip(new, found):
            look.spans[v] = tuple(x)
        look.open.difference_update(new)
        if not look.open:
            whole = [(v, look.spans[v]) for v in look.candidates if look.spans[v]]
            index.lookups.pop(look.line, None)
            index._keep_found(look.line, whole)
    return _banned(look, {v: look.spans[v] for v in ids}, ok)


def _apart(line: str, pieces: list[str]) -> bool:
    """Whether `find_spans` answers for each of `line + piece` alone as it does over all of
    them at once (`mt.spans.index._completed_each`). The one pass reads two things across
    lines: the closing tags of them all (a lone `<b>` is markup where `</b>` is written
    anywhere in the text), so no piece may close a tag `line` does not, and the ICU
    arguments (an unbalanced one ends the search for others), so none may hold `{`."""
    if "{" in line or any("{" in p for p in pieces):
        return False
    closed = set(CLOSING_TAG.findall(line))
    return all(">" not in p or closed.issuperset(CLOSING_TAG.findall(line + p)) for p in pieces)


def _banned(look: Lookup, spans: dict[int, tuple[str, ...]], ok: tuple[str, ...]) -> list[int]:
    """The pieces of `spans` (checked answers of `look`) that complete a span not `ok`."""
    free = starts_of(ok) if ok else frozenset()
    return [v for v, x in spans.items() if x and not free.issuperset(x)]


@dataclass
class Unconfirmed:
    """The rows of a step masked with part of their bans (`SpanRule.rows_mask` given
    `pending`): row -> (its open text's `Lookup`, its allowed spans, the pieces masked)."""

    index: PieceIndex
    rows: dict[int, tuple[Lookup, tuple[str, ...], set[int]]] = field(default_factory=dict)

    def settle(
        self,
        logits: torch.Tensor,
        top: torch.Tensor,
        tok: torch.Tensor,
        start: int,
        rank: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    ) -> None:
        """Make `top`, `tok` (N, k) of the masked `logits` (N, V), rows `start` to `start + N`
        of the step, what they are with every ban masked: each row's unchecked candidates
        that score at least its k-th best are checked, the banned ones masked in `logits`,
        and the row ranked again by `rank` (`row_topk` with k), until none is left."""
        inside = [(r - start, x) for r, x in self.rows.items() if 0 <= r - start < len(logits)]
        if not inside:
            return
        # One pass over every pending row's candidates: the rows with an unchecked candidate
        # scoring at least their k-th best (most rows have none: their text is written on).
        rows = torch.cat([torch.full((len(x[0].candidates),), i) for i, x in inside])
        cols = torch.cat([x[0].ids for _, x in inside])
        near = (logits[rows, cols] >= top[rows, -1]).nonzero().squeeze(1)
        if not len(near):
            return
        hit = set(rows[near].tolist())
        for i, (look, ok, checked) in inside:
            if i not in hit:
                continue
            while True:
                ids = look.ids[logits[i, look.ids] >= top[i, -1]].tolist()
                ids = [v for v in ids if v not in checked]
                if not ids:
                    break
                checked.update(ids)
                with self.index.lock:
                    banned = confirm(self.index, look, ids, ok)
                if not banned:
                    break
                logits[i, banned] = float("-inf")
                t, j = rank(logits[i : i + 1])
                top[i], tok[i] = t[0], j[0]

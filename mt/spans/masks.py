"""A step's banned tokens as a search applies them: one (V,) mask shared by most rows, and the
whole mask of each of the few rows that differ (`mt.spans.bans`).

The span ban differs from row to row only where a row holds an open span (or its sentence
may write a span a shared mask bans): a few rows a step. A dense (R, V) mask would cost a pass
over every row and vocabulary entry to build and another to apply, at every step, which on a
small model is most of what protection costs; this costs a fill of the shared mask's few
columns and a pass over the rows that differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class RowMask:
    """True where a token is banned: `common` (V,) for every row but `rows` (K,), ascending,
    whose masks are `own` (K, V); and, as (row, token) pairs ascending by row, `freed` (2, F)
    tokens of `common` a row may write after all (its sentence may write their spans) and
    `added` (2, A) tokens it may not (those that would complete its span under way). The span ban
    gives pairs (a few tokens a row), a per-sentence mask gives rows."""

    common: torch.Tensor
    rows: torch.Tensor
    own: torch.Tensor
    freed: torch.Tensor | None = None
    added: torch.Tensor | None = None
    reach: int = 0  # the rows the pairs name are below this
    cols: torch.Tensor = field(init=False)  # the banned columns of `common`
    # Where each row's pairs begin in `freed` and `added` (`_within`), read once for all chunks.
    _starts: dict[str, list[int]] = field(
        init=False, default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "cols", self.common.nonzero().squeeze(1))

    @staticmethod
    def of(mask: torch.Tensor) -> RowMask:
        """A (V,) or (R, V) bool mask as a `RowMask` (every row its own for (R, V))."""
        if mask.dim() == 1:
            return RowMask(mask, torch.zeros(0, dtype=torch.long, device=mask.device), mask[:0])
        rows = torch.arange(len(mask), device=mask.device)
        return RowMask(torch.zeros_like(mask[0]), rows, mask)

    def dense(self, n: int) -> torch.Tensor:
        """(V,) when every row shares `common`, else (n, V)."""
        if not len(self.rows) and self.freed is None and self.added is None:
            return self.common
        out = self.common.expand(n, -1).clone()
        if self.freed is not None:
            out[self.freed[0], self.freed[1]] = False
        if self.added is not None:
            out[self.added[0], self.added[1]] = True
        if len(self.rows):
            out[self.rows] = self.own
        return out

    def apply(self, logits: torch.Tensor, start: int = 0) -> None:
        """Set the banned entries of `logits` (N, V), the rows `start` to `start + N` of the
        step, to -inf, in place."""
        n = len(logits)
        inf = float("-inf")
        whole = start == 0 and self.reach <= n  # the pairs' rows as they are
        freed, added = (
            self._within("freed", start, n, whole),
            self._within("added", start, n, whole),
        )
        if not len(self.rows):
            saved = logits[freed[0], freed[1]] if freed is not None else None
            if len(self.cols):
                logits.index_fill_(1, self.cols, inf)
            if freed is not None:
                logits[freed[0], freed[1]] = saved
            if added is not None:
                logits[added[0], added[1]] = inf
            return
        inside = (self.rows >= start) & (self.rows < start + n)
        rows, own = self.rows[inside] - start, self.own[inside]
        if len(rows) == n and freed is None and added is None:  # every row its own
            logits.masked_fill_(own, inf)
            return
        kept = logits[rows] if len(rows) else None
        saved = logits[freed[0], freed[1]] if freed is not None else None
        if len(self.cols):
            logits.index_fill_(1, self.cols, inf)
        if freed is not None:
            logits[freed[0], freed[1]] = saved
        if added is not None:
            logits[added[0], added[1]] = inf
        if kept is not None:
            logits[rows] = kept.masked_fill_(own, inf)

    def _within(self, which: str, start: int, n: int, whole: bool) -> torch.Tensor | None:
        """The (row, token) pairs `which` (`freed` or `added`, ascending by row) of rows
        `start` to `start + n`, their rows counted from `start` (`whole`: all of them, as they
        are); None where there are none. Where each row's pairs begin is read once, when a
        step's first chunk asks."""
        pairs = getattr(self, which)
        if pairs is None or not pairs.shape[1]:
            return None
        if whole:
            return pairs
        at = self._starts.get(which)
        if at is None:
            edges = torch.arange(self.reach + 1, device=pairs.device)
            at = self._starts[which] = torch.searchsorted(pairs[0].contiguous(), edges).tolist()
        lo, hi = at[min(start, self.reach)], at[min(start + n, self.reach)]
        if lo == hi:
            return None
        rows = pairs[0, lo:hi]
        return torch.stack([rows - start if start else rows, pairs[1, lo:hi]])

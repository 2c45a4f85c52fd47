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
    whose masks are `own` (K, V)."""

    common: torch.Tensor
    rows: torch.Tensor
    own: torch.Tensor
    cols: torch.Tensor = field(init=False)  # the banned columns of `common`

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
        if not len(self.rows):
            return self.common
        out = self.common.expand(n, -1).clone()
        out[self.rows] = self.own
        return out

    def apply(self, logits: torch.Tensor, start: int = 0) -> None:
        """Set the banned entries of `logits` (N, V), the rows `start` to `start + N` of the
        step, to -inf, in place."""
        n = len(logits)
        if not len(self.rows):
            if len(self.cols):
                logits.index_fill_(1, self.cols, float("-inf"))
            return
        inside = (self.rows >= start) & (self.rows < start + n)
        rows, own = self.rows[inside] - start, self.own[inside]
        if len(rows) == n:  # every row its own
            logits.masked_fill_(own, float("-inf"))
            return
        saved = logits[rows] if len(rows) else None
        if len(self.cols):
            logits.index_fill_(1, self.cols, float("-inf"))
        if saved is not None:
            logits[rows] = saved.masked_fill_(own, float("-inf"))

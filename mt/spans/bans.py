"""Tokens the search may not emit next: one mask over the target vocabulary, per step.

Every search (greedy, sampling, beam, constrained; one model or an ensemble) calls
`step_bans` once per step and drops the tokens it marks before ranking, so a restriction
holds whatever the model has learned: a `mt.spans.masks.RowMask`, one (V,) mask for most rows
and whole rows for those that differ (`step_mask` gives it as a bool tensor, True where a
token is banned: (V,) when it is the same for every row, (R, V) when rows differ).
Restrictions combine with `|`:

- `Bans.vocab`, a fixed (V,) or per-sentence (B, V) mask given by the caller;
- `Bans.spans`, protected spans (`mt.spans`): with protection on, the text search writes
  holds no span of its own (each span of the source is lifted out, or stands there as a
  placeholder that is not a span, and is put back after search), so any span the model would
  write is one the source does not hold. `SpanRule` bans every token that would complete one.

A span is banned when it would be completed, not when it could start: `50 %` and `a < b`
stay writable, `%s` and `<b>` do not. The rule reads the state of each row from the span
patterns themselves (`mt.spans.open.open_starts`): where in the row's text a span is under way,
and, for that open text, which pieces would complete a span
(`mt.spans.index.PieceIndex.completing`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mt.search.rules import Restriction, Step
from mt.spans.carry import RowStates
from mt.spans.index import PieceIndex, index_for, may
from mt.spans.masks import RowMask
from mt.spans.open import open_starts
from mt.spans.rows import read
from mt.tokenizer import Tokenizer


class SpanRule:
    """Which next tokens would write a span (`mt.spans.PATTERNS`), for one target vocabulary.

    Two cases, by where the span would start:

    - inside the next piece (`%s`, `<b>`, `&amp;`, `{0}` as single pieces, or `@x.de`
      completing an address after any word): `alone`, one fixed mask for every row, computed
      once per vocabulary over each kind of character the row may end with;
    - in the row's text, where a span is under way (`%`, `<a href=`, `$HO`, `{n, plural, `):
      the row's open text is read off the patterns (`mt.spans.open.open_starts`), once, and
      carried from each row to the row that extends it by a piece, as an integer
      (`mt.spans.rows`, `mt.spans.carry`); the
      pieces that would complete a span after it are found by walking the trie of piece
      texts with the patterns' partial matches (`mt.spans.index.PieceIndex.completing`). So a
      row ending is a dictionary lookup once its open text was seen by any translator of
      the vocabulary (the index is kept with it: `mt.spans.index.index_for`), and the rows
      that hold no open text cost a few array operations for the step together.

    Only the rows with a ban of their own get pairs of their own in the mask
    (`mt.spans.masks`). A sentence
    may be `allowed` spans (its source's own, when the model writes them itself): a span
    that is one of them, or the start of one (`$HO` on the way to `$HOME`), may be
    completed; how many times is the caller's to enforce.
    """

    def __init__(
        self, tokenizer: Tokenizer, device: torch.device, index: PieceIndex | None = None
    ) -> None:
        self.index = index if index is not None else index_for(tokenizer)
        self.texts = self.index.texts
        self.device = device
        self.alone = torch.zeros(len(self.texts), dtype=torch.bool, device=device)
        self.alone[list(self.index.alone_spans)] = True
        self._shared = RowMask.of(self.alone)  # the mask of a step where no row differs
        self.open_texts = self.index.open_texts  # the rows' open texts, by id
        self.row_states = RowStates(self.open_texts)  # this rule's rows, carried step to step
        self._last_alone: tuple[tuple, torch.Tensor | None] = ((), None)
        self._frees: dict[tuple[str, ...], list[int]] = {}  # `_free`'s
        self._none = torch.zeros(0, dtype=torch.long, device=device)  # no row of its own
        self._none_own = self.alone[None][:0]

    def mask(
        self, history: torch.Tensor, sent: torch.Tensor, allowed: list[tuple[str, ...]] | None
    ) -> torch.Tensor:
        """(V,) or (R, V) bool: the tokens each row of `history` (R, t) may not write next;
        `sent` (R,) is each row's sentence, `allowed[sentence]` its allowed spans."""
        return self.rows_mask(history, sent, allowed).dense(len(history))

    def rows_mask(
        self,
        history: torch.Tensor,
        sent: torch.Tensor,
        allowed: list[tuple[str, ...]] | None,
        parents: torch.Tensor | None = None,
    ) -> RowMask:
        """`mask` as the search applies it (`mt.spans.masks`): `alone` for every row, less,
        as (row, token) pairs, the pieces a row's sentence is allowed the spans of, and plus
        those that would complete the span a row holds under way. `parents` (R,): the row of
        the previous call each row extends, where the search knows it (`RowStates.ids`)."""
        t = history.shape[1]
        free = self._alone(allowed) if allowed and any(allowed) else None
        if history.device.type != "cpu":
            # The rows are read as text on the host: one copy of sentences and tokens together,
            # where reading them off a GPU piece by piece waited for the device four times a step.
            column = [] if parents is None else [parents[:, None].to(history.dtype)]
            host = torch.cat([sent[:, None].to(history.dtype), history, *column], 1).cpu()
            sent, history = host[:, 0], host[:, 1 : t + 1]
            parents = host[:, -1] if parents is not None else None
        sents = sent.tolist()
        extra: dict[int, torch.Tensor] = {}  # by row: the pieces that would complete its span
        if t:
            tokens = history.numpy().astype(np.int64, copy=False)
            lasts = tokens[:, -1]
            texts, bans = self.texts, self.index.bans
            with self.index.lock:
                given = parents.numpy() if parents is not None else None
                ids = self.row_states.ids(tokens, given)  # most rows: no span under way (id 0)
                states = self.open_texts.states
                under_way = np.flatnonzero(ids)
                for r, i, last in zip(
                    under_way.tolist(), ids[under_way].tolist(), lasts[under_way].tolist()
                ):
                    ok = allowed[sents[r]] if allowed else ()
                    if (found := bans(states[i], ok, len(texts[last]))).shape[0]:  # type: ignore[arg-type]
                        extra[r] = found
        pairs, reach = None, 1 + max(extra) if extra else 0
        if free is not None:
            mine = free[sent.cpu()]  # (R, F): each row's sentence's
            rows, cols = (mine >= 0).nonzero(as_tuple=True)
            if len(rows):
                pairs = torch.stack([rows, mine[rows, cols]]).to(self.device)
                reach = max(reach, int(rows[-1]) + 1)
        if not extra and pairs is None:
            return self._shared
        added = None
        if extra:
            found = list(extra.values())
            sizes = torch.tensor([x.shape[0] for x in found])
            at = torch.repeat_interleave(torch.tensor(list(extra)), sizes)
            added = torch.stack([at, torch.cat(found)]).to(self.device)
        return RowMask(self.alone, self._none, self._none_own, pairs, added, reach)

    def _alone(self, allowed: list[tuple[str, ...]]) -> torch.Tensor | None:
        """(B, F) long: the pieces of `alone` each sentence may write (those whose spans it is
        allowed), -1 after them; None where no sentence may write any. Kept for the steps of
        one batch, and each sentence's by its allowed spans (many share them)."""
        key = tuple(allowed)
        if self._last_alone[0] != key:
            frees = [self._free(ok) for ok in allowed]
            table = None
            if any(frees):
                table = torch.full((len(frees), max(map(len, frees))), -1, dtype=torch.long)
                for b, free in enumerate(frees):
                    table[b, : len(free)] = torch.tensor(free, dtype=torch.long)
            self._last_alone = (key, table)
        return self._last_alone[1]

    def _free(self, ok: tuple[str, ...]) -> list[int]:
        """The pieces of `alone` a sentence allowed the spans `ok` may write."""
        if ok not in self._frees:
            if len(self._frees) >= 256:
                self._frees.clear()
            self._frees[ok] = [
                v for v, found in self.index.alone_spans.items() if all(may(x, ok) for x in found)
            ]
        return self._frees[ok]

    def row_bans(self, text: str, ok: tuple[str, ...] = ()) -> torch.Tensor | None:
        """Token ids that would complete a span not `ok` that is under way in `text`; None
        when no span is (then `alone` covers the row)."""
        state = read(text, open_starts(text))
        if state is None:
            return None
        with self.index.lock:
            return self.index.bans(state, ok).to(self.device, copy=True)  # the index keeps its own


@dataclass
class Bans:
    """What a search may not write: a fixed mask and/or the span rule (either may be None).
    A step rule (`mt.search.rules.StepRule`): every search applies it as it does its own."""

    vocab: torch.Tensor | None = None  # (V,) or (B, V) bool, True = banned; B: sentences
    spans: SpanRule | None = None
    allowed: list[tuple[str, ...]] | None = None  # per sentence: spans it may write (its own)
    reads_history = True  # the span rule reads each row's text so far

    def restrict(self, step: Step) -> Restriction | None:
        mask = step_bans(self, step.history, step.sent, step.parents)
        return None if mask is None else Restriction(ban=mask)


def step_mask(bans: Bans | None, history: torch.Tensor, sent: torch.Tensor) -> torch.Tensor | None:
    """(V,) or (R, V) bool, True where the next token of a row is banned; None when nothing
    is. `history` (R, t) holds each row's tokens so far, `sent` (R,) the sentence of each row
    (for a per-sentence `vocab`)."""
    out = step_bans(bans, history, sent)
    return None if out is None else out.dense(len(history))


def step_bans(
    bans: Bans | None,
    history: torch.Tensor,
    sent: torch.Tensor,
    parents: torch.Tensor | None = None,
) -> RowMask | None:
    """`step_mask` as the search applies it (`mt.spans.masks`); `parents`: the row of the
    previous step each row extends, where the search knows it (`SpanRule.rows_mask`)."""
    if bans is None:
        return None
    spans = bans.spans
    rule = spans.rows_mask(history, sent, bans.allowed, parents) if spans is not None else None
    vocab = bans.vocab
    if vocab is None:
        return rule
    if vocab.dim() == 1 and rule is not None:
        freed = rule.freed
        if freed is not None:  # a token the vocabulary bans stays banned
            freed = freed[:, ~vocab[freed[1]]]
        return RowMask(
            rule.common | vocab, rule.rows, rule.own | vocab, freed, rule.added, rule.reach
        )
    fixed = vocab if vocab.dim() == 1 else vocab[sent]
    return RowMask.of(fixed if rule is None else fixed | rule.dense(len(history)))


def apply_mask(logits: torch.Tensor, mask: RowMask | torch.Tensor | None, start: int = 0) -> None:
    """Set the banned entries of `logits` (N, V), rows `start` to `start + N` of the step, to
    -inf, in place. A (V,) mask costs a fill of its few banned columns rather than a pass over
    every entry."""
    if mask is None:
        return
    if isinstance(mask, torch.Tensor):
        mask = RowMask.of(mask if mask.dim() == 1 else mask[start : start + len(logits)])
        start = 0
    mask.apply(logits, start)

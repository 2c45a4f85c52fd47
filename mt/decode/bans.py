"""Tokens the search may not emit next: one mask over the target vocabulary, per step.

Every search (greedy, sampling, beam, constrained; one model or an ensemble) calls
`step_mask` once per step and drops the tokens it marks before ranking, so a restriction
holds whatever the model has learned. A mask is a bool tensor, True where a token is banned:
(V,) when it is the same for every row, (R, V) when rows differ. Restrictions combine with `|`:

- `Bans.vocab`, a fixed (V,) or per-sentence (B, V) mask given by the caller;
- `Bans.spans`, protected spans (`mt.spans`): with protection on, the text search writes
  holds no span of its own (each span of the source is lifted out, or stands there as a
  placeholder that is not a span, and is put back after search), so any span the model would
  write is one the source does not hold. `SpanRule` bans every token that would complete one.

A span is banned when it would be completed, not when it could start: `50 %` and `a < b`
stay writable, `%s` and `<b>` do not. Rows whose recent tokens hold nothing a span starts
with (most rows) get one fixed mask; the others are checked against their text, by the same
patterns that find spans in the source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from mt.spans import WIDEST, find_spans
from mt.tokenizer import Tokenizer

WINDOW = 12  # tokens of a row's end in which a span may be under way (a word rarely has more)
CONTEXTS = ("", " ", "a", "5", "a.")  # what a row's last word may end with, for a span to start
# A piece that can start or continue a span: a character spans are made of, or the start of a
# `www.` / `http://` / `ftp://` address.
_SUSPECT = re.compile(r"[%<>&{}$@]|(?:^|\W)(?:w{1,3}\.?|h|ht|htt|https?|f|ft|ftp):?/{0,2}$")
_OPEN = re.compile(r"[<{][^<>{}]*$")  # a tag or brace still open (spans may hold spaces there)
CACHE = 4096  # row ends whose bans are kept


class SpanRule:
    """Which next tokens would write a span (`mt.spans.PATTERNS`), for one target vocabulary.

    `alone` bans the pieces that complete a span after any ordinary word (`%s`, `<b>`,
    `&amp;`, `{0}`, `$HOME` as single pieces, or `@x.de` after a name); it applies to every row.
    A row with a suspect piece among its last `WINDOW` tokens, or an open `<` or `{`, is
    checked against its own end: every piece that would complete a span there is banned.
    """

    def __init__(self, tokenizer: Tokenizer, device: torch.device) -> None:
        self.texts = piece_texts(tokenizer)
        self.device = device
        V = len(self.texts)
        suspect = [bool(_SUSPECT.search(t)) for t in self.texts]
        alone = [s and _completes(c, t) for t, s in zip(self.texts, suspect) for c in CONTEXTS]
        self.suspect = torch.tensor(suspect, dtype=torch.bool, device=device)
        self.alone = torch.tensor(alone, dtype=torch.bool).view(V, len(CONTEXTS)).any(1)
        self.alone = self.alone.to(device)
        self.opens = torch.tensor([bool(re.search(r"[<{]", t)) for t in self.texts], device=device)
        self.closes = torch.tensor([bool(re.search(r"[>}]", t)) for t in self.texts], device=device)
        self._cache: dict[str, torch.Tensor] = {}

    def mask(self, history: torch.Tensor) -> torch.Tensor:
        """(V,) or (R, V) bool: the tokens each row of `history` (R, t) may not write next."""
        R, t = history.shape
        if t == 0:
            return self.alone
        danger = self.suspect[history[:, -WINDOW:]].any(1)
        pos = torch.arange(1, t + 1, device=history.device)
        last_open = (self.opens[history] * pos).amax(1)
        danger |= last_open > (self.closes[history] * pos).amax(1)
        rows = danger.nonzero().squeeze(1).tolist()
        if not rows:
            return self.alone
        out = None
        for r, toks in zip(rows, history[rows].tolist()):
            ids = self._row_bans("".join(self.texts[v] for v in toks))
            if ids is not None:
                if out is None:
                    out = self.alone.expand(R, -1).clone()
                out[r, ids] = True
        return self.alone if out is None else out

    def _row_bans(self, text: str) -> torch.Tensor | None:
        """Token ids that would complete a span after `text`; None when its end holds nothing
        a span could grow from (then `alone` covers it)."""
        word = len(text) - len(re.split(r"\s", text)[-1])  # where the last word starts
        opened = _OPEN.search(text)
        start = min(word, opened.start()) if opened else word
        end = text[max(0, start - 1) :]  # with the character before, which patterns look at
        if not _SUSPECT.search(text[start:]) and not opened:
            return None
        end = end[-200:]
        if end not in self._cache:
            if len(self._cache) >= CACHE:
                self._cache.pop(next(iter(self._cache)))
            ids = [v for v, piece in enumerate(self.texts) if piece and _completes(end, piece)]
            self._cache[end] = torch.tensor(ids, dtype=torch.long, device=self.device)
        return self._cache[end]


def piece_texts(tokenizer: Tokenizer) -> list[str]:
    """The text each target piece adds to a line ('' for control pieces and UNK; a byte
    piece its character when ASCII, as only ASCII characters make spans)."""
    sp = tokenizer.tgt
    out = []
    for v in range(sp.get_piece_size()):
        piece = sp.id_to_piece(v)
        if sp.is_control(v) or sp.is_unknown(v):
            out.append("")
        elif sp.is_byte(v):
            byte = int(piece[3:5], 16)
            out.append(chr(byte) if byte < 0x80 else "")
        else:
            out.append(piece.replace("▁", " "))
    return out


def _completes(text: str, piece: str) -> bool:
    """Whether `text + piece` holds a span, of any syntax, that reaches into `piece`."""
    return any(s.end > len(text) for s in find_spans(text + piece, WIDEST))


@dataclass
class Bans:
    """What a search may not write: a fixed mask and/or the span rule (either may be None)."""

    vocab: torch.Tensor | None = None  # (V,) or (B, V) bool, True = banned; B: sentences
    spans: SpanRule | None = None


def step_mask(bans: Bans | None, history: torch.Tensor, sent: torch.Tensor) -> torch.Tensor | None:
    """(V,) or (R, V) bool, True where the next token of a row is banned; None when nothing
    is. `history` (R, t) holds each row's tokens so far, `sent` (R,) the sentence of each row
    (for a per-sentence `vocab`)."""
    if bans is None:
        return None
    out = bans.vocab
    if out is not None and out.dim() == 2:
        out = out[sent]
    if bans.spans is not None:
        rule = bans.spans.mask(history)
        out = rule if out is None else out | rule
    return out


def apply_mask(logits: torch.Tensor, mask: torch.Tensor | None) -> None:
    """Set the banned entries of `logits` (N, V) to -inf, in place. A (V,) mask costs a fill of
    its few banned columns rather than a pass over every entry."""
    if mask is None:
        return
    if mask.dim() == 1:
        logits.index_fill_(1, mask.nonzero().squeeze(1), float("-inf"))
    else:
        logits.masked_fill_(mask, float("-inf"))

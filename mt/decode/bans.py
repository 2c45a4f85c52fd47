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

import bisect
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
_TRIGGER = re.compile(r"[%<&{$@]|(?<!\w)(?:w{1,3}\.?|h|ht|htt|https?|f|ft|ftp):?/{0,2}(?!\w)")
# What ends a span of each syntax: if none of these makes a span of a row's end, no piece can.
PROBES = ("s", "d", "1", "E", "x", ">", ";", "}", "%", "%>", ".x", "://x", "/x", "y.z", "x;")
_OPEN = re.compile(
    r"(?:<[A-Za-z/%]|\{\s*[\w{])[^<>{}]*$"
)  # a tag or brace still open (spaces may follow)
OPEN_CHARS = 40  # a tag or brace open longer than this is taken for text
CACHE = 4096  # row ends whose bans are kept


class SpanRule:
    """Which next tokens would write a span (`mt.spans.PATTERNS`), for one target vocabulary.

    `alone` bans the pieces that complete a span after any ordinary word (`%s`, `<b>`,
    `&amp;`, `{0}`, `$HOME` as single pieces, or `@x.de` after a name); it applies to every row.
    A row with a suspect piece among its last `WINDOW` tokens, or an open `<` or `{`, is
    checked against its own end: every piece that would complete a span there is banned.

    A sentence may be `allowed` spans (its source's own, when the model writes them itself):
    a span that is one of them, or the start of one (`$HO` on the way to `$HOME`), may be
    completed; how many times is the caller's to enforce.
    """

    def __init__(self, tokenizer: Tokenizer, device: torch.device) -> None:
        self.texts = piece_texts(tokenizer)
        self.device = device
        suspect = [bool(_SUSPECT.search(t)) for t in self.texts]
        # The spans each piece completes after an ordinary word, where it completes any.
        self.alone_spans = {
            v: found for v, (t, s) in enumerate(zip(self.texts, suspect))
            if s and (found := {x for c in CONTEXTS for x in _completed(c, t)})
        }  # fmt: skip
        self.suspect = torch.tensor(suspect, dtype=torch.bool, device=device)
        self.alone = torch.zeros(len(self.texts), dtype=torch.bool, device=device)
        self.alone[list(self.alone_spans)] = True
        self.opens = torch.tensor([bool(re.search(r"[<{]", t)) for t in self.texts], device=device)
        self.closes = torch.tensor([bool(re.search(r"[>}]", t)) for t in self.texts], device=device)
        # Pieces that start with a space complete a span under way only inside `<...>`/`{...}`.
        self.glued = [v for v, t in enumerate(self.texts) if t and not t[0].isspace()]
        self._cache: dict[str, list[tuple[int, list[str]]]] = {}  # `_scan` by row end
        self._last_alone: tuple[tuple, torch.Tensor] = ((), self.alone[None])  # `_alone`'s
        self._rows: dict[tuple[str, tuple[str, ...]], torch.Tensor | None] = {}  # by row end

    def mask(
        self, history: torch.Tensor, sent: torch.Tensor, allowed: list[tuple[str, ...]] | None
    ) -> torch.Tensor:
        """(V,) or (R, V) bool: the tokens each row of `history` (R, t) may not write next;
        `sent` (R,) is each row's sentence, `allowed[sentence]` its allowed spans."""
        R, t = history.shape
        rows_allowed = [allowed[s] for s in sent.tolist()] if allowed and any(allowed) else None
        out = self._alone(allowed)[sent] if rows_allowed else self.alone
        if t == 0:
            return out
        danger = self.suspect[history[:, -WINDOW:]].any(1)
        pos = torch.arange(1, t + 1, device=history.device)
        last_open = (self.opens[history] * pos).amax(1)
        danger |= last_open > (self.closes[history] * pos).amax(1)
        rows = danger.nonzero().squeeze(1).tolist()
        for r, toks in zip(rows, history[rows].tolist()):
            ok = rows_allowed[r] if rows_allowed else ()
            ids = self._row_bans("".join(self.texts[v] for v in toks), ok)
            if ids is not None and len(ids):
                if out.dim() == 1:
                    out = out.expand(R, -1).clone()
                out[r, ids] = True
        return out

    def _alone(self, allowed: list[tuple[str, ...]]) -> torch.Tensor:
        """(B, V) `alone`, less per sentence the pieces whose spans it is allowed; kept for
        the steps of one batch."""
        key = tuple(allowed)
        if self._last_alone[0] != key:
            out = self.alone.expand(len(allowed), -1).clone()
            for b, ok in enumerate(allowed):
                out[
                    b,
                    [v for v, found in self.alone_spans.items() if all(_may(x, ok) for x in found)],
                ] = False
            self._last_alone = (key, out)
        return self._last_alone[1]

    def _row_bans(self, text: str, ok: tuple[str, ...]) -> torch.Tensor | None:
        """Token ids that would complete a span not `ok` after `text`; None when its end
        holds nothing a span could grow from (then `alone` covers it)."""
        word = len(text) - len(re.split(r"\s", text)[-1])  # where the last word starts
        done = [x.end for x in find_spans(text[word:], WIDEST)]
        word += max(done, default=0)  # what a complete span ends is no start of another
        opened = _OPEN.search(text, max(0, len(text) - OPEN_CHARS))
        start = min(word, opened.start()) if opened else word
        key = (text[max(0, start - 1) :], ok)
        if key not in self._rows:
            if len(self._rows) >= CACHE:
                self._rows.pop(next(iter(self._rows)))
            self._rows[key] = self._end_bans(text, start, opened is not None, ok)
        return self._rows[key]

    def _end_bans(self, text: str, start: int, opened: bool, ok: tuple[str, ...]):
        """`_row_bans` for `text` whose span under way, if any, starts at `start`."""
        end = text[max(0, start - 1) :][-200:]  # with the character before, for lookbehinds
        if not opened:  # from the first trigger a span can still grow from
            for m in _TRIGGER.finditer(text, start):
                t = m.start()
                before = text[max(0, start - 1) : t] if text[t] == "@" else _kind(text[t - 1 : t])
                if _viable(before + text[t:]):
                    end = before + text[t:]
                    break
            else:
                return None  # `%INE`: nothing appended makes a span of it any more
        if end not in self._cache:  # what each piece completes there, whatever is allowed
            if len(self._cache) >= CACHE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[end] = self._scan(end, range(len(self.texts)) if opened else self.glued)
        ids = [v for v, found in self._cache[end] if any(not _may(x, ok) for x in found)]
        return torch.tensor(ids, dtype=torch.long, device=self.device)

    def _scan(self, end: str, pieces) -> list[tuple[int, list[str]]]:
        """(piece, the spans it completes after `end`) for the `pieces` that complete any.
        One pass of the patterns over all `end + piece` lines at once: no pattern crosses a
        line break followed by `<` (`SEPARATOR`), so each line's spans are its own."""
        pieces = [v for v in pieces if self.texts[v]]
        lines = [end + self.texts[v] for v in pieces]
        starts, pos = [], 0
        for line in lines:
            starts.append(pos)
            pos += len(line) + len(SEPARATOR)
        found: dict[int, list[str]] = {}
        for s in find_spans(SEPARATOR.join(lines), WIDEST):
            k = bisect.bisect_right(starts, s.start) - 1
            if s.end > starts[k] + len(end):
                found.setdefault(pieces[k], []).append(s.text)
        return list(found.items())


SEPARATOR = "\n<\n"  # ends every span: a line break, and a `<` no tag can hold


def _kind(c: str) -> str:
    """A character as the patterns' lookbehinds see it (so `(%` and `:%` share a scan)."""
    if not c or c.isspace():
        return c and " "
    return "5" if c.isdigit() else "%" if c == "%" else "a" if c.isalnum() or c == "_" else "."


def _viable(pending: str) -> bool:
    """Whether some ending makes a span that starts in `pending` (its first character may be
    the one before the span)."""
    return any(
        x.start < len(pending) < x.end for p in PROBES for x in find_spans(pending + p, WIDEST)
    )


def _may(span: str, ok: tuple[str, ...]) -> bool:
    """Whether `span` is one of the allowed spans `ok`, or the start of one."""
    return any(a.startswith(span) for a in ok)


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


def _completed(text: str, piece: str) -> list[str]:
    """The spans, of any syntax, of `text + piece` that reach into `piece`."""
    if not piece:
        return []
    return [s.text for s in find_spans(text + piece, WIDEST) if s.end > len(text)]


@dataclass
class Bans:
    """What a search may not write: a fixed mask and/or the span rule (either may be None)."""

    vocab: torch.Tensor | None = None  # (V,) or (B, V) bool, True = banned; B: sentences
    spans: SpanRule | None = None
    allowed: list[tuple[str, ...]] | None = None  # per sentence: spans it may write (its own)


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
        rule = bans.spans.mask(history, sent, bans.allowed)
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

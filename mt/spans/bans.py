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
stay writable, `%s` and `<b>` do not. The rule reads the state of each row from the span
patterns themselves (`mt.spans.open.open_starts`): where in the row's text a span is under way,
and, for that open text, which pieces would complete a span (`SpanRule.completing`).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

import torch

from mt.spans import CLOSING_TAG, WIDEST, find_spans
from mt.spans.open import (
    WINDOW_CHARS,
    alive_patterns,
    class_map,
    ends_in_mark,
    growth,
    open_starts,
)
from mt.tokenizer import Tokenizer

# What a row's text may end with before a piece, for a span to start inside the piece: the
# patterns look back one character (`\b`, `(?<![\d%])`), and these are its kinds (none, a
# space, a letter, a digit, a mark).
CONTEXTS = ("", " ", "a", "5", ".")
# The same for a span under way that starts inside a piece, or (an address) at the row's
# last character: a start of line reads as a space, and a mark as a space does.
OPEN_CONTEXTS = (" ", "a", "5")
_PLAIN = re.compile(r"[\w\s]*")
CACHE = 4096  # open texts whose completing pieces are kept
SEPARATOR = "\n<\n"  # ends every span: a line break, and a `<` no tag can hold


# A trie of piece texts: each node maps a character to the next node, and `END` to the pieces
# whose text ends there.
Trie = dict
END = ""  # no character: the key of a node's pieces


def _all(node: Trie) -> list[int]:
    """Every piece at or below `node`."""
    out = list(node.get(END, ()))
    for c, child in node.items():
        if c != END:
            out += _all(child)
    return out


class SpanRule:
    """Which next tokens would write a span (`mt.spans.PATTERNS`), for one target vocabulary.

    Two cases, by where the span would start:

    - inside the next piece (`%s`, `<b>`, `&amp;`, `{0}` as single pieces, or `@x.de`
      completing an address after any word): `alone`, one fixed mask for every row, computed
      once per vocabulary over each kind of character the row may end with;
    - in the row's text, where a span is under way (`%`, `<a href=`, `$HO`, `{n, plural, `):
      the row's open text is read off the patterns (`mt.spans.open.open_starts`), and the pieces
      that would complete a span after it are found by walking the trie of piece texts with
      the patterns' partial matches, pruning every branch no pattern can still match
      (`completing`). So a row ending is a dictionary lookup once its open text was seen.

    Only rows holding a piece that can open a span (`opener`) are read as text. A sentence
    may be `allowed` spans (its source's own, when the model writes them itself): a span
    that is one of them, or the start of one (`$HO` on the way to `$HOME`), may be
    completed; how many times is the caller's to enforce.
    """

    def __init__(self, tokenizer: Tokenizer, device: torch.device) -> None:
        self.texts = piece_texts(tokenizer)
        self.device = device
        # The spans each piece completes by itself after each kind of row end, where any.
        # Every span holds a mark (`%<{$&@:.`...): a piece of words and spaces completes none.
        marked = {v for v, t in enumerate(self.texts) if t and not _PLAIN.fullmatch(t)}
        self.marked = sorted(marked)
        self._tries: dict[frozenset[int], tuple[dict[int, str], Trie]] = {}  # `_trie`'s
        self.alone_spans = {
            v: found for v in marked
            if (found := {x for c in CONTEXTS for x in _completed(c, self.texts[v])})
        }  # fmt: skip
        self.alone = torch.zeros(len(self.texts), dtype=torch.bool, device=device)
        self.alone[list(self.alone_spans)] = True
        # A piece that can hold the start of a span under way (`%`, ` w`, `@`, `<a`): a row
        # without one has no open text. Open text is prefix-closed (what could still grow into
        # a span could before its last character too), so the piece holding a span's first
        # character, or its `@`, is one of these.
        # A piece of words and spaces opens only a URL, and only at the start of its last word
        # (no boundary inside a word, no white space inside a URL): read after a space.
        self.opener = torch.tensor(
            [
                any(open_starts(c + t) for c in OPEN_CONTEXTS)
                if v in marked
                else bool(t.strip()) and growth(" " + t.split()[-1], 1, 1)[0]
                for v, t in enumerate(self.texts)
            ],  # fmt: skip
            dtype=torch.bool,
            device=device,
        )
        self._found: dict[str, list[tuple[int, list[str]]]] = {}  # `completing` by open text
        self._opens: dict[str, list[int]] = {}  # open starts by row text (`_open_starts`)
        self._walks: dict[tuple, list[int]] = {}  # `_walk`'s, by open text in classes
        self.chars = set("".join(self.texts)) | set(" a5%.")  # what a row's text holds
        self._last_alone: tuple[tuple, torch.Tensor] = ((), self.alone[None])  # `_alone`'s
        self._rows: dict[tuple[str, tuple[str, ...]], torch.Tensor] = {}  # bans by open text

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
        rows = self.opener[history].any(1).nonzero().squeeze(1).tolist()
        for r, toks in zip(rows, history[rows].tolist()):
            ok = rows_allowed[r] if rows_allowed else ()
            ids = self.row_bans("".join(self.texts[v] for v in toks), ok, len(self.texts[toks[-1]]))
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

    def row_bans(self, text: str, ok: tuple[str, ...] = (), last: int = 0) -> torch.Tensor | None:
        """Token ids that would complete a span not `ok` that is under way in `text`; None
        when no span is (then `alone` covers the row). `last`: the length of its last piece,
        whose row without it was likely seen the step before (`_open_starts`)."""
        starts = self._open_starts(text, last)
        if not starts:
            return None
        cut = _context(text, starts[0])  # with the character before, for the lookbehinds,
        # which tell a space, a letter, a digit, `%` and another mark apart (`_kind`)
        # A lone `<Name>` is markup when the line closes it (`mt.spans`): the line's closing
        # tags before the open text go with it, apart from it (`SEPARATOR` ends any span).
        closes = sorted(set(CLOSING_TAG.findall(text, 0, cut)))
        head = "".join(f"</{n}>" for n in closes) + SEPARATOR if closes else ""
        end = _kind(text[cut]) + text[cut + 1 :] if cut == starts[0] - 1 else text[cut:]
        key = (head + end, ok)
        if key not in self._rows:
            if len(self._rows) >= CACHE:
                self._rows.pop(next(iter(self._rows)))
            found = self.completing(head, end, [s - cut for s in starts])
            ids = [v for v, spans in found if any(not _may(x, ok) for x in spans)]
            self._rows[key] = torch.tensor(ids, dtype=torch.long, device=self.device)
        return self._rows[key]

    def _open_starts(self, text: str, last: int) -> list[int]:
        """`mt.spans.open.open_starts(text)`, from the row's starts without its last piece where
        they are known: a start no pattern can still match from stays so (open text is
        prefix-closed), so only the starts open before and the last piece's characters are
        read. A piece holding `@` can open an address that starts before it: all are read."""
        parent = self._opens.get(text[: len(text) - last]) if 0 < last < len(text) else None
        if parent is None or "@" in text[len(text) - last :]:
            out = open_starts(text)
        else:
            lo = len(text) - last
            keep = [s for s in parent if s >= len(text) - WINDOW_CHARS and growth(text, s, lo)[0]]
            out = keep + open_starts(text, lo)
        if len(self._opens) >= CACHE:
            self._opens.pop(next(iter(self._opens)))
        self._opens[text] = out
        return out

    def _trie(self, among: frozenset[int]) -> tuple[dict[int, str], Trie]:
        """For spans of the patterns `among`: their character classes
        (`mt.spans.open.class_map`) and the trie of the pieces' texts written in them, so
        pieces that read alike to those patterns share a path (for a `$VAR`, every letter
        is one). Only the pieces holding a mark where those spans end on one (a tag, a
        brace). Built when such a span is first under way: most lines never need one."""
        if among not in self._tries:
            classes = class_map(self.chars, among)
            root: Trie = {}
            for v in self.marked if ends_in_mark(among) else range(len(self.texts)):
                if self.texts[v]:
                    node = root
                    for c in self.texts[v].translate(classes):
                        node = node.setdefault(c, {})
                    node.setdefault(END, []).append(v)
            self._tries[among] = (classes, root)
        return self._tries[among]

    def completing(self, head: str, end: str, starts: list[int]) -> list[tuple[int, list[str]]]:
        """(piece, the spans it completes) for the pieces that complete a span after `end`,
        whose spans under way start at `starts`: for each start, the trie of pieces is
        walked with the partial matches of the patterns alive there (`mt.spans.open`), a
        branch dropped as soon as none can still match along it, and each piece on a branch
        where one was completed is checked by `find_spans` itself (after `head`, the line's
        closing tags)."""
        if head + end in self._found:
            return self._found[head + end]
        candidates: list[int] = []
        for s in starts:
            among = alive_patterns(end, s)
            if not among:
                continue
            classes, trie = self._trie(among)
            # The walk reads the text in those patterns' classes: its result serves every
            # open text that reads alike (`$HOME` and `$PATH`; `%0.22` and `%0.2222`).
            key = (*_squeeze(end.translate(classes), [s]), among)
            if key not in self._walks:
                if len(self._walks) >= CACHE:
                    self._walks.pop(next(iter(self._walks)))
                self._walks[key] = _walk(trie, *key)
            candidates += self._walks[key]
        candidates = list(dict.fromkeys(candidates))
        out = []
        line = head + end
        for v, spans in zip(candidates, _completed_each(line, [self.texts[v] for v in candidates])):
            if spans:
                out.append((v, spans))
        if len(self._found) >= CACHE:
            self._found.pop(next(iter(self._found)))
        self._found[line] = out
        return out


def _walk(trie: Trie, end: str, start: tuple[int, ...], among: frozenset[int]) -> list[int]:
    """The pieces of `trie` that may complete a span of the patterns `among` that starts at
    `start[0]` of `end`: those on the branches where one is completed."""
    candidates: list[int] = []
    (s,) = start

    def walk(node: Trie, text: str) -> None:
        for c, child in node.items():
            if c == END:
                continue
            line = text + c
            alive, at_end, final = growth(line, s, len(end), among)
            if final:  # every piece below completes it
                candidates.extend(_all(child))  # checked, with the others, by the caller
                continue
            if at_end:  # a piece ending here does
                candidates.extend(child.get(END, ()))
            if alive:
                walk(child, line)

    walk(trie, end)
    return candidates


# A run of one character class longer than this is read as this long: no pattern asks for
# more repetitions of a character than `www.` does (tests/cli/test_bans.py checks it).
RUN = 3


def _squeeze(text: str, starts: list[int]) -> tuple[str, tuple[int, ...]]:
    r"""`text` with each run of one character longer than `RUN` cut to `RUN` (but a run a
    span starts inside), and `starts` moved with it: `%0.2222` and `%0.22222` share one
    walk. No pattern needs a longer run (`RUN`), and a shorter run only stays within more
    patterns' bounds (`\d?`, `{1,7}`), so a cut run keeps alive every branch the whole run
    does (and perhaps more, which the exact check then drops)."""
    out, moved, pos = [], list(starts), 0
    for m in _RUNS.finditer(text):
        if any(m.start() < s < m.end() for s in starts):
            continue
        out.append(text[pos : m.start() + RUN])
        pos = m.end()
        removed = m.end() - m.start() - RUN
        moved = [s - removed if s >= m.end() else s for s in moved]
    out.append(text[pos:])
    return "".join(out), tuple(moved)


_RUNS = re.compile(rf"(.)\1{{{RUN},}}", re.DOTALL)


def _context(text: str, start: int) -> int:
    """Where the text kept for the open text from `start` begins: the character before it
    (read as its `_kind`), or, when that character ends a span already written (`%%` before
    `<%`), that span whole. The first character of a line is free to start a span that
    would swallow `start` (`%<` is one), a character an earlier span took is not: the two
    read alike to the lookbehinds but not to `find_spans`'s scan."""
    if start == 0 or text[start - 1].isspace():  # no span ends on a space: most rows
        return max(0, start - 1)
    lo = max(0, start - WINDOW_CHARS)
    for span in find_spans(text[lo:start], WIDEST):
        if span.start < start - 1 - lo < span.end and span.end == start - lo:
            return lo + span.start
    return start - 1


def _kind(c: str) -> str:
    r"""A character as the patterns' lookbehinds (`\b`, `(?<![\d%])`) see it, so `(%` and
    `:%` share their open text."""
    if c.isspace():
        return " "
    return "5" if c.isdigit() else "%" if c == "%" else "a" if c.isalnum() or c == "_" else "."


def _completed_each(line: str, pieces: list[str]) -> list[list[str]]:
    """For each piece, the spans of `line + piece` that reach into the piece: one pass of
    the patterns over all the lines at once (no span crosses `SEPARATOR`)."""
    lines = [line + p for p in pieces]
    starts, pos = [], 0
    for x in lines:
        starts.append(pos)
        pos += len(x) + len(SEPARATOR)
    out: list[list[str]] = [[] for _ in pieces]
    for s in find_spans(SEPARATOR.join(lines), WIDEST):
        k = bisect.bisect_right(starts, s.start) - 1
        if s.end > starts[k] + len(line):
            out[k].append(s.text)
    return out


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

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
and, for that open text, which pieces would complete a span (`SpanRule.completing`).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

import torch

from mt.spans import WIDEST, find_spans
from mt.spans.masks import RowMask
from mt.spans.open import alive_patterns, class_map, ends_in_mark, growth, open_starts
from mt.spans.rows import CACHE, SEPARATOR, OpenTexts, read
from mt.tokenizer import Tokenizer

# What a row's text may end with before a piece, for a span to start inside the piece: the
# patterns look back one character (`\b`, `(?<![\d%])`), and these are its kinds (none, a
# space, a letter, a digit, a mark).
CONTEXTS = ("", " ", "a", "5", ".")
# The same for a span under way that starts inside a piece, or (an address) at the row's
# last character: a start of line reads as a space, and a mark as a space does.
OPEN_CONTEXTS = (" ", "a", "5")
_PLAIN = re.compile(r"[\w\s]*")


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
      the row's open text is read off the patterns (`mt.spans.open.open_starts`), once, and
      carried from each row to the row that extends it by a piece (`mt.spans.rows`); the
      pieces that would complete a span after it are found by walking the trie of piece
      texts with the patterns' partial matches, pruning every branch no pattern can still
      match (`completing`). So a row ending is a dictionary lookup once its open text was
      seen, and a row that holds no open text costs the lookup of its parent's.

    Only rows holding a piece that can open a span (`opener`) are read as text, and only the
    rows with a ban of their own get a mask row of their own (`mt.spans.masks`). A sentence
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
        self._shared = RowMask.of(self.alone)  # the mask of a step where no row differs
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
        self.open_texts = OpenTexts(self.texts, self.opener.tolist())  # each row's, by text
        self._walks: dict[tuple, list[int]] = {}  # `_walk`'s, by open text in classes
        self.chars = set("".join(self.texts)) | set(" a5%.")  # what a row's text holds
        self._last_alone: tuple[tuple, tuple[torch.Tensor, set[int]]] = (
            (),
            (self.alone[None], set()),
        )
        self._rows: dict[tuple[str, tuple[str, ...]], list[int]] = {}  # bans by open text

    def mask(
        self, history: torch.Tensor, sent: torch.Tensor, allowed: list[tuple[str, ...]] | None
    ) -> torch.Tensor:
        """(V,) or (R, V) bool: the tokens each row of `history` (R, t) may not write next;
        `sent` (R,) is each row's sentence, `allowed[sentence]` its allowed spans."""
        return self.rows_mask(history, sent, allowed).dense(len(history))

    def rows_mask(
        self, history: torch.Tensor, sent: torch.Tensor, allowed: list[tuple[str, ...]] | None
    ) -> RowMask:
        """`mask` as the search applies it (`mt.spans.masks`): `alone` for every row but
        those whose sentence is allowed one of its pieces' spans or that hold an open span."""
        R, t = history.shape
        base, differs = self._alone(allowed) if allowed and any(allowed) else (None, set())
        sents = sent.tolist()
        extra: dict[int, list[int]] = {r: [] for r, s in enumerate(sents) if s in differs}
        if t:
            opens = self.opener[history]
            read = opens.any(1)
            before = opens[:, :-1].any(1)  # the row before its last piece could be open
            rows = read.nonzero().squeeze(1).tolist()
            texts, opener, known = self.texts, self.open_texts.opener, self.open_texts.known
            for r, toks, was in zip(rows, history[rows].tolist(), before[rows].tolist()):
                text, last = "".join(map(texts.__getitem__, toks)), toks[-1]
                # Most rows: no open text before a piece that opens none (`OpenTexts.of`).
                if was and not opener[last] and (piece := texts[last]) and "@" not in piece:
                    if known(text[: len(text) - len(piece)]) is None:
                        self.open_texts.keep(text, None)
                        continue
                state = self.open_texts.of(text, last, was)
                if state is not None:
                    ok = allowed[sents[r]] if allowed else ()
                    if ids := self._bans(state, ok):
                        extra.setdefault(r, []).extend(ids)
        if not extra:
            return self._shared
        rows = sorted(extra)
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        own = base[sent[index]] if base is not None else self.alone.expand(len(rows), -1).clone()
        at = [k for k, r in enumerate(rows) for _ in extra[r]]
        own[at, [v for r in rows for v in extra[r]]] = True
        return RowMask(self.alone, index, own)

    def _alone(self, allowed: list[tuple[str, ...]]) -> tuple[torch.Tensor, set[int]]:
        """(B, V) `alone`, less per sentence the pieces whose spans it is allowed, and the
        sentences where that leaves a piece of `alone` free; kept for the steps of one batch."""
        key = tuple(allowed)
        if self._last_alone[0] != key:
            out = self.alone.expand(len(allowed), -1).clone()
            differs = set()
            for b, ok in enumerate(allowed):
                free = [
                    v for v, found in self.alone_spans.items() if all(_may(x, ok) for x in found)
                ]
                if free:
                    out[b, free] = False
                    differs.add(b)
            self._last_alone = (key, (out, differs))
        return self._last_alone[1]

    def row_bans(self, text: str, ok: tuple[str, ...] = ()) -> torch.Tensor | None:
        """Token ids that would complete a span not `ok` that is under way in `text`; None
        when no span is (then `alone` covers the row)."""
        state = read(text, open_starts(text))
        if state is None:
            return None
        return torch.tensor(self._bans(state, ok), dtype=torch.long, device=self.device)

    def _bans(self, state: tuple[str, str, tuple[int, ...]], ok: tuple[str, ...]) -> list[int]:
        """The pieces that would complete a span not `ok` after the open text `state`
        (`mt.spans.rows`), kept by open text."""
        head, end, starts = state
        key = (head + end, ok)
        if key not in self._rows:
            if len(self._rows) >= CACHE:
                self._rows.pop(next(iter(self._rows)))
            found = self.completing(head, end, list(starts))
            self._rows[key] = [v for v, spans in found if any(not _may(x, ok) for x in spans)]
        return self._rows[key]

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
    out = step_bans(bans, history, sent)
    return None if out is None else out.dense(len(history))


def step_bans(bans: Bans | None, history: torch.Tensor, sent: torch.Tensor) -> RowMask | None:
    """`step_mask` as the search applies it (`mt.spans.masks`)."""
    if bans is None:
        return None
    rule = bans.spans.rows_mask(history, sent, bans.allowed) if bans.spans is not None else None
    vocab = bans.vocab
    if vocab is None:
        return rule
    if vocab.dim() == 1 and rule is not None:
        return RowMask(rule.common | vocab, rule.rows, rule.own | vocab)
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

"""What the span ban knows of one target vocabulary: built once per tokenizer and kept with it,
so every translator of a loaded model (each `mt serve` option set, each `mt eval` run, the
trainer's evaluations) shares it, and a row ending one of them has seen is a lookup.

The ban (`mt.spans.bans.SpanRule`) asks two things of a vocabulary. Which pieces complete a
span by themselves after any row (`alone_spans`), and which can hold the start of a span under
way (`opener`): both read once, piece by piece, when the index is built. And, for each open
text a row can end with (`mt.spans.rows`), which pieces would complete a span there
(`completing`): found by walking a trie of the piece texts with the patterns' partial matches,
and kept by open text, as are the row readings and each open text's bans. An open text met
first shares the bans of one met before where the scan stands alike after both
(`mt.spans.alike`: a tag's attributes, whatever their words), so a search that stays inside a
span for many steps walks and checks once. All of it is a
function of the piece texts alone, so one index serves every search, device and sentence; what
a sentence is allowed to write filters its answers (`bans`).
"""

from __future__ import annotations

import bisect
import re
import sys
import threading
from collections import OrderedDict
from functools import lru_cache
from typing import NamedTuple

import torch

from mt.spans import kept
from mt.spans.alike import Alike
from mt.spans.checked import completed_by_class, completed_each
from mt.spans.open import alive_patterns, class_map, final_test, growth, open_starts
from mt.spans.rows import CACHE, Open, OpenTexts
from mt.tokenizer import Tokenizer

# What a row's text may end with before a piece, for a span to start inside the piece: the
# patterns look back one character (`\b`, `(?<![\d%])`), and these are its kinds (none, a
# space, a letter, a digit, a mark).
CONTEXTS = ("", " ", "a", "5", ".")
# The same for a span under way that starts inside a piece, or (an address) at the row's
# last character: a start of line reads as a space, and a mark as a space does.
OPEN_CONTEXTS = (" ", "a", "5")
_PLAIN = re.compile(r"[\w\s]*")
# (piece, the spans it completes, where the first starts if it runs through the piece's start
# from before it, else -1)
Found = tuple[int, tuple[str, ...], int]
KEPT = 4  # vocabularies whose index is kept (the latest used): a process serves a few models


class Trie(NamedTuple):
    """Piece texts as a trie laid flat: the texts sorted, and each one's piece, so the pieces
    below a node (the texts that start with its path) are one range of both lists. Two lists
    rather than a dict per node: building one costs a sort, and it leaves the collector two
    objects to walk rather than tens of thousands, in every collection of the process."""

    texts: list[str]
    pieces: list[int]


class PieceIndex:
    """The per-vocabulary part of the span ban over the target pieces `texts`: which pieces
    complete a span alone, which can open one, and, by open text, which complete one."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        # The spans each piece completes by itself after each kind of row end, where any.
        # Every span holds a mark (`%<{$&@:.`...): a piece of words and spaces completes none.
        marked = {v for v, t in enumerate(texts) if t and not _PLAIN.fullmatch(t)}
        self.marked = sorted(marked)
        self.plain = [v not in marked for v in range(len(texts))]  # `completed_by_class`'s
        alone: dict[int, set[str]] = {}
        for c in CONTEXTS:
            lines = completed_each(c, [texts[v] for v in self.marked])
            for v, (spans, _) in zip(self.marked, lines):
                alone.setdefault(v, set()).update(spans)
        self.alone_spans = {v: found for v, found in alone.items() if found}
        # A piece that can hold the start of a span under way (`%`, ` w`, `@`, `<a`): a row
        # without one has no open text. Open text is prefix-closed (what could still grow into
        # a span could before its last character too), so the piece holding a span's first
        # character, or its `@`, is one of these.
        # A piece of words and spaces opens only a URL, and only at the start of its last word
        # (no boundary inside a word, no white space inside a URL): read after a space.
        self.opener = [
            any(open_starts(c + t) for c in OPEN_CONTEXTS)
            if v in marked
            else bool(t.strip()) and growth(" " + t.split()[-1], 1, 1)[0]
            for v, t in enumerate(texts)
        ]
        self.chars = set("".join(texts)) | set(" a5%.")  # what a row's text holds
        self.open_texts = OpenTexts(texts, self.opener)  # each row's, by its tokens
        self._tries: dict[frozenset[int], tuple[dict[int, str], Trie]] = {}  # `_trie`'s
        self._classes: dict[frozenset[int], dict[int, str]] = {}  # `class_map`s by patterns
        self._walks: dict[tuple, list[int]] = {}  # `_walk`'s, by open text in classes
        self._found: dict[str, list[Found]] = {}  # `completing`'s
        self._bans: dict[tuple[str, str, tuple[str, ...]], torch.Tensor] = {}  # by open text
        # `bans` by what its answer depends on (`mt.spans.alike`), for open texts met first.
        self.alike = Alike(texts)
        self._shared: dict[tuple, list[Found]] = {}  # answers cut after the text under way
        self._keys: dict[Open, tuple[tuple, int | None] | None] = {}  # `Alike.key`'s
        self.learned = 0  # entries added to the tables since they were last kept (`tables`)
        # The tables are shared by every translator of the vocabulary: `mt serve` runs one
        # worker thread per model, and two models may share a vocabulary.
        self.lock = threading.Lock()

    def bans(self, state: Open, ok: tuple[str, ...], grown: int = 0) -> torch.Tensor:
        """(K,) long, on the CPU: the pieces that would complete a span not `ok` after the open
        text `state` (`mt.spans.rows`), kept by open text as the tensor a mask is filled from
        (making one from a list of a thousand ids costs more than the rest of a step's ban).
        An open text first met shares the answer of one met before where the scan stands
        alike after both (`mt.spans.alike`), with its own text under way put before the part
        of each span that runs through the start; `grown` > 0 says its last `grown`
        characters extend the open text of the row before."""
        head, end, starts = state
        key = (head, end, ok)  # strings a row's open text shares with its parent's: hashed once
        out = self._bans.get(key)
        if out is None:
            if len(self._bans) >= CACHE:
                self._bans.pop(next(iter(self._bans)))
            alike = self._keys.get(state, False)
            if alike is False:  # the key is the same for every sentence: kept by open text
                if len(self._keys) >= CACHE:
                    self._keys.pop(next(iter(self._keys)))
                alike = self._keys[state] = self.alike.key(head, end, starts, grown)
                self.learned += 1
            live = alike[1] if alike is not None else None
            under_way = end[live:] if live is not None else ""
            found = self._shared.get(alike[0]) if alike is not None else None
            if found is None:
                found = self.completing(head, end, list(starts))
                cut = _after_start(found, len(head) + live if live is not None else -1, under_way)
                if alike is not None and cut is not None:
                    if len(self._shared) >= CACHE:
                        self._shared.pop(next(iter(self._shared)))
                    self._shared[alike[0]] = found = cut
                    self.learned += 1
                else:
                    under_way = None  # `found` holds the spans whole
            out = torch.tensor(_banned(found, ok, under_way), dtype=torch.long)
            self._bans[key] = out
        return out

    def completing(self, head: str, end: str, starts: list[int]) -> list[Found]:
        """(piece, the spans it completes, where in `head + end` the first starts if it runs
        through the piece's start, else -1) for the pieces that complete a span after `end`,
        whose spans under way start at `starts`: for each start, the trie of pieces is
        walked with the partial matches of the patterns alive there (`mt.spans.open`), a
        branch dropped as soon as none can still match along it, and each piece on a branch
        where one was completed is checked by `find_spans` itself (after `head`, the line's
        closing tags), word pieces once per class (`mt.spans.checked`)."""
        line = head + end
        if line in self._found:
            return self._found[line]
        candidates: list[int] = []
        alive: frozenset[int] = frozenset()
        for s in starts:
            among = alive_patterns(end, s)
            if not among:
                continue
            alive |= among
            classes, trie = self._trie(among)
            # The walk reads the text in those patterns' classes: its result serves every
            # open text that reads alike (`$HOME` and `$PATH`; `%0.22` and `%0.2222`).
            key = (*_squeeze(end.translate(classes), [s]), among)
            if key not in self._walks:
                if len(self._walks) >= CACHE:
                    self._walks.pop(next(iter(self._walks)))
                self._walks[key] = _walk(trie, *key)
                self.learned += 1
            candidates += self._walks[key]
        candidates = list(dict.fromkeys(candidates))
        pieces = [self.texts[v] for v in candidates]
        # Tuples of strings, which the collector stops tracking: the kept answers of a
        # thousand open texts are not walked again by every collection of the process.
        checked = completed_by_class(line, pieces, [self.plain[v] for v in candidates],
                                     self._class_map(alive))  # fmt: skip
        out = [(v, *x) for v, x in zip(candidates, checked) if x[0]]
        if len(self._found) >= CACHE:
            self._found.pop(next(iter(self._found)))
        self._found[line] = out
        self.learned += 1
        return out

    def tables(self) -> dict:
        """What the index has learned, as built-in values (`mt.spans.kept`)."""
        with self.lock:
            return {
                "tries": [
                    (among, classes, tuple(trie)) for among, (classes, trie) in self._tries.items()
                ],
                "walks": dict(self._walks),
                "found": dict(self._found),
                "shared": dict(self._shared),
                "keys": dict(self._keys),
            }

    def take(self, tables: dict) -> bool:
        """Start from `tables` (`tables` of an index of the same pieces); False, leaving the
        index as it was, where they are not such tables."""
        try:
            tries = {among: (classes, Trie(*trie)) for among, classes, trie in tables["tries"]}
            walks, found = dict(tables["walks"]), dict(tables["found"])
            shared, keys = dict(tables["shared"]), dict(tables["keys"])
        except (KeyError, TypeError, ValueError):
            return False
        with self.lock:
            self._tries, self._walks, self._found = tries, walks, found
            self._shared, self._keys = shared, keys
            self.learned = 0
        return True

    def _trie(self, among: frozenset[int]) -> tuple[dict[int, str], Trie]:
        """For spans of the patterns `among`: their character classes
        (`mt.spans.open.class_map`) and the trie of the pieces' texts written in them, so
        pieces that read alike to those patterns share a path (for a `$VAR`, every letter
        is one). Only the pieces holding a character those spans can end with
        (`mt.spans.open.final_test`: `>` for a tag): a piece the walk finds completing a
        span holds that span's last character, so no other can be one. Built when such a
        span is first under way: most lines never need one."""
        if among not in self._tries:
            classes = self._class_map(among)
            pairs = sorted((self.texts[v].translate(classes), v)
                           for v in self._holding(final_test(among)))  # fmt: skip
            trie = Trie([t for t, _ in pairs], [v for _, v in pairs])
            self._tries[among] = (classes, trie)
            self.learned += 1
        return self._tries[among]

    def _class_map(self, among: frozenset[int]) -> dict[int, str]:
        """`class_map` of the pieces' characters for the patterns `among`."""
        if among not in self._classes:
            self._classes[among] = class_map(self.chars, among)
        return self._classes[among]

    def _holding(self, test: re.Pattern[str]) -> list[int]:
        """The pieces whose text holds a character that passes `test`."""
        chars = "".join(c for c in self.chars if test.fullmatch(c))
        found = re.compile(f"[{re.escape(chars)}]") if chars else None
        return [v for v, t in enumerate(self.texts) if found and found.search(t)]


_INDEXES: OrderedDict[str, PieceIndex] = OrderedDict()  # by target vocabulary: `index_for`'s
_INDEXES_LOCK = threading.Lock()


def index_for(tokenizer: Tokenizer) -> PieceIndex:
    """The index of `tokenizer`'s target pieces, built the first time it is asked for and kept
    with the vocabulary (by its fingerprint, as `placeholders_for` keeps its probes): every
    translator and every reload of the same model finds it built."""
    key = tokenizer.fingerprint()
    with _INDEXES_LOCK:
        if key in _INDEXES:
            _INDEXES.move_to_end(key)
            return _INDEXES[key]
    index = PieceIndex(piece_texts(tokenizer))  # outside the lock: it takes a while
    tables = kept.load(kept.path_for(key))
    if tables is not None:
        index.take(tables)
    with _INDEXES_LOCK:
        index = _INDEXES.setdefault(key, index)
        while len(_INDEXES) > KEPT:
            _INDEXES.popitem(last=False)
    return index


def keep_learned() -> None:
    """Write what each vocabulary's index learned since it was read to the span cache
    (`mt.spans.kept`), so the next process starts from it: `mt translate` and `mt eval` call
    this once their lines are done."""
    with _INDEXES_LOCK:
        indexes = list(_INDEXES.items())
    for key, index in indexes:
        path = kept.path_for(key)
        if index.learned and path is not None:  # no tables copied where the cache is off
            kept.save(path, index.tables())
            index.learned = 0


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


def may(span: str, ok: tuple[str, ...]) -> bool:
    """Whether `span` is one of the allowed spans `ok`, or the start of one."""
    return any(a.startswith(span) for a in ok)


@lru_cache(maxsize=256)
def starts_of(ok: tuple[str, ...]) -> frozenset[str]:
    """The spans `may` lets through for `ok`: each allowed span and each start of one, so
    checking the spans of a thousand pieces is a set lookup each."""
    return frozenset(a[:k] for a in ok for k in range(len(a) + 1))


def _walk(trie: Trie, end: str, start: tuple[int, ...], among: frozenset[int]) -> list[int]:
    """The pieces of `trie` that may complete a span of the patterns `among` that starts at
    `start[0]` of `end`: those on the branches where one is completed."""
    candidates: list[int] = []
    (s,) = start
    keys, pieces = trie

    def walk(lo: int, hi: int, depth: int, text: str) -> None:
        # The node of `text`: the texts in [lo, hi) start with its path, those that end
        # there first (a text sorts before the texts it starts).
        while lo < hi and len(keys[lo]) == depth:
            lo += 1
        while lo < hi:  # each child: the range of texts with its character next
            c = keys[lo][depth]
            step = chr(ord(c) + 1) if ord(c) < sys.maxunicode else None
            below = bisect.bisect_left(keys, keys[lo][:depth] + step, lo, hi) if step else hi
            line = text + c
            alive, at_end, final = growth(line, s, len(end), among)
            if final:  # every piece below completes it
                candidates.extend(pieces[lo:below])  # checked, with the others, by the caller
            else:
                if at_end:  # a piece ending here does
                    k = lo
                    while k < below and len(keys[k]) == depth + 1:
                        candidates.append(pieces[k])
                        k += 1
                if alive:
                    walk(lo, below, depth + 1, line)
            lo = below

    walk(0, len(keys), 0, end)
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
    out, cuts, pos = [], [], 0
    for m in _RUNS.finditer(text):
        if any(m.start() < s < m.end() for s in starts):
            continue
        out.append(text[pos : m.start() + RUN])
        pos = m.end()
        cuts.append((m.end(), m.end() - m.start() - RUN))
    out.append(text[pos:])
    # A start moves by what the runs before it lost, each run's end read in `text` itself.
    moved = tuple(s - sum(lost for end, lost in cuts if end <= s) for s in starts)
    return "".join(out), moved


_RUNS = re.compile(rf"(.)\1{{{RUN},}}", re.DOTALL)


def _after_start(found: list[Found], at: int, under_way: str) -> list[Found] | None:
    """`found` (`PieceIndex.completing`) with the span through each piece's start cut to the
    part after `under_way`, the text under way from the line's one live start `at`, so that
    another open text whose scan stands alike can put its own before it; None where such a
    span starts elsewhere (then the answer is not shared)."""
    out = []
    for v, spans, through in found:
        if through >= 0:
            if through != at:
                return None
            spans = (spans[0][len(under_way) :], *spans[1:])
        out.append((v, spans, through))
    return out


def _banned(found: list[Found], ok: tuple[str, ...], under_way: str | None) -> list[int]:
    """The pieces of `found` that complete a span not `ok`; `under_way`: the text under way
    to put before the span through a piece's start where `found` was cut after it
    (`_after_start`), None where it holds the spans whole."""
    if not ok:
        return [v for v, _, _ in found]
    free = starts_of(ok)
    if under_way is None:
        return [v for v, spans, _ in found if not free.issuperset(spans)]
    if not any(a.startswith(under_way) for a in ok):  # no span through the start is allowed
        return [v for v, spans, through in found if through >= 0 or not free.issuperset(spans)]
    whole = [(v, (under_way + spans[0], *spans[1:]) if through >= 0 else spans)
             for v, spans, through in found]  # fmt: skip
    return [v for v, spans in whole if not free.issuperset(spans)]

"""The lexical shortlist: the target pieces a source piece is likely to bring into a translation,
counted from parallel text, kept in a checkpoint, and a batch's candidates read from it.

A decode that may write only a batch's candidates (mt.translation.shortlist) projects onto a few
thousand of the output layer's rows instead of all of them, the part of a step that grows with
the vocabulary (an OPUS-MT model's 58k pieces). The candidates of a batch are Marian's and
Bergamot's (`--shortlist lex.s2t 100 50`): the `k` best translations of each of its source
pieces, the most frequent target pieces, PAD/UNK/BOS/EOS, and the target piece spelled as each
source piece (a name, a number or a placeholder is copied); a caller adds a prefix's or a
constraint's pieces.

"Best translation" is ranked by the Dice coefficient of sentence co-occurrence,
2 c(s, t) / (c(s) + c(t)), counted in one streaming pass over the pairs. A word aligner's
lexical table (fast_align or eflomal, as Bergamot's pipeline runs) ranks a little sharper, but
needs a compiled aligner and the corpus in memory over several passes; Dice ranks a piece's
frequent companions (articles, punctuation) low, and those are the frequent list's anyway, so
the shortlist's coverage of what a model writes is what decides (measured in
docs/studies/shortlist.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from itertools import zip_longest
from pathlib import Path

import numpy as np
import torch

from mt.atomic import write_with
from mt.checkpoint import Loaded
from mt.data.corpus import line_chunks
from mt.errors import MtError
from mt.tokenizer import EOS, Tokenizer

CHUNK = 20_000  # sentence pairs counted between merges of the pair counts
VERSION = 1


@dataclass(frozen=True)
class Shortlist:
    """Per source piece its best target pieces, best first: those of source id s are
    `targets[offsets[s]:offsets[s + 1]]`, at most `k`. `frequent`: the most frequent target
    pieces, most frequent first; `copies` (S,): the target piece spelled as each source piece,
    -1 where none; `lines`: the sentence pairs counted."""

    k: int
    offsets: np.ndarray  # (S + 1,) int64
    targets: np.ndarray  # (offsets[-1],) int32
    frequent: np.ndarray  # (F,) int32
    copies: np.ndarray  # (S,) int32
    lines: int

    @property
    def src_vocab(self) -> int:
        return len(self.offsets) - 1

    def to_dict(self) -> dict:
        """What a checkpoint keeps (plain tensors and values: `torch.load(weights_only=True)`)."""
        return {
            "version": VERSION,
            "method": "dice",
            "k": self.k,
            "lines": self.lines,
            "offsets": torch.from_numpy(self.offsets),
            "targets": torch.from_numpy(self.targets),
            "frequent": torch.from_numpy(self.frequent),
            "copies": torch.from_numpy(self.copies),
        }

    @staticmethod
    def from_dict(data: dict, where: str) -> Shortlist:
        """A shortlist from a checkpoint's entry; a malformed one is one line naming `where`."""
        try:
            if data["version"] > VERSION:
                raise MtError(f"{where}: its shortlist is newer than this mt reads; upgrade mt")
            out = Shortlist(
                int(data["k"]),
                data["offsets"].numpy().astype(np.int64),
                data["targets"].numpy().astype(np.int32),
                data["frequent"].numpy().astype(np.int32),
                data["copies"].numpy().astype(np.int32),
                int(data["lines"]),
            )
        except (KeyError, TypeError, AttributeError):
            raise MtError(f"{where}: its shortlist cannot be read") from None
        if out.offsets[-1] != len(out.targets) or len(out.copies) != out.src_vocab:
            raise MtError(f"{where}: its shortlist cannot be read (inconsistent sizes)")
        return out

    def check(self, tokenizer: Tokenizer, where: str) -> None:
        """The shortlist fits the model's vocabularies (one line naming `where` if not)."""
        top = max([int(self.targets.max(initial=0)), int(self.frequent.max(initial=0))])
        if self.src_vocab != tokenizer.src_vocab_size or top >= tokenizer.tgt_vocab_size:
            raise MtError(f"{where}: its shortlist was built for other vocabularies")

    @cached_property
    def _table(self) -> torch.Tensor:
        """(S, k) each source piece's targets, padded with -1: a batch's candidates in one
        gather."""
        S = self.src_vocab
        table = np.full((S, max(self.k, 1)), -1, dtype=np.int64)
        counts = np.diff(self.offsets)
        rows = np.repeat(np.arange(S), counts)
        cols = np.arange(len(self.targets)) - np.repeat(self.offsets[:-1], counts)
        table[rows, cols] = self.targets
        return torch.from_numpy(table)

    @cached_property
    def _always(self) -> torch.Tensor:
        return torch.cat([torch.arange(EOS + 1), torch.from_numpy(self.frequent).long()])

    def candidates(
        self, src: torch.Tensor, k: int, extra: Iterable[int] = (), vocab: int | None = None
    ) -> torch.Tensor:
        """The ascending target ids a batch `src` (B, S) may write: each source piece's `k` best
        (at most the shortlist's own k), their copies, the frequent pieces, PAD/UNK/BOS/EOS
        (first, as `mt.search.rules.OutputColumns` needs) and `extra` (a prefix's, a
        constraint's pieces). `vocab`: drop ids at or past it (a model's padded vocabulary)."""
        ids = src.reshape(-1).cpu().unique()
        ids = ids[ids.lt(self.src_vocab)]
        table = self._table[ids, : max(1, min(k, self.k))].reshape(-1)
        copies = torch.from_numpy(self.copies).long()[ids]
        given = torch.tensor(list(extra), dtype=torch.long)
        out = torch.cat([self._always, table, copies, given]).unique()  # sorted
        out = out[out.ge(0)]
        return out if vocab is None else out[out.lt(vocab)]

    def vmap_lines(self, src_pieces: list[str], tgt_pieces: list[str]) -> Iterator[str]:
        """CTranslate2's vocabulary map (`vmap.txt`, used with `use_vmap=True`): a line
        `source piece<TAB>target pieces` per source piece, and first the always-candidates
        under the empty source."""
        always = [tgt_pieces[int(t)] for t in self.frequent]
        yield "\t" + " ".join(always)
        for s in range(self.src_vocab):
            lo, hi = self.offsets[s], self.offsets[s + 1]
            row = [int(t) for t in self.targets[lo:hi]]
            if self.copies[s] >= 0 and self.copies[s] not in row:
                row.append(int(self.copies[s]))
            if s > EOS and row and " " not in src_pieces[s] and src_pieces[s]:
                yield src_pieces[s] + "\t" + " ".join(tgt_pieces[t] for t in row)


def copies_of(tokenizer: Tokenizer) -> np.ndarray:
    """(S,) the target id spelled as each source piece, -1 where the target has none."""
    out = np.full(tokenizer.src_vocab_size, -1, dtype=np.int32)
    for s in range(EOS + 1, tokenizer.src_vocab_size):
        piece = tokenizer.src.id_to_piece(s)
        t = tokenizer.tgt.piece_to_id(piece)
        if t > EOS and tokenizer.tgt.id_to_piece(t) == piece:
            out[s] = t
    return out


class PairCounts:
    """Sentence co-occurrence counts of source and target pieces, added a chunk at a time:
    c(s), c(t) (sentences holding each), c(s, t) (sentences holding both) and each target
    piece's occurrences. Pair keys are s * T + t in one sorted int64 array, merged per chunk."""

    def __init__(self, src_vocab: int, tgt_vocab: int) -> None:
        self.S, self.T = src_vocab, tgt_vocab
        self.src = np.zeros(src_vocab, dtype=np.int64)
        self.tgt = np.zeros(tgt_vocab, dtype=np.int64)
        self.occurrences = np.zeros(tgt_vocab, dtype=np.int64)
        self.keys = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)
        self.lines = 0

    def add(self, pairs: list[tuple[list[int], list[int]]]) -> None:
        keys = []
        for src, tgt in pairs:
            s = np.unique(np.asarray(src, dtype=np.int64))
            t = np.asarray(tgt, dtype=np.int64)
            s = s[(s > EOS) & (s < self.S)]
            t = t[(t > EOS) & (t < self.T)]
            np.add.at(self.occurrences, t, 1)
            t = np.unique(t)
            self.src[s] += 1
            self.tgt[t] += 1
            keys.append((s[:, None] * self.T + t[None, :]).ravel())
            self.lines += 1
        if not keys:
            return
        merged = np.concatenate([self.keys, *keys])
        weights = np.concatenate([self.counts, np.ones(len(merged) - len(self.keys), np.int64)])
        self.keys, inverse = np.unique(merged, return_inverse=True)
        self.counts = np.bincount(inverse, weights=weights).astype(np.int64)

    def shortlist(self, k: int, frequent: int, copies: np.ndarray) -> Shortlist:
        """Each source piece's `k` best target pieces by Dice (ties: the more co-occurrences
        first, then the lower id), the `frequent` most frequent target pieces."""
        s, t = self.keys // self.T, self.keys % self.T
        dice = 2.0 * self.counts / (self.src[s] + self.tgt[t])
        order = np.lexsort((t, -self.counts, -dice, s))  # by s, then best first
        s_sorted = s[order]
        starts = np.searchsorted(s_sorted, np.arange(self.S + 1))
        rank = np.arange(len(order)) - starts[s_sorted]
        keep = order[rank < k]
        kept_s = s[keep]
        offsets = np.searchsorted(kept_s, np.arange(self.S + 1)).astype(np.int64)
        by_count = np.lexsort((np.arange(self.T), -self.occurrences))
        top = by_count[self.occurrences[by_count] > 0][:frequent]
        return Shortlist(
            k, offsets, t[keep].astype(np.int32), top.astype(np.int32), copies, self.lines
        )


def build(
    tokenizer: Tokenizer,
    pairs: Iterable[tuple[str, str]],
    k: int = 100,
    frequent: int = 100,
) -> Shortlist:
    """The shortlist of the sentence pairs `pairs` (source, target text) in `tokenizer`'s
    pieces: each source piece's `k` best target pieces and the `frequent` most frequent."""
    counts = PairCounts(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    chunk: list[tuple[str, str]] = []
    for pair in pairs:
        chunk.append(pair)
        if len(chunk) == CHUNK:
            _add(counts, tokenizer, chunk)
            chunk = []
    _add(counts, tokenizer, chunk)
    if not counts.lines:
        raise MtError("no sentence pairs to build a shortlist from")
    return counts.shortlist(k, frequent, copies_of(tokenizer))


def _add(counts: PairCounts, tokenizer: Tokenizer, chunk: list[tuple[str, str]]) -> None:
    if chunk:
        src = tokenizer.src.encode([s for s, _ in chunk])
        tgt = tokenizer.tgt.encode([t for _, t in chunk])
        counts.add(list(zip(src, tgt)))


def read_pairs(source: Path, target: Path) -> Iterator[tuple[str, str]]:
    """The lines of two files side by side (`.gz` read); files of unequal length are one line
    naming both."""
    seen = 0
    for src, tgt in zip_longest(line_chunks(source), line_chunks(target), fillvalue=[]):
        if len(src) != len(tgt):
            line = seen + min(len(src), len(tgt))
            raise MtError(f"{source} and {target} differ in length after line {line}")
        seen += len(src)
        yield from zip(src, tgt)


def write_vmap(loaded: Loaded, path: Path) -> None:
    """The checkpoint's shortlist as CTranslate2's vocabulary map (`Shortlist.vmap_lines`),
    written atomically (`mt export`)."""
    shortlist = Shortlist.from_dict(loaded.data["shortlist"], "the checkpoint")
    tok = loaded.tokenizer
    src = [tok.src.id_to_piece(i) for i in range(tok.src_vocab_size)]
    tgt = [tok.tgt.id_to_piece(i) for i in range(tok.tgt_vocab_size)]
    write_with(path, "the vocabulary map", lambda f: f.writelines(
        line + "\n" for line in shortlist.vmap_lines(src, tgt)
    ), mode="w")  # fmt: skip

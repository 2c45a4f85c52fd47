"""What a model's training text says about itself: each word's usual case and how long a
translation runs, counted when the run's data is prepared and kept in the checkpoint.

Two decode-time steps guess from the text alone, and guess better from the training text:

- **Case table** (mt.translation.casing): a line in ALL CAPS or Title Case is translated in its
  usual case. The source tokenizer's guess (of a word in lower case and capitalised, the
  spelling cut into fewer pieces) gives mid-sentence `ein`/`zwei` the capital they have at
  the start of training sentences, and German nouns that are also English words (`Ball`,
  `Park`) the English lower case in a joint vocabulary. So, as Moses' truecaser does, each
  word's spellings are counted where case carries no position (not the first word of a
  line, nor the one after `.!?:`), and the most frequent spelling is the word's usual case.
  Per source language; bounded by the lines read and the words kept (most frequent first).
- **Length bounds** (mt.translation.doubt): the output/source ratio of non-space characters below
  which a translation is flagged `short` and above which `long`: the 0.5% and 99.5%
  quantiles of the training pairs' ratios, per direction (a translation into Czech runs
  shorter than one into German), kept within [LOW_RANGE] and [HIGH_RANGE] so that a noisy
  corpus cannot switch the flags off. SHORT and LONG are the fallback: the pooled Multi30k
  quantiles of twelve directions (docs/studies/text-as-people-send-it.md), for checkpoints
  without bounds.

A table is a list of spellings, most frequent first (its key is the spelling in lower case
as capitals give it back: `Straße` -> `strasse`), so it stays a plain value that
`torch.load(weights_only=True)` reads.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

WORD = re.compile(r"[^\W\d_]+", re.UNICODE)  # a word as casing sees it: letters only
_BREAK = re.compile(r"[.!?:]")  # after one of these a word may start a sentence

SHORT = 0.5  # fallback bounds of the output/source character ratio
LONG = 2.0
MIN_CHARS = 20  # sources shorter than this have no stable ratio: neither counted nor flagged
QUANTILES = (0.005, 0.995)
LOW_RANGE = (0.3, 0.9)
HIGH_RANGE = (1.2, 3.0)
MAX_LINES = 200_000  # lines read per direction (streaming: the first ones)
MAX_WORDS = 50_000  # words kept per language, most frequent first


def case_key(word: str) -> str:
    """The word as a line of capitals gives it back, in lower case (`Straße` -> `strasse`)."""
    return word.upper().lower()


def chars(text: str) -> int:
    """Non-space characters: what the length ratio counts."""
    return len("".join(text.split()))


def count_spellings(lines: Iterable[str], counts: Counter[str]) -> None:
    """Add to `counts` each word of `lines` whose case is not its position's: not first in
    its line nor after `.!?:`; lines in capitals say nothing of case and are skipped."""
    for line in lines:
        if not line.isupper():
            for part in _BREAK.split(line):
                counts.update(WORD.findall(part)[1:])


def case_table(counts: Counter[str], max_words: int = MAX_WORDS) -> list[str]:
    """Each word's most frequent spelling, the `max_words` most frequent words first."""
    best: dict[str, tuple[int, str]] = {}
    total: Counter[str] = Counter()
    for spelling, n in counts.items():
        key = case_key(spelling)
        total[key] += n
        if key not in best or (n, spelling) > best[key]:  # ties: the capitalised spelling
            best[key] = (n, spelling)
    return [best[key][1] for key, _ in total.most_common(max_words)]


def ratios(pairs: Iterable[tuple[str, str]], out: list[float]) -> None:
    """Append the target/source character ratio of each pair whose source has MIN_CHARS."""
    for src, tgt in pairs:
        n = chars(src)
        if n >= MIN_CHARS:
            out.append(chars(tgt) / n)


def bounds_of(values: list[float]) -> tuple[float, float] | None:
    """The flags' bounds from a direction's ratios (None for fewer than 200: no stable
    0.5% quantile)."""
    if len(values) < 200:
        return None
    lo, hi = np.quantile(np.asarray(values), QUANTILES)
    lo = float(np.clip(lo, *LOW_RANGE))
    hi = float(np.clip(hi, *HIGH_RANGE))
    return round(lo, 3), round(hi, 3)


@dataclass
class TextStats:
    """Case tables per source language and length bounds per direction (`de-en`)."""

    case: dict[str, list[str]] = field(default_factory=dict)
    lengths: dict[str, tuple[float, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case, "lengths": {k: list(v) for k, v in self.lengths.items()}}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> TextStats:
        lengths = {k: (float(v[0]), float(v[1])) for k, v in data.get("lengths", {}).items()}
        return TextStats({k: list(v) for k, v in data.get("case", {}).items()}, lengths)

    def merged(self, other: TextStats) -> TextStats:
        """These statistics with `other`'s languages and directions replacing theirs."""
        return TextStats({**self.case, **other.case}, {**self.lengths, **other.lengths})

    @cached_property
    def _tables(self) -> dict[str | None, dict[str, str]]:
        # Per language, key -> spelling; under None, every language's, the word taken from
        # the language where it ranks highest (a multilingual model told no source language).
        tables: dict[str | None, dict[str, str]] = {}
        pooled: dict[str, tuple[int, str]] = {}
        for lang, words in self.case.items():
            tables[lang] = {case_key(w): w for w in reversed(words)}
            for rank, w in enumerate(words):
                key = case_key(w)
                if key not in pooled or rank < pooled[key][0]:
                    pooled[key] = (rank, w)
        tables[None] = {k: w for k, (_, w) in pooled.items()}
        return tables

    def spellings(self, lang: str | None) -> Mapping[str, str]:
        """Key -> usual spelling for source language `lang` (None or unknown: all languages)."""
        return self._tables.get(lang, self._tables[None])

    def bounds(self, frm: str | None, to: str | None) -> tuple[float, float]:
        """The (short, long) ratio bounds of direction `frm`-`to`; a language not given
        matches every direction (the widest of their bounds); none known: the fallback."""
        exact = self.lengths.get(f"{frm}-{to}")
        if exact is not None:
            return exact
        found = [
            b
            for key, b in self.lengths.items()
            if frm in (None, key.split("-")[0]) and to in (None, key.split("-", 1)[1])
        ]
        if not found:
            return SHORT, LONG
        return min(b[0] for b in found), max(b[1] for b in found)


def count_stats(
    directions: Iterable[tuple[str, str, Iterable[tuple[list[str], list[str]]]]],
    max_lines: int = MAX_LINES,
) -> TextStats:
    """The statistics of `directions`: (source language, target language, chunks of
    sentence pairs), each read up to `max_lines` pairs, one pass, no corpus in memory."""
    counts: dict[str, Counter[str]] = {}
    values: dict[str, list[float]] = {}
    for src_lang, tgt_lang, chunks in directions:
        seen = 0
        for src, tgt in chunks:
            src, tgt = src[: max_lines - seen], tgt[: max_lines - seen]
            count_spellings(src, counts.setdefault(src_lang, Counter()))
            ratios(zip(src, tgt), values.setdefault(f"{src_lang}-{tgt_lang}", []))
            seen += len(src)
            if seen >= max_lines:
                break
    lengths = {k: b for k, v in values.items() if (b := bounds_of(v)) is not None}
    return TextStats({lang: case_table(c) for lang, c in counts.items()}, lengths)

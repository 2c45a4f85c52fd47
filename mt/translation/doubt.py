"""Doubtful translations flagged: a confidence and the failures a reader would catch at a glance.

A model trained on one sentence per line fails quietly: it stops after the first sentence of a
paragraph, copies a source it cannot read, or loops ("the the the", "ommmmm"). None of that
raises an error, so each translation carries, beside its text:

- `confidence`: the best hypothesis' log-probability per target token (EOS counted), the
  same for greedy and beam search (beam's length penalty is undone), so a threshold means
  one thing for every search; None where the search computed no score (greedy text output);
- `flags`, from the text alone (so they are free; only the length bounds are the model's own):
  - `copy`: the output is the source again (case, spaces and punctuation aside), or nearly
    all of its words are the source's, in a line of several words;
  - `loop`: a word n-gram repeated three times in a row, or a letter five times in a row
    that the source does not hold;
  - `short` / `long`: the output's characters far from what the source predicts.

The length rule is a ratio of characters (output / source), bounded per direction: the
0.5% and 99.5% quantiles of the training pairs' ratios, counted when the run's data is
prepared and kept in the checkpoint (mt.textstats; a translation into Czech runs shorter than
one into German, so one ratio for all is strict into Czech and lenient into German). A
checkpoint without them (older, imported) uses SHORT and LONG, those quantiles pooled over
the twelve directions of Multi30k's de, en, fr and cs references
(docs/studies/text-as-people-send-it.md). `short` fires below the short bound x the source's
characters and `long` above the long bound x plus LONG_SLACK characters, only for sources of
MIN_CHARS or more (a two-word line has no stable ratio).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from mt.search.steps import length_penalty
from mt.textstats import LONG, MIN_CHARS, SHORT
from mt.textstats import chars as _chars
from mt.translation.requests import Request
from mt.translation.stages import Ask, Rounds, Stage

LONG_SLACK = 10
COPY_SHARE = 0.8  # share of the output's words that are the source's, over COPY_WORDS words
COPY_WORDS = 4
FLAGS = ("copy", "loop", "short", "long")

# The (short, long) length bounds of a request's direction (mt.textstats): the stages that flag
# are given the translator's.
Bounds = Callable[[Request], tuple[float, float]]

_WORD = re.compile(r"\w+", re.UNICODE)
_RUN = re.compile(r"([^\W\d_])\1{4,}", re.UNICODE)  # a letter five times in a row


def confidence(tokens: int, score: float, beam: bool, alpha: float) -> float | None:
    """Log-probability per target token (EOS counted) of a hypothesis of `tokens` pieces whose
    search reported `score`: beam scores are divided by the length penalty, so it is undone."""
    if score != score or math.isinf(score):
        return None
    n = tokens + 1
    logprob = score * length_penalty(n, alpha) if beam else score
    return round(logprob / n, 4)


def _letters(text: str) -> str:
    """The text as its words in lower case: what `copy` compares."""
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def looped(words: Sequence[str], max_n: int = 4, times: int = 3) -> bool:
    """Whether some n-gram (n <= max_n) of `words` occurs `times` times in a row."""
    for n in range(1, max_n + 1):
        for i in range(len(words) - n * times + 1):
            gram = words[i : i + n]
            if all(words[i + k * n : i + (k + 1) * n] == gram for k in range(1, times)):
                return True
    return False


def flags(src: str, out: str, bounds: tuple[float, float] = (SHORT, LONG)) -> list[str]:
    """The doubt flags of translation `out` of `src` (in FLAGS' order; empty: none);
    `bounds`: the direction's (short, long) character ratios (mt.textstats)."""
    if not src.strip():
        return []
    found = []
    s, o = _letters(src), _letters(out)
    if o and o == s and any(c.isalpha() for c in s):
        found.append("copy")
    else:
        words, source = o.split(), set(s.split())
        if len(words) >= COPY_WORDS and sum(w in source for w in words) >= COPY_SHARE * len(words):
            found.append("copy")
    runs = {m.group(0)[0] for m in _RUN.finditer(out.casefold())}
    if looped(o.split()) or any(c * 5 not in src.casefold() for c in runs):
        found.append("loop")
    n_src, n_out = _chars(src), _chars(out)
    if n_src >= MIN_CHARS:
        if n_out < bounds[0] * n_src:
            found.append("short")
        elif n_out > bounds[1] * n_src + LONG_SLACK:
            found.append("long")
    return found


class DoubtCount:
    """Flags counted over a stream of translations: `mt eval`'s counts, `--max-doubt`'s gate."""

    def __init__(self) -> None:
        self.lines = 0
        self.flagged = 0
        self.by_flag: dict[str, int] = dict.fromkeys(FLAGS, 0)

    def add(self, flags_of_line: Sequence[str]) -> None:
        self.lines += 1
        self.flagged += bool(flags_of_line)
        for f in flags_of_line:
            self.by_flag[f] = self.by_flag.get(f, 0) + 1

    def watch(self, translations: Iterable[Any]) -> Iterator[Any]:
        """The translations, passed on as they come, each counted."""
        for t in translations:
            self.add(t.flags)
            yield t

    @property
    def share(self) -> float:
        return self.flagged / self.lines if self.lines else 0.0

    def summary(self) -> str:
        each = ", ".join(f"{f} {n}" for f, n in self.by_flag.items())
        return f"{self.flagged} of {self.lines} line(s) flagged as doubtful ({each})"

    def as_dict(self) -> dict[str, Any]:
        return {"lines": self.lines, "flagged": self.flagged, **self.by_flag}


def doubt_stage(beam: bool, alpha: float, bounds: Bounds) -> Stage:
    """The stage (mt.translation.stages) that marks each translation with its confidence and
    doubts; `beam` and `alpha` say how the search scored it (greedy/sampling: a plain sum),
    `bounds(request)` the length bounds of its direction."""

    def rounds(requests: list[Request]) -> Rounds:
        out = yield Ask(requests)
        for r, t in zip(requests, out):
            if t.hypotheses:
                best = t.hypotheses[0]
                t.confidence = confidence(len(best.tokens), best.score, beam, alpha)
            t.flags = flags(r.src, t.text, bounds(r)) if not t.error else []
        return out

    return rounds

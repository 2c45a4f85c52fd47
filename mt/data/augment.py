"""Robustness as data: a share of the training pairs in capitals, Title Case, without final
punctuation or with a typo, so the model learns the text people send (issue 42).

`data.augment` lists modifiers with the probability that a pair gets each (`uppercase:0.05`),
OpusTrainer's UpperCase, TitleCase, RemoveEndPunct and Typos modifiers in spirit; OpusTrainer
itself is not used: its 0.5 release pins sentencepiece 0.1.99, older than mt's. A pair gets
at most one modifier (drawn in the listed order), both sides changed consistently: the
casing and the final punctuation on both sides, a typo on the source only (the target stays
what a translation should be). Applied while the token stores are built, so training's hot
loop stays free of Python per token; the draws come from `seed` and each pair's position, so a
store built again is the same, and the store cache's key holds the settings.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from mt.config_rules import AUGMENT_MODIFIERS

_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_END = re.compile(r"\s*[.!?。！？]+\s*$")


@dataclass(frozen=True)
class Augment:
    rules: tuple[tuple[str, float], ...]  # (modifier, probability), in the config's order
    seed: int = 1

    @classmethod
    def from_config(cls, items: list[str], seed: int = 1) -> Augment | None:
        """`["uppercase:0.05", ...]` (checked by mt.config_rules.validate) -> Augment;
        None if empty."""
        if not items:
            return None
        rules = []
        for item in items:
            name, _, p = item.partition(":")
            rules.append((name.strip(), float(p)))
        return cls(tuple(rules), seed)

    def __str__(self) -> str:  # the store cache's key
        return "augment=" + ",".join(f"{n}:{p}" for n, p in self.rules) + f"@{self.seed}"

    def apply(self, src: list[str], tgt: list[str], first: int) -> tuple[list[str], list[str]]:
        """The pairs with their modifiers applied; `first` is the position of the first pair
        in the corpus (each pair's draw depends on its position only)."""
        out_src, out_tgt = list(src), list(tgt)
        for k in range(len(src)):
            rng = random.Random(self.seed * 1_000_003 + first + k)
            u, total = rng.random(), 0.0
            for name, p in self.rules:
                total += p
                if u < total:
                    out_src[k], out_tgt[k] = modify(name, src[k], tgt[k], rng)
                    break
        return out_src, out_tgt


def title(text: str) -> str:
    return _WORD.sub(lambda m: m.group(0)[:1].upper() + m.group(0)[1:], text)


def typo(text: str, rng: random.Random) -> str:
    """One slip in one word of 3+ letters: two letters swapped, one dropped or doubled."""
    words = [m for m in _WORD.finditer(text) if len(m.group(0)) >= 3]
    if not words:
        return text
    m = rng.choice(words)
    w, i = m.group(0), rng.randrange(len(m.group(0)) - 1)
    kind = rng.randrange(3)
    if kind == 0:
        w = w[:i] + w[i + 1] + w[i] + w[i + 2 :]
    elif kind == 1:
        w = w[:i] + w[i + 1 :]
    else:
        w = w[:i] + w[i] + w[i:]
    return text[: m.start()] + w + text[m.end() :]


def modify(name: str, src: str, tgt: str, rng: random.Random) -> tuple[str, str]:
    """One modifier on one pair."""
    if name == "uppercase":
        return src.upper(), tgt.upper()
    if name == "titlecase":
        return title(src), title(tgt)
    if name == "no_final_punct":
        if _END.search(src) and _END.search(tgt):
            return _END.sub("", src), _END.sub("", tgt)
        return src, tgt
    if name == "typos":
        return typo(src, rng), tgt
    raise ValueError(f"unknown modifier {name!r} (known: {', '.join(AUGMENT_MODIFIERS)})")

"""Terms learnt (`data.terms`): a share of the training lines annotated with target terms.

A line drawn for annotation (probability `share`, from the seed and the pair's position, as
mt.data.augment draws) gets between 1 and `max_terms` of its terms, the rarer likelier
(mt.glossary.lexicon: a source word, or a phrase of up to three whose neighbouring links are
joined with probability 1/2, and the lemma of the reference words that translate it) written
inline (mt.glossary.inline):

    Ein Hund rennt durch｟term｠ hohes Gras｟to｠ tall grass｟/term｠.

The target side is untouched: the model learns to copy the given term into its translation
and to inflect it as the sentence needs. A line without links, and the lines not drawn, stay as
they are, so the model still translates without annotations. Words inside a protected span
(a placeholder, tag or URL: mt.spans) are never annotated. Applied while the token stores are
built, after mt.data.augment and before `data.protect`'s masking; the draws depend on the seed
and the position only and the lexicon is fixed for the run, so a store built again is the same,
and the store cache's key holds the settings and the lexicon's digest.

The lexicon is learnt once per run on a uniform sample of the training pairs and kept in the
run directory (`terms.lexicon.tsv`, mt.data.prepare.prepare_terms), where a process that only
opens the stores finds it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from mt.glossary.inline import annotate
from mt.glossary.lexicon import Lexicon, phrases
from mt.spans import find_spans

LEXICON_FILE = "terms.lexicon.tsv"  # a run's term pairs, in its run directory
_SALT = 0x7E_5700_0000  # keeps these draws apart from data.augment's (same seed, same position)


@dataclass(frozen=True)
class Terms:
    lexicon: Lexicon
    share: float
    max_terms: int
    seed: int = 1
    mask: float = 0.0  # share of the annotated terms whose source words are left out

    def __str__(self) -> str:  # the store cache's key
        masked = f":mask{self.mask}" if self.mask else ""
        return f"terms={self.share}:{self.max_terms}{masked}:{self.lexicon.digest}@{self.seed}"

    def apply(self, src: list[str], tgt: list[str], first: int) -> list[str]:
        """The source lines with their drawn annotations; `first` is the position of the
        first pair in the corpus (each pair's draws depend on its position only)."""
        out = list(src)
        for k, (s, t) in enumerate(zip(src, tgt)):
            rng = random.Random(self.seed * 1_000_003 + first + k + _SALT)
            if rng.random() >= self.share:
                continue
            links = phrases(self.lexicon.links(s, t, _spans(s), _spans(t)), _coin(rng))
            if links:
                n = rng.randint(1, min(len(links), self.max_terms))
                # Rarer terms first (drawn with weight 1 / lines, Efraimidis and Spirakis
                # 2006): a frequent word the model translates anyway teaches no copying, a
                # rare one, as a glossary's terms are, does.
                keys = [rng.random() ** max(x.lines, 1) for x in links]
                drawn = sorted(range(len(links)), key=lambda i: -keys[i])[:n]
                chosen = sorted((links[i] for i in drawn), key=lambda x: x.start)
                # drawn only where asked for, so that stores without masking stay as they were
                masked = [rng.random() < self.mask for _ in chosen] if self.mask else []
                out[k] = annotate(s, [(x.start, x.end, x.target) for x in chosen], masked)
        return out


def _coin(rng: random.Random) -> Callable[[], bool]:
    """Whether neighbouring links are one term: drawn, so that the model sees a word alone
    and in phrases."""
    return lambda: rng.random() < 0.5


def _spans(text: str) -> list[tuple[int, int]]:
    return [(x.start, x.end) for x in find_spans(text)]

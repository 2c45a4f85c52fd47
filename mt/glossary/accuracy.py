"""Term accuracy: how many of a glossary's terms found in the sources their translations use.

`mt eval --glossary` reports it beside BLEU, as the WMT terminology tasks do (Alam et al.
2021; Semenov et al. 2023): of the terms found in a source line (found as the glossary stage
finds them: mt.translation.terms), the share whose target term the translation writes

- exact: as the glossary writes it (case aside), and
- lemma-matched: in any form of its words (`hounds` for `hound`), by the target language's
  stemmer (mt.glossary.words);

a term found twice in a source must be written twice. BLEU is split into the lines that hold a
term and those that hold none, because a glossary should move the first and leave the second
alone.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from mt.glossary import Glossary, uses
from mt.metrics import bleu
from mt.spans import find_spans


@dataclass
class TermAccuracy:
    terms: int  # term occurrences found in the sources
    lines: int  # source lines holding at least one
    exact: float  # % of `terms` their translation writes as the glossary does
    lemma: float  # % written in any form
    bleu_terms: float | None  # BLEU of the lines with terms (None: there are none)
    bleu_rest: float | None  # BLEU of the other lines

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)

    def summary(self) -> str:
        def b(x: float | None) -> str:
            return "-" if x is None else f"{x:.2f}"

        return (
            f"terms: {self.lemma:.1f}% lemma-matched, {self.exact:.1f}% exact, of {self.terms} "
            f"in {self.lines} lines; BLEU {b(self.bleu_terms)} on those lines, "
            f"{b(self.bleu_rest)} on the others"
        )


def line_hits(glossary: Glossary, src: str, out: str) -> tuple[int, int, int]:
    """(terms found in `src`, written exactly in `out`, written in some form)."""
    protected = [(s.start, s.end) for s in find_spans(src)]
    wanted = Counter(m.entry.tgt for m in glossary.find(src, protected))
    exact = lemma = 0
    for tgt, n in wanted.items():
        found = uses(tgt, out, glossary.tgt_lang)
        lemma += min(n, len(found))
        exact += min(n, sum(u.exact for u in found))
    return sum(wanted.values()), exact, lemma


def term_accuracy(
    glossary: Glossary, sources: list[str], outputs: list[str], refs: list[str] | None = None
) -> TermAccuracy:
    """Term accuracy of `outputs` (translations of `sources`); with `refs`, BLEU split into
    the lines with terms and without."""
    terms = exact = lemma = 0
    with_terms: list[int] = []
    for i, (src, out) in enumerate(zip(sources, outputs)):
        n, e, m = line_hits(glossary, src, out)
        terms, exact, lemma = terms + n, exact + e, lemma + m
        if n:
            with_terms.append(i)
    split: list[float | None] = [None, None]
    if refs is not None:
        has = set(with_terms)
        for k, rows in enumerate((with_terms, [i for i in range(len(outputs)) if i not in has])):
            if rows:
                split[k] = round(bleu([outputs[i] for i in rows], [refs[i] for i in rows]), 2)
    share = (lambda x: round(100 * x / terms, 2)) if terms else (lambda x: 100.0)
    return TermAccuracy(terms, len(with_terms), share(exact), share(lemma), split[0], split[1])

"""sacrebleu scores with their signatures, so numbers can be compared across papers and runs.

Scores are computed on detokenized text with sacrebleu's own tokenization (13a for BLEU).
Multi30k results are usually published lowercased, so that BLEU is reported as well.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import sacrebleu


@dataclass
class Scores:
    bleu: float
    bleu_lc: float
    chrf: float
    ter: float
    bleu_signature: str
    bleu_lc_signature: str
    chrf_signature: str
    ter_signature: str
    sentences: int

    def as_dict(self) -> dict[str, float | str | int]:
        return asdict(self)


def bleu(hyps: list[str], refs: list[str]) -> float:
    """Cased BLEU (13a), the number dev BLEU and checkpoint selection use."""
    return sacrebleu.corpus_bleu(hyps, [refs]).score


def chrf(hyps: list[str], refs: list[str]) -> float:
    """chrF (character n-gram F-score): moves with small improvements where BLEU is still 0."""
    return sacrebleu.corpus_chrf(hyps, [refs]).score


def score(hyps: list[str], refs: list[str]) -> Scores:
    if len(hyps) != len(refs):
        raise ValueError("hypotheses and references differ in length")
    m_bleu = sacrebleu.metrics.BLEU()
    m_lc = sacrebleu.metrics.BLEU(lowercase=True)
    m_chrf = sacrebleu.metrics.CHRF()
    m_ter = sacrebleu.metrics.TER()
    r = [refs]
    return Scores(
        bleu=m_bleu.corpus_score(hyps, r).score,
        bleu_lc=m_lc.corpus_score(hyps, r).score,
        chrf=m_chrf.corpus_score(hyps, r).score,
        ter=m_ter.corpus_score(hyps, r).score,
        bleu_signature=str(m_bleu.get_signature()),
        bleu_lc_signature=str(m_lc.get_signature()),
        chrf_signature=str(m_chrf.get_signature()),
        ter_signature=str(m_ter.get_signature()),
        sentences=len(hyps),
    )


def format_scores(s: Scores) -> str:
    return "\n".join(
        [
            f"BLEU    {s.bleu:6.2f}  {s.bleu_signature}",
            f"BLEU-lc {s.bleu_lc:6.2f}  {s.bleu_lc_signature}",
            f"chrF    {s.chrf:6.2f}  {s.chrf_signature}",
            f"TER     {s.ter:6.2f}  {s.ter_signature}",
        ]
    )

"""The steps around search that a request's text may need, put together in one order.

Capitals outermost (mt.decode.casing: the guard and the search see the line in its usual
case), then the number guard (mt.decode.numbers), then the translator's own `translate`
(protection, doubt flags). Sentence splitting (mt.decode.sentences) takes the result as its
`translate`, so each sentence of a paragraph is recased and guarded on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from mt.decode.casing import recased
from mt.decode.numbers import guarded
from mt.decode.requests import Request
from mt.decode.translator import Translation, Translator
from mt.tokenizer import Tokenizer


def spelling_cost(tokenizer: Tokenizer) -> Callable[[str], tuple[int, float]]:
    """How unusual a spelling of a word is to the source tokenizer: its number of pieces,
    then minus their sentencepiece scores (log-probabilities of a unigram model)."""
    sp = getattr(tokenizer, "src", None)

    @lru_cache(maxsize=1 << 16)
    def cost(word: str) -> tuple[int, float]:
        if sp is None:  # a tokenizer without sentencepiece scores: the pieces alone
            return len(tokenizer.src_pieces(word)), 0.0
        ids = sp.encode(word)
        return len(ids), -sum(sp.get_score(i) for i in ids)

    return cost


def text_steps(
    translator: Translator, recase: bool = True, keep_numbers: bool = False
) -> Callable[[list[Request]], list[Translation]]:
    """`translator.translate` with the chosen steps around it."""
    translate = guarded(translator) if keep_numbers else translator.translate
    if recase:
        translate = recased(translate, spelling_cost(translator.tokenizer))
    return translate

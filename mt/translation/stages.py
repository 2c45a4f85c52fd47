"""The steps around search, and the one loop that runs them.

A stage is a generator function of the requests it is given: it rewrites them, `yield`s an
`Ask` (the requests it wants translated by the stages below it, and finally by search), is sent
back their translations, may ask again (the number guard retries, the pivot asks twice), and
returns one translation per request it was given. So a stage never holds the translator, nor
calls into it: `run` passes the rounds down, and the translator (mt.translation.translator) picks
the stages a request's `Plan` names. Which stage does what:

- mt.translation.sentences: a paragraph sentence by sentence (outermost: each sentence recased and
  guarded on its own);
- mt.translation.casing: ALL-CAPS and Title Case lines translated in their usual case;
- mt.translation.number_guard: a line that lost a number translated again, its numbers masked;
- mt.translation.pivot: src -> pivot -> target with one multilingual model;
- mt.translation.doubt (`doubt_stage`): confidence and doubt flags of each translation;
- mt.translation.protect: spans kept exactly as written (innermost: it asks for plain search,
  search with alignments, or search allowed the source's own spans);
- mt.translation.html_input: an HTML fragment's text translated, its tags put back.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from functools import lru_cache

from mt.tokenizer import Tokenizer
from mt.translation.requests import Request, Translation, isolated

Translate = Callable[[list[Request]], list[Translation]]
SearchRound = Callable[[list[Request], bool], list[Translation]]  # requests, alignment


@dataclass
class Ask:
    """One round a stage asks for: `requests` through the stages below it."""

    requests: list[Request]
    alignment: bool = False  # straight to search, with alignments (placing spans needs them)
    isolate: bool = False  # a bug in one request costs its own output only (`isolated`)


Rounds = Generator[Ask, list[Translation], list[Translation]]
Stage = Callable[[list[Request]], Rounds]


def run(stages: list[Stage], requests: list[Request], search: SearchRound) -> list[Translation]:
    """`requests` through `stages` (outermost first), each round down to `search`."""
    if not stages:
        return search(requests, False)
    rounds = stages[0](requests)
    below: Translate = lambda xs: run(stages[1:], xs, search)  # noqa: E731
    try:
        ask = next(rounds)
        while True:
            if ask.alignment:
                done = search(ask.requests, True)
            elif ask.isolate:
                done = isolated(below, ask.requests) if ask.requests else []
            else:
                done = below(ask.requests)
            ask = rounds.send(done)
    except StopIteration as stop:
        return stop.value


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

"""The step-rule protocol (mt/search/rules.py): a rule written outside the search reaches
every search, a ban keeps the model's scores, a support renormalises them, and the rules a
search builds from its settings (prefix, no-repeat-ngram) behave as rules."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from support.copier import FIRST, V, make_model, random_sentences

from mt.batching import pad
from mt.config import DecodeConfig
from mt.search.beam import beam_search, greedy_search
from mt.search.constrained import constrained_beam_search
from mt.search.rules import Columns, Prefixes, Restriction, Step, step_rules
from mt.search.steps import Sampling
from mt.tokenizer import EOS

CFG = DecodeConfig(beam=3, alpha=0.6, max_len_a=1.5, max_len_b=4, nbest=3)


class BanToken:
    """An outside rule: one token never written; counts the steps it was asked."""

    reads_history = False

    def __init__(self, token: int) -> None:
        self.mask = Columns(torch.tensor([token]))
        self.asked = 0

    def restrict(self, step: Step) -> Restriction:
        self.asked += 1
        return Restriction(ban=self.mask)


class SupportOnly:
    """An outside rule: the distribution over `allowed` tokens (and EOS) only."""

    reads_history = False

    def __init__(self, allowed: list[int]) -> None:
        banned = torch.ones(V, dtype=torch.bool)
        banned[allowed + [EOS]] = False
        self.mask = Columns.of(banned)

    def restrict(self, step: Step) -> Restriction:
        return Restriction(support=self.mask)


@pytest.fixture(scope="module")
def model():
    return make_model(3)


def src_batch() -> torch.Tensor:
    return pad([s + [EOS] for s in random_sentences(6, seed=5)])


def most_written(hyps) -> int:
    counts = torch.bincount(torch.tensor([t for h in hyps for t in h.tokens]), minlength=V)
    return int(counts[FIRST:].argmax()) + FIRST


@pytest.mark.parametrize("path", ["greedy", "sample", "beam", "constrained"])
def test_an_outside_ban_reaches_every_search(model, path) -> None:
    src = src_batch()

    def run(rules):
        if path == "greedy":
            return greedy_search(model, src, CFG, rules=rules)
        if path == "sample":
            sampling = Sampling(generator=torch.Generator().manual_seed(0))
            return greedy_search(model, src, CFG, sampling=sampling, rules=rules)
        if path == "beam":
            return [h for hs in beam_search(model, src, CFG, rules=rules) for h in hs]
        one = dataclasses.replace(CFG, nbest=1)
        phrases = [[[FIRST]] for _ in range(len(src))]
        return [hs[0] for hs in constrained_beam_search(model, src, phrases, one, rules=rules)]

    free = run([])
    token = most_written(free) if path != "constrained" else FIRST + 1
    assert any(token in h.tokens for h in free)  # the property is not empty
    rule = BanToken(token)
    banned = run([rule])
    assert rule.asked > 0
    assert all(token not in h.tokens for h in banned)


def test_a_ban_keeps_the_model_scores_and_a_support_renormalises(model) -> None:
    """The same single forced path scored under a ban of another token and under a support
    that leaves out tokens: the ban's score is the free one's, the support's is higher (its
    probabilities are over fewer tokens)."""
    src = src_batch()[:1]
    free = greedy_search(model, src, CFG)[0]
    written = set(free.tokens)
    unused = next(t for t in range(FIRST, V) if t not in written)
    banned = greedy_search(model, src, CFG, rules=[BanToken(unused)])[0]
    assert banned.tokens == free.tokens and banned.score == pytest.approx(free.score)
    supported = greedy_search(model, src, CFG, rules=[SupportOnly(sorted(written))])[0]
    assert supported.tokens == free.tokens
    assert supported.score > free.score


def test_gathered_rules_force_and_ban() -> None:
    prefixes = Prefixes([[7, 8], [9]], 2, torch.device("cpu"))
    step = Step(1, torch.tensor([0, 1]), torch.zeros(2, 1, dtype=torch.long))
    said = step_rules([prefixes, BanToken(5)], step)
    assert said.forced is not None and said.forced.tolist() == [8, -1]
    logits = torch.zeros(2, V)
    said.ban(logits)
    assert torch.isinf(logits[:, 5]).all() and torch.isfinite(logits[:, 6]).all()
    assert step_rules([prefixes], Step(2, torch.tensor([0, 1]), torch.zeros(2, 2))).forced is None

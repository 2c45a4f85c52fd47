"""Target prefixes, no-repeat-ngram and sampling in greedy and beam search (tiny models)."""

from __future__ import annotations

import pytest
import torch
from support.copier import FIRST, V, make_model, sequence_logp, sources, train_copier

from mt.config import DecodeConfig
from mt.search.beam import beam_search, greedy_search
from mt.search.rules import repeated_ngram_bans
from mt.search.steps import Sampling, length_penalty
from mt.tokenizer import BOS, PAD

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def copier():
    return train_copier()


def ngrams(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def test_repeated_ngram_bans_by_hand():
    history = torch.tensor([[5, 6, 7, 5, 6], [5, 6, 7, 8, 9]])
    bans = repeated_ngram_bans(history, 3)  # context (5, 6) occurred before in row 0: then 7
    assert bans[0].tolist() == [7, PAD, PAD]
    assert bans[1].tolist() == [PAD, PAD, PAD]
    assert repeated_ngram_bans(history, 1).tolist() == history.tolist()
    assert repeated_ngram_bans(history[:, :2], 3) is None  # too short to repeat anything


@pytest.mark.parametrize("beam", [1, 4])
def test_output_starts_with_the_prefix_and_scores_it(copier, beam):
    sents, src = sources(6, seed=21)
    # Prefixes the model would not produce: the reversed source, cut to 1-3 tokens.
    prefixes = [list(reversed(s))[: 1 + i % 3] for i, s in enumerate(sents)]
    if beam == 1:
        hyps = [
            [h]
            for h in greedy_search(
                copier, src, DecodeConfig(max_len_a=1.0, max_len_b=4), prefixes=prefixes
            )
        ]
    else:
        hyps = beam_search(
            copier,
            src,
            DecodeConfig(beam=beam, alpha=0.6, max_len_a=1.0, max_len_b=4, nbest=2),
            prefixes=prefixes,
        )
    for i, (p, hs) in enumerate(zip(prefixes, hyps)):
        assert hs, i
        for h in hs:
            assert h.tokens[: len(p)] == p
            assert len(h.tokens) > len(p) or h.tokens == p
            logp = sequence_logp(copier, src[i], h.tokens)
            norm = 1.0 if beam == 1 else length_penalty(len(h.tokens) + 1, 0.6)
            assert h.score == pytest.approx(logp / norm, abs=1e-4)


def test_empty_prefixes_change_nothing(copier):
    _, src = sources(6, seed=22)
    plain = beam_search(
        copier, src, DecodeConfig(beam=4, alpha=0.6, max_len_a=1.0, max_len_b=4, nbest=2)
    )
    empty = beam_search(
        copier,
        src,
        DecodeConfig(beam=4, alpha=0.6, max_len_a=1.0, max_len_b=4, nbest=2),
        prefixes=[[] for _ in range(6)],
    )
    assert [[h.tokens for h in hs] for hs in plain] == [[h.tokens for h in hs] for hs in empty]


def test_a_prefix_gets_room_after_it(copier):
    sents, src = sources(4, seed=23)
    prefixes = [[FIRST] * 12 for _ in sents]  # longer than the source allows (a=1, b=2)
    for h in greedy_search(
        copier, src, DecodeConfig(max_len_a=1.0, max_len_b=2), prefixes=prefixes
    ):
        assert h.tokens[:12] == [FIRST] * 12


@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_repeat_ngram_holds_in_every_hypothesis(n):
    model = make_model(5)  # untrained: repeats tokens freely
    _, src = sources(8, seed=24)
    before = greedy_search(model, src, DecodeConfig(max_len_a=2.0, max_len_b=6))
    assert any(len(set(ngrams(h.tokens, n))) < len(ngrams(h.tokens, n)) for h in before)
    greedy = [
        [h]
        for h in greedy_search(
            model, src, DecodeConfig(max_len_a=2.0, max_len_b=6, no_repeat_ngram=n)
        )
    ]
    beams = beam_search(
        model,
        src,
        DecodeConfig(beam=4, alpha=0.6, max_len_a=2.0, max_len_b=6, nbest=3, no_repeat_ngram=n),
    )
    for hs in greedy + beams:
        for h in hs:
            grams = ngrams(h.tokens, n)
            assert len(set(grams)) == len(grams), (n, h.tokens)


def sample(model, src, seed: int, **kw) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    hyps = greedy_search(
        model, src, DecodeConfig(max_len_a=1.5, max_len_b=4), sampling=Sampling(generator=g, **kw)
    )
    return [h.tokens for h in hyps]


def test_sampling_is_reproducible_and_varies_with_the_seed(copier):
    _, src = sources(16, seed=25)
    a = sample(copier, src, 1, temperature=3.0)
    assert a == sample(copier, src, 1, temperature=3.0)
    assert a != sample(copier, src, 2, temperature=3.0)


def test_sampling_at_its_narrowest_is_greedy(copier):
    _, src = sources(10, seed=26)
    greedy = [
        h.tokens for h in greedy_search(copier, src, DecodeConfig(max_len_a=1.5, max_len_b=4))
    ]
    assert sample(copier, src, 3, topk=1) == greedy
    assert sample(copier, src, 4, topp=1e-6) == greedy
    assert sample(copier, src, 5, temperature=1e-4) == greedy


def test_topk_draws_only_among_the_k_best(copier):
    """Every drawn token is among the k most probable at its step (checked by forced decoding)."""
    _, src = sources(12, seed=27)
    g = torch.Generator().manual_seed(6)
    hyps = greedy_search(
        copier,
        src,
        DecodeConfig(max_len_a=1.5, max_len_b=4),
        sampling=Sampling(topk=2, temperature=5.0, generator=g),
    )
    for i, h in enumerate(hyps):
        row = src[i : i + 1, : int(src[i].ne(PAD).sum())]
        with torch.no_grad():
            logits = copier(row, torch.tensor([[BOS] + h.tokens]))[0]
        logits[:, PAD] = float("-inf")
        logits[:, BOS] = float("-inf")
        top2 = logits.topk(2, dim=-1).indices
        for t, tok in enumerate(h.tokens):
            assert tok in top2[t].tolist(), (i, t)
        assert h.score == pytest.approx(sequence_logp(copier, src[i], h.tokens), abs=1e-4)


def test_sampling_spreads_over_outputs(copier):
    """High temperature: many distinct outputs for one sentence over seeds."""
    _, src = sources(1, seed=28)
    outs = {tuple(sample(copier, src, seed, temperature=2.0)[0]) for seed in range(20)}
    assert len(outs) >= 5
    assert all(0 <= t < V for out in outs for t in out)

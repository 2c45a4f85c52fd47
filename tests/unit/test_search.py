"""Greedy and beam search on a tiny Transformer: agreement, scores, limits, batch independence."""

from __future__ import annotations

import pytest
import torch
from support.copier import (
    make_model,
    sequence_logp,
    sources,
    train_copier,
)

from mt.batching import pad
from mt.config import DecodeConfig
from mt.model import Transformer
from mt.search.beam import beam_search, greedy_search
from mt.search.steps import length_penalty, log_softmax_, max_lengths, row_topk
from mt.tokenizer import BOS, EOS, PAD


@pytest.fixture(scope="module")
def untrained() -> Transformer:
    return make_model()


@pytest.fixture(scope="module")
def copier() -> Transformer:
    return train_copier()


def test_copier_learned_the_task(copier):
    sents, src = sources(20, seed=99)
    hyps = greedy_search(copier, src, DecodeConfig(max_len_a=1.0, max_len_b=5))
    correct = sum(h.tokens == s for h, s in zip(hyps, sents))
    assert correct >= 12


@pytest.mark.parametrize("which", ["untrained", "copier"])
def test_beam_one_equals_greedy(which, request):
    model = request.getfixturevalue(which)
    _, src = sources(10, seed=3)
    greedy = greedy_search(model, src, DecodeConfig(max_len_a=1.5, max_len_b=4), alignment=True)
    beam = beam_search(
        model, src, DecodeConfig(beam=1, alpha=0.0, max_len_a=1.5, max_len_b=4), alignment=True
    )
    assert len(beam) == len(greedy) == 10
    for g, b in zip(greedy, beam):
        assert len(b) == 1
        assert b[0].tokens == g.tokens
        assert b[0].alignment == g.alignment
        assert b[0].score == pytest.approx(g.score, abs=1e-4)  # alpha 0: no length penalty


def test_greedy_score_is_the_sequence_logp(untrained):
    _, src = sources(4, seed=11)
    for i, h in enumerate(greedy_search(untrained, src, DecodeConfig(max_len_a=1.0, max_len_b=3))):
        assert h.score == pytest.approx(sequence_logp(untrained, src[i], h.tokens), abs=1e-4)


@pytest.mark.parametrize("which", ["copier", "untrained"])
def test_unscored_greedy_gives_the_same_tokens(which, request):
    model = request.getfixturevalue(which)
    _, src = sources(8, seed=12)
    scored = greedy_search(model, src, DecodeConfig(max_len_a=1.0, max_len_b=3), alignment=True)
    plain = greedy_search(
        model, src, DecodeConfig(max_len_a=1.0, max_len_b=3), alignment=True, with_scores=False
    )
    assert [h.tokens for h in plain] == [h.tokens for h in scored]
    assert [h.alignment for h in plain] == [h.alignment for h in scored]
    assert all(h.score != h.score for h in plain)  # NaN: not computed


def test_nbest_sorted_distinct_and_scored(copier):
    _, src = sources(6, seed=5)
    alpha = 0.6
    results = beam_search(
        copier, src, DecodeConfig(beam=4, alpha=alpha, max_len_a=1.0, max_len_b=3, nbest=3)
    )
    assert len(results) == 6
    for i, hyps in enumerate(results):
        assert len(hyps) == 3
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == 3
        for h in hyps:
            assert EOS not in h.tokens and BOS not in h.tokens and PAD not in h.tokens
            lp = length_penalty(len(h.tokens) + 1, alpha)
            expected = sequence_logp(copier, src[i], h.tokens) / lp
            assert h.score == pytest.approx(expected, abs=1e-4)


def test_beam_finds_at_least_the_greedy_score(copier):
    _, src = sources(8, seed=21)
    greedy = greedy_search(copier, src, DecodeConfig(max_len_a=1.0, max_len_b=3))
    beam = beam_search(copier, src, DecodeConfig(beam=5, alpha=0.0, max_len_a=1.0, max_len_b=3))
    for g, b in zip(greedy, beam):
        assert b[0].score >= g.score - 1e-5


def test_length_penalty():
    assert length_penalty(1, 0.0) == 1.0
    assert length_penalty(7, 1.0) == pytest.approx(2.0)
    assert length_penalty(7, 0.5) == pytest.approx(2.0**0.5)


def test_max_lengths_formula():
    src = pad([[5, 6, 7, EOS], [5, EOS], [EOS]])
    assert max_lengths(src, 1.5, 2, limit=100).tolist() == [8, 5, 3]  # floor(1.5 * len + 2)
    assert max_lengths(src, 0.0, 0, limit=100).tolist() == [1, 1, 1]  # at least one token
    assert max_lengths(src, 10.0, 0, limit=20).tolist() == [19, 19, 10]  # within positions


@pytest.mark.parametrize("which", ["untrained", "copier"])
def test_output_length_limit(which, request):
    model = request.getfixturevalue(which)
    sents, src = sources(8, seed=4)
    a, b = 0.5, 1
    limits = [int(a * (len(s) + 1) + b) for s in sents]
    greedy = greedy_search(model, src, DecodeConfig(max_len_a=a, max_len_b=b))
    beam = beam_search(
        model, src, DecodeConfig(beam=3, alpha=0.6, max_len_a=a, max_len_b=b, nbest=3)
    )
    for limit, g, hyps in zip(limits, greedy, beam):
        assert len(g.tokens) <= limit
        assert hyps and all(len(h.tokens) <= limit for h in hyps)
    if which == "copier":  # a copy is longer than the limit, so the limit is what stops it
        assert [len(g.tokens) for g in greedy] == limits


def test_untrained_model_runs_to_the_limit_or_stops():
    # With no training, sentences finish at different steps; all must come back, in order.
    model = make_model(3)
    _, src = sources(12, seed=8)
    hyps = greedy_search(model, src, DecodeConfig(max_len_a=2.0, max_len_b=5))
    assert len(hyps) == 12
    limits = max_lengths(src, 2.0, 5, 64).tolist()
    assert all(len(h.tokens) <= n for h, n in zip(hyps, limits))


@pytest.mark.parametrize("beam", [1, 3])
def test_results_do_not_depend_on_the_batch(copier, untrained, beam):
    sents, src = sources(7, seed=13)
    for model in (copier, untrained):
        together = beam_search(
            model, src, DecodeConfig(beam=beam, alpha=0.6, max_len_a=1.2, max_len_b=3, nbest=beam)
        )
        together_greedy = greedy_search(model, src, DecodeConfig(max_len_a=1.2, max_len_b=3))
        for i, s in enumerate(sents):
            alone_src = torch.tensor([s + [EOS]])
            alone = beam_search(
                model,
                alone_src,
                DecodeConfig(beam=beam, alpha=0.6, max_len_a=1.2, max_len_b=3, nbest=beam),
            )[0]
            assert [h.tokens for h in alone] == [h.tokens for h in together[i]]
            for x, y in zip(alone, together[i]):
                assert x.score == pytest.approx(y.score, abs=1e-4)
            assert (
                greedy_search(model, alone_src, DecodeConfig(max_len_a=1.2, max_len_b=3))[0].tokens
                == together_greedy[i].tokens
            )
        # The same sentences in reverse order give the same outputs, reversed.
        flipped = beam_search(
            model,
            src.flip(0),
            DecodeConfig(beam=beam, alpha=0.6, max_len_a=1.2, max_len_b=3, nbest=beam),
        )
        assert [[h.tokens for h in r] for r in flipped[::-1]] == [
            [h.tokens for h in r] for r in together
        ]


def test_alignment_points_into_the_source(copier):
    sents, src = sources(5, seed=17)
    for hyps in beam_search(
        copier, src, DecodeConfig(beam=3, alpha=0.6, max_len_a=1.0, max_len_b=3), alignment=True
    ):
        h = hyps[0]
        assert len(h.alignment) == len(h.tokens)
        assert all(0 <= a < src.size(1) for a in h.alignment)
    for h in greedy_search(copier, src, DecodeConfig(max_len_a=1.0, max_len_b=3)):
        assert h.alignment == []  # only computed when asked for


@pytest.mark.parametrize("width", [100, 640, 8000, 8003])
@pytest.mark.parametrize("k", [1, 10])
def test_row_topk_matches_topk(width, k):
    g = torch.Generator().manual_seed(width + k)
    x = torch.randn(37, width, generator=g)
    x[:, :2] = float("-inf")  # masked columns, as search masks PAD and BOS
    x[3] = 0.5  # a row of ties
    x[4, -1] = 100.0  # the winner in the tail after the last whole block
    ints = torch.randint(0, 5, (width,), generator=g).float()
    x[5] = ints  # many ties across blocks
    top, idx = row_topk(x, k)
    want, _ = x.topk(k, dim=-1)
    assert torch.equal(top, want)
    assert torch.equal(x.gather(1, idx), top)
    assert all(len(set(r)) == k for r in idx.tolist())  # k distinct columns per row
    assert idx[4, 0] == width - 1


def test_log_softmax_in_place_equals_log_softmax():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(19, 5003, generator=g) * 8
    x[2, :7] = float("-inf")  # a masked stretch
    x[5] = 0.25  # a flat row
    want = torch.log_softmax(x, dim=-1)
    out = log_softmax_(x)
    assert out.data_ptr() == x.data_ptr()  # written over the logits, no new tensor
    assert torch.equal(x, want)  # bit for bit: search's ties and HF parity depend on it


def count_rows(model: Transformer) -> list[int]:
    """Wrap `model.step_hidden` on the instance to count the decoder rows fed."""
    fed = [0]
    inner = model.step_hidden

    def counting(tokens, state, need_weights=False):
        fed[0] += tokens.numel()
        return inner(tokens, state, need_weights)

    model.step_hidden = counting
    return fed


def test_stop_early_feeds_fewer_rows_and_scores_what_it_returns():
    model = train_copier()  # its own instance: the row counter wraps a method
    fed = count_rows(model)
    _, src = sources(24, seed=31)
    full = beam_search(model, src, DecodeConfig(beam=4, alpha=0.6, max_len_a=1.5, max_len_b=4))
    rows_full, fed[0] = fed[0], 0
    early = beam_search(
        model,
        src,
        DecodeConfig(beam=4, alpha=0.6, max_len_a=1.5, max_len_b=4, nbest=2, stop_early=True),
    )
    assert fed[0] < rows_full
    for i, hyps in enumerate(early):
        assert len(hyps) >= 1
        for h in hyps:
            lp = length_penalty(len(h.tokens) + 1, 0.6)
            assert h.score == pytest.approx(sequence_logp(model, src[i], h.tokens) / lp, abs=1e-4)
    # Most sentences agree with the full search: it only stops waiting for longer ones.
    same = sum(a[0].tokens == b[0].tokens for a, b in zip(full, early))
    assert same >= 20


def test_stop_early_with_one_beam_is_greedy(copier):
    _, src = sources(10, seed=33)
    greedy = greedy_search(copier, src, DecodeConfig(max_len_a=1.5, max_len_b=4))
    early = beam_search(
        copier, src, DecodeConfig(beam=1, alpha=0.0, max_len_a=1.5, max_len_b=4, stop_early=True)
    )
    assert [b[0].tokens for b in early] == [g.tokens for g in greedy]

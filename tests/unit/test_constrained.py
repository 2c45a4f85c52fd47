"""Lexically constrained beam search on a tiny model trained on Multi30k: every phrase is in the
output, scores are the forced-decoding log-probabilities, unconstrained rows are beam search's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from mt.batching import pad
from mt.checkpoint import Loaded, load_model
from mt.config import DecodeConfig
from mt.data.corpus import read_lines
from mt.search.beam import beam_search
from mt.search.constrained import constrained_beam_search
from mt.search.phrases import advance, banks, phrase_ids, phrase_tensors, word_edges
from mt.search.steps import length_penalty, max_lengths
from mt.tokenizer import BOS, EOS, PAD, Tokenizer

N_SENTENCES = 50
BEAM, ALPHA = 4, 0.6


@dataclass
class Sample:
    src: torch.Tensor  # (N, S) padded source ids
    refs: list[str]


@pytest.fixture(scope="module")
def tiny(tiny_run: Path) -> Loaded:
    return load_model(tiny_run / "last.pt", "cpu")


@pytest.fixture(scope="module")
def sample(tiny: Loaded, multi30k_dir: Path) -> Sample:
    src = read_lines(multi30k_dir / "test_2016_flickr.de.gz")[:N_SENTENCES]
    refs = read_lines(multi30k_dir / "test_2016_flickr.en.gz")[:N_SENTENCES]
    return Sample(pad(tiny.tokenizer.encode_src(src)), refs)


def inner_words(ref: str) -> list[str]:
    """Words of a reference with a space on both sides (no punctuation glued to them), longest
    first and without repeats: the terms a user would ask for."""
    words = ref.split()[1:-1]
    seen = [w for i, w in enumerate(words) if re.fullmatch(r"[A-Za-z]+", w) and w not in words[:i]]
    return sorted(seen, key=len, reverse=True)


def contains(seq: list[int], part: list[int]) -> bool:
    return any(seq[i : i + len(part)] == part for i in range(len(seq) - len(part) + 1))


def forced_score(model, src_row: torch.Tensor, tokens: list[int], alpha: float) -> float:
    """Teacher-forced log-probability of `tokens` + EOS over the GNMT penalty, as beam search
    scores a finished hypothesis."""
    src = src_row[src_row.ne(PAD)][None]
    tgt_in = torch.tensor([[BOS, *tokens]])
    gold = torch.tensor([tokens + [EOS]])
    with torch.no_grad():
        logp = torch.log_softmax(model(src, tgt_in).float(), dim=-1)
    total = logp.gather(2, gold[:, :, None]).sum().item()
    return total / length_penalty(len(tokens) + 1, alpha)


def test_phrase_ids_are_the_pieces_inside_a_sentence(tiny: Loaded, sample: Sample):
    tok: Tokenizer = tiny.tokenizer
    checked = 0
    for ref in sample.refs:
        ids = tok.encode_tgt([ref])[0]
        for word in inner_words(ref):
            assert contains(ids, phrase_ids(tok, word)), word
            checked += 1
    assert checked > 200
    assert phrase_ids(tok, "  ") == []
    two = phrase_ids(tok, "red  hat ")  # extra spaces are normalised away, as in a sentence
    assert two == phrase_ids(tok, "red") + phrase_ids(tok, "hat")
    assert tok.tgt_pieces(two)[0].startswith("\u2581")  # word-initial


def test_tracker_by_hand():
    # Phrases [10 11] and [12]; a row fed 10 10 11 12 meets both, fed 10 12 11 only [12].
    phrases, lengths = phrase_tensors([[[10, 11], [12]]], torch.device("cpu"))
    prog = torch.zeros(1, 2, dtype=torch.long)
    met = lengths.eq(0)
    seen = []
    for t in (10, 10, 11, 12):
        p, m = advance(prog, met, phrases, lengths, torch.tensor([[t]]))
        prog, met = p[:, 0], m[:, 0]
        seen.append((prog[0].tolist(), met[0].tolist(), int(banks(prog, met, lengths)[0])))
    assert seen == [
        ([1, 0], [False, False], 1),
        ([1, 0], [False, False], 1),  # the second 10 breaks the run and starts it again
        ([0, 0], [True, False], 2),
        ([0, 0], [True, True], 3),
    ]
    # Several candidates at once (R=1, M=3), from a row that is half-way through [10 11].
    p, m = advance(
        torch.tensor([[1, 0]]), torch.tensor([[False, False]]), phrases, lengths,
        torch.tensor([[11, 12, 13]]),
    )  # fmt: skip
    assert p[0].tolist() == [[0, 0], [0, 0], [0, 0]]
    assert m[0].tolist() == [[True, False], [False, True], [False, False]]  # 12 breaks [10 11]


def test_an_empty_slot_is_met_and_bad_ids_are_refused(tiny: Loaded, sample: Sample):
    _, lengths = phrase_tensors([[], [[5, 6]]], torch.device("cpu"))
    assert lengths.tolist() == [[0], [2]]
    with pytest.raises(ValueError, match="PAD/BOS/EOS"):
        phrase_tensors([[[5, EOS]]], torch.device("cpu"))
    with pytest.raises(ValueError, match="constraint lists"):
        constrained_beam_search(
            tiny.model,
            sample.src[:2],
            [[]],
            DecodeConfig(beam=BEAM, alpha=ALPHA, max_len_a=1.2, max_len_b=10),
        )


@pytest.mark.parametrize("per_sentence", [1, 2])
def test_every_phrase_is_in_every_output(tiny: Loaded, sample: Sample, per_sentence: int):
    tok, model, dcfg = tiny.tokenizer, tiny.model, tiny.cfg.decode
    words = [inner_words(ref)[:per_sentence] for ref in sample.refs]
    assert all(len(w) == per_sentence for w in words)
    cons = [[phrase_ids(tok, w) for w in ws] for ws in words]
    a, b = dcfg.max_len_a, dcfg.max_len_b
    results = constrained_beam_search(
        model,
        sample.src,
        cons,
        DecodeConfig(beam=BEAM, alpha=ALPHA, max_len_a=a, max_len_b=b, nbest=2),
    )
    limits = max_lengths(sample.src, a, b, model.cfg.max_positions)
    for i, hyps in enumerate(results):
        assert len(hyps) == 2
        text = tok.decode_tgt(hyps[0].tokens)
        for ids, word in zip(cons[i], words[i]):
            assert contains(hyps[0].tokens, ids), (word, tok.tgt_pieces(hyps[0].tokens))
            assert word in text
        # A second best that misses a phrase is one the length limit ended (the tiny model
        # babbles); hypotheses that meet more phrases come first.
        n_met = [sum(contains(h.tokens, c) for c in cons[i]) for h in hyps]
        assert n_met == sorted(n_met, reverse=True)
        if n_met[1] < per_sentence:
            assert len(hyps[1].tokens) == max(int(limits[i]), sum(map(len, cons[i])) + b)
        elif n_met == [per_sentence] * 2:
            assert hyps[0].score >= hyps[1].score
        for h in hyps:
            assert len(h.tokens) <= max(int(limits[i]), sum(map(len, cons[i])) + b)
            assert not {PAD, BOS, EOS} & set(h.tokens)
            expected = forced_score(model, sample.src[i], h.tokens, ALPHA)
            assert h.score == pytest.approx(expected, abs=1e-4)


def test_a_phrase_ending_in_a_letter_ends_a_word_given_the_edges(tiny: Loaded, sample: Sample):
    tok, model, dcfg = tiny.tokenizer, tiny.model, tiny.cfg.decode
    edges = word_edges(tok, torch.device("cpu"))
    pieces = tok.tgt_pieces(list(range(tok.tgt_vocab_size)))
    assert all(edges.glue[i] == (not p.startswith("\u2581") and p[:1].isalnum())
               for i, p in enumerate(pieces))  # fmt: skip
    cfg = DecodeConfig(beam=BEAM, alpha=ALPHA, max_len_a=dcfg.max_len_a, max_len_b=dcfg.max_len_b)
    words = [inner_words(ref)[:2] for ref in sample.refs]
    cons = [[phrase_ids(tok, w) for w in ws] for ws in words]

    def glued(results) -> int:  # noqa: ANN001
        n = 0
        for i, hyps in enumerate(results):
            t = hyps[0].tokens
            for c in cons[i]:
                for j in range(len(t) - len(c)):
                    n += t[j : j + len(c)] == c and bool(edges.glue[t[j + len(c)]])
        return n

    free = constrained_beam_search(model, sample.src, cons, cfg)
    bound = constrained_beam_search(model, sample.src, cons, cfg, edges=edges)
    assert glued(free) > 0  # the tiny model glues pieces to a forced word now and then
    assert glued(bound) == 0
    for i, hyps in enumerate(bound):
        text = tok.decode_tgt(hyps[0].tokens)
        assert all(re.search(rf"\b{w}\b", text) for w in words[i]), (words[i], text)


def test_unconstrained_rows_are_beam_search_in_a_mixed_batch(tiny: Loaded, sample: Sample):
    tok, model = tiny.tokenizer, tiny.model
    src = sample.src[:24]
    # Rows cycle through no constraint, one, two, and an explicitly empty phrase.
    cons: list[list[list[int]]] = []
    for i, ref in enumerate(sample.refs[:24]):
        words = inner_words(ref)
        cons.append(
            [[], [phrase_ids(tok, words[0])], [phrase_ids(tok, w) for w in words[:2]], [[]]][i % 4]
        )
    got = constrained_beam_search(
        model, src, cons, DecodeConfig(beam=BEAM, alpha=ALPHA, max_len_a=1.2, max_len_b=10, nbest=3)
    )
    plain = beam_search(
        model, src, DecodeConfig(beam=BEAM, alpha=ALPHA, max_len_a=1.2, max_len_b=10, nbest=3)
    )
    for i, (g, p) in enumerate(zip(got, plain)):
        if any(cons[i]):
            assert all(contains(h.tokens, c) for h in g for c in cons[i])
            continue
        assert [h.tokens for h in g] == [h.tokens for h in p]
        assert [h.score for h in g] == pytest.approx([h.score for h in p], abs=1e-5)
    # A sentence decoded alone gets what it gets in the batch.
    for i in (1, 2, 6):
        row = src[i][src[i].ne(PAD)][None]
        alone = constrained_beam_search(
            model,
            row,
            [cons[i]],
            DecodeConfig(beam=BEAM, alpha=ALPHA, max_len_a=1.2, max_len_b=10, nbest=3),
        )[0]
        assert [h.tokens for h in alone] == [h.tokens for h in got[i]]


def test_a_phrase_that_cannot_fit_still_gives_one_hypothesis(tiny: Loaded, sample: Sample):
    tok, model = tiny.tokenizer, tiny.model
    positions = model.cfg.max_positions
    word = phrase_ids(tok, "dog")
    too_long = word * (positions + 4)  # longer than any output the model can write
    src = sample.src[:3]
    short = [phrase_ids(tok, inner_words(sample.refs[1])[0])]
    cons = [[too_long], short, []]
    results = constrained_beam_search(
        model, src, cons, DecodeConfig(beam=2, alpha=ALPHA, max_len_a=1.2, max_len_b=10)
    )
    assert [len(r) for r in results] == [1, 1, 1]
    h = results[0][0]
    assert len(h.tokens) == positions - 1  # ran to the cap, then ended anyway
    assert h.score == pytest.approx(forced_score(model, src[0], h.tokens, ALPHA), abs=1e-4)
    assert contains(results[1][0].tokens, short[0])
    assert (
        results[2][0].tokens
        == beam_search(
            model, src[2:3], DecodeConfig(beam=2, alpha=ALPHA, max_len_a=1.2, max_len_b=10)
        )[0][0].tokens
    )


@pytest.mark.parametrize(
    "rules",
    [
        {"penalty": "power", "alpha": 1.0},
        {"penalty": "power", "alpha": 1.0, "length_offset": 1},
        {"penalty": "power", "alpha": 1.0, "hf_stopping": True},
        {"penalty": "power", "alpha": 1.0, "length_offset": 1, "hf_stopping": True},
    ],
    ids=["power", "offset", "hf", "hf-offset"],
)
def test_ending_rules_are_beam_search_s_without_constraints(
    tiny: Loaded, sample: Sample, rules: dict
):
    """An imported model carries HF's ending rules as its defaults; a line whose spans or
    numbers become constraints must end by them too, so with no phrase to meet the constrained
    search is beam search under every rule."""
    cfg = DecodeConfig(beam=BEAM, max_len_a=1.2, max_len_b=10, nbest=2, **rules)
    src = sample.src[:32]
    got = constrained_beam_search(tiny.model, src, [[] for _ in range(len(src))], cfg)
    plain = beam_search(tiny.model, src, cfg)
    for g, p in zip(got, plain):
        assert [h.tokens for h in g] == [h.tokens for h in p]
        assert [h.score for h in g] == pytest.approx([h.score for h in p], abs=1e-5)

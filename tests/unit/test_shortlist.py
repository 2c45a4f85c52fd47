"""The lexical shortlist (mt/shortlist.py) and a search through it (mt/translation/shortlist.py):
the counts and Dice ranking against a hand computation, a batch's candidates, the stored form
read back, and the search narrowed to the candidates: never outside them, the free search's
result where they hold what it wrote, every rule kind still applied."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
import torch
from support.copier import FIRST, V, make_model, random_sentences

from mt.batching import pad
from mt.config import DecodeConfig
from mt.errors import MtError
from mt.runtime.int8 import quantize_linears
from mt.search.beam import beam_search, greedy_search
from mt.search.constrained import constrained_beam_search
from mt.search.ensemble import Ensemble
from mt.search.rules import Columns, OutputColumns, Restriction, Step
from mt.search.steps import Sampling
from mt.shortlist import PairCounts, Shortlist
from mt.tokenizer import EOS
from mt.translation.shortlist import Int8Rows, OutputRows, Shortlisted

CFG = DecodeConfig(beam=3, alpha=0.6, max_len_a=1.5, max_len_b=4, nbest=3)


def tiny_counts() -> PairCounts:
    """Ids 4-7 on both sides: source 4 always with target 5, source 6 with target 7 once of
    twice; target 4 in every pair."""
    counts = PairCounts(8, 8)
    counts.add([([4, 6, EOS], [5, 4, 7]), ([4, 4], [4, 5]), ([6], [4, 6])])
    return counts


def test_pair_counts_and_dice_ranking() -> None:
    counts = tiny_counts()
    assert counts.lines == 3
    assert counts.src.tolist() == [0, 0, 0, 0, 2, 0, 2, 0]  # sentences holding each, EOS not
    assert counts.tgt.tolist() == [0, 0, 0, 0, 3, 2, 1, 1]
    assert counts.occurrences[4:].tolist() == [3, 2, 1, 1]
    short = counts.shortlist(2, 2, np.full(8, -1, dtype=np.int32))
    # Dice of source 4: with 4: 2*2/(2+3) = .8, with 5: 2*2/(2+2) = 1, with 7: 2*1/(2+1) = .67
    row = lambda s: short.targets[short.offsets[s] : short.offsets[s + 1]].tolist()  # noqa: E731
    assert row(4) == [5, 4]
    # Source 6: with 4: .8, with 6 and 7: 2/3 each (ties: more co-occurrences, then lower id)
    assert row(6) == [4, 6]
    assert row(5) == [] and row(0) == []
    assert short.frequent.tolist() == [4, 5]


def test_candidates_are_the_union_sorted_with_the_specials_first() -> None:
    copies = np.full(8, -1, dtype=np.int32)
    copies[6] = 6
    short = tiny_counts().shortlist(2, 1, copies)
    src = torch.tensor([[6, EOS]])
    assert short.candidates(src, 1).tolist() == [0, 1, 2, 3, 4, 6]  # 6's best, its copy
    assert short.candidates(src, 5, extra=[7]).tolist() == [0, 1, 2, 3, 4, 6, 7]
    both = torch.tensor([[4, EOS], [6, 0]])
    assert short.candidates(both, 2).tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert short.candidates(both, 2, vocab=5).tolist() == [0, 1, 2, 3, 4]


def test_stored_and_read_back() -> None:
    copies = np.arange(8, dtype=np.int32)
    short = tiny_counts().shortlist(2, 2, copies)
    buf = io.BytesIO()
    torch.save({"shortlist": short.to_dict()}, buf)
    buf.seek(0)
    back = Shortlist.from_dict(torch.load(buf, weights_only=True)["shortlist"], "x.pt")
    for f in dataclasses.fields(Shortlist):
        a, b = getattr(short, f.name), getattr(back, f.name)
        assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
    broken = dict(short.to_dict(), targets=torch.zeros(1, dtype=torch.int32))
    with pytest.raises(MtError, match="x.pt: its shortlist cannot be read"):
        Shortlist.from_dict(broken, "x.pt")


def test_vmap_lines() -> None:
    copies = np.full(8, -1, dtype=np.int32)
    copies[6] = 7
    short = tiny_counts().shortlist(2, 2, copies)
    pieces = ["<pad>", "<unk>", "<s>", "</s>", "a", "b", "c", "d"]
    lines = list(short.vmap_lines(pieces, pieces))
    assert lines == ["\ta b", "a\tb a", "c\ta c d"]


# -- search through a shortlist ---------------------------------------------------------------


@pytest.fixture(scope="module")
def model():
    return make_model(3)


def src_batch() -> torch.Tensor:
    return pad([s + [EOS] for s in random_sentences(6, seed=5)])


def narrowed(model, ids: list[int]) -> Shortlisted:
    return Shortlisted(model, OutputRows.of(model, model), torch.tensor(sorted(set(ids))))


def written(hyps) -> set[int]:
    return {t for h in hyps for t in h.tokens}


def flat(found) -> list:
    return [h for hs in found for h in hs]


def run(path: str, model, src: torch.Tensor, rules=(), prefixes=None, phrases=None):
    if path == "greedy":
        return greedy_search(model, src, CFG, rules=rules, prefixes=prefixes)
    if path == "sample":
        sampling = Sampling(generator=torch.Generator().manual_seed(0))
        return greedy_search(model, src, CFG, sampling=sampling, rules=rules, prefixes=prefixes)
    if path == "beam":
        return flat(beam_search(model, src, CFG, rules=rules, prefixes=prefixes))
    one = dataclasses.replace(CFG, nbest=1)
    phrases = phrases or [[] for _ in range(len(src))]
    return flat(constrained_beam_search(model, src, phrases, one, rules=rules))


@pytest.mark.parametrize("path", ["greedy", "sample", "beam", "constrained"])
def test_the_whole_vocabulary_as_a_shortlist_is_the_free_search(model, path) -> None:
    src = src_batch()
    free = run(path, model, src)
    short = run(path, narrowed(model, list(range(V))), src)
    assert [h.tokens for h in short] == [h.tokens for h in free]
    assert [h.score for h in short] == pytest.approx([h.score for h in free], abs=1e-5)


@pytest.mark.parametrize("path", ["greedy", "sample", "beam", "constrained"])
def test_nothing_outside_the_candidates_is_written(model, path) -> None:
    src = src_batch()
    free = run(path, model, src)
    common = sorted(written(free), key=lambda t: -sum(h.tokens.count(t) for h in free))
    keep = list(range(EOS + 1)) + common[1::2] + [FIRST + 1]
    short = run(path, narrowed(model, keep), src)
    assert written(short) <= set(keep)
    assert written(short) - {FIRST + 1}  # it wrote something


def test_greedy_equals_the_free_search_where_the_candidates_hold_its_tokens(model) -> None:
    src = src_batch()
    free = greedy_search(model, src, CFG)
    keep = list(range(EOS + 1)) + sorted(written(free))
    assert len(keep) < V  # a real narrowing
    short = greedy_search(narrowed(model, keep), src, CFG)
    assert [h.tokens for h in short] == [h.tokens for h in free]
    # Normalised over fewer tokens, each step's log-probability is at least the free one's.
    assert all(s.score >= f.score - 1e-6 for s, f in zip(short, free))


def test_an_ensemble_through_a_shortlist(model) -> None:
    pair = Ensemble([model, make_model(4)]).eval()
    src = src_batch()
    free = flat(beam_search(pair, src, CFG))
    short = flat(beam_search(narrowed(pair, list(range(V))), src, CFG))
    assert [h.tokens for h in short] == [h.tokens for h in free]


class BanColumns:
    reads_history = False

    def __init__(self, tokens: list[int]) -> None:
        self.mask = Columns(torch.tensor(tokens))

    def restrict(self, step: Step) -> Restriction:
        return Restriction(ban=self.mask)


@dataclasses.dataclass(frozen=True)
class OddMask:
    """A mask of a kind the shortlist does not know: it is applied over the full width."""

    token: int

    def apply(self, logits: torch.Tensor, start: int = 0) -> None:
        logits[:, self.token] = float("-inf")


class BanOdd:
    reads_history = False

    def __init__(self, token: int) -> None:
        self.mask = OddMask(token)

    def restrict(self, step: Step) -> Restriction:
        return Restriction(support=self.mask)


@pytest.mark.parametrize("rule", ["columns", "odd", "no_repeat"])
@pytest.mark.parametrize("path", ["greedy", "beam", "constrained"])
def test_rules_apply_through_a_shortlist(model, path, rule) -> None:
    src = src_batch()
    everything = narrowed(model, list(range(V)))
    if rule == "no_repeat":
        if path == "constrained":
            pytest.skip("constrained search refuses no-repeat-ngram")
        cfg = dataclasses.replace(CFG, no_repeat_ngram=1)
        find = greedy_search if path == "greedy" else beam_search
        free, short = find(model, src, cfg), find(everything, src, cfg)
        free, short = (flat(x) if path == "beam" else x for x in (free, short))
        assert [h.tokens for h in short] == [h.tokens for h in free]
        assert all(len(set(h.tokens)) == len(h.tokens) for h in short)
        return
    token = max(written(run(path, model, src)) - {EOS}, key=lambda t: t)
    rules = [BanColumns([token])] if rule == "columns" else [BanOdd(token)]
    free = run(path, model, src, rules)
    short = run(path, everything, src, rules)
    assert token not in written(short)
    assert [h.tokens for h in short] == [h.tokens for h in free]


def test_prefixes_and_constraints_through_a_shortlist(model) -> None:
    src = src_batch()
    keep = list(range(EOS + 1)) + [FIRST, FIRST + 2]
    prefixes = [[FIRST + 5, FIRST + 6] for _ in range(len(src))]
    with pytest.raises(ValueError, match="outside the output columns"):
        greedy_search(narrowed(model, keep), src, CFG, prefixes=prefixes)
    view = narrowed(model, keep + [FIRST + 5, FIRST + 6])
    for hyp in greedy_search(view, src, CFG, prefixes=prefixes):
        assert hyp.tokens[:2] == [FIRST + 5, FIRST + 6]
        assert set(hyp.tokens) <= set(keep + [FIRST + 5, FIRST + 6])
    phrases = [[[FIRST + 7]] for _ in range(len(src))]
    view = narrowed(model, keep + [FIRST + 7])
    one = dataclasses.replace(CFG, nbest=1)
    for hyps in constrained_beam_search(view, src, phrases, one):
        assert FIRST + 7 in hyps[0].tokens
        assert set(hyps[0].tokens) <= set(keep + [FIRST + 7])


def test_an_int8_decode_narrows_its_int8_layer(model) -> None:
    """Under int8 the candidates' logits are the int8 layer's own on those columns (not an fp32
    product's), and a search through every column is the int8 model's free search."""
    q = quantize_linears(model)
    rows = OutputRows.of(model, q)
    assert rows.int8[0] is not None and rows.int8[0].values.dtype == torch.int8
    hidden = torch.randn(5, model.cfg.d_model)
    full = q.project(hidden)
    ids = torch.tensor([0, 1, 2, 3, FIRST + 1, FIRST + 4, V - 1])
    part = Shortlisted(q, rows, ids).project(hidden)
    assert torch.equal(part, full[:, ids])
    fp32 = Shortlisted(model, OutputRows.of(model, model), ids).project(hidden)
    assert not torch.equal(part, fp32)  # the int8 product, not the float one
    src = src_batch()
    free = flat(beam_search(q, src, CFG))
    short = flat(beam_search(Shortlisted(q, rows, torch.arange(V)), src, CFG))
    assert [h.tokens for h in short] == [h.tokens for h in free]


def test_int8_rows_per_row_scales() -> None:
    """A matrix quantised per output row keeps each row's scale when cut."""
    layer = torch.nn.Linear(8, 6, bias=False)
    weight = torch.quantize_per_channel(
        layer.weight.detach(),
        torch.rand(6) / 50 + 0.01,
        torch.zeros(6, dtype=torch.long),
        0,
        torch.qint8,
    )
    dyn = torch.ao.nn.quantized.dynamic.Linear(8, 6, bias_=False)
    dyn.set_weight_bias(weight, None)
    rows = Int8Rows.of(dyn)
    assert rows is not None and rows.per_row is not None
    x = torch.randn(3, 8)
    ids = torch.tensor([1, 4, 5])
    packed = rows.packed(ids)
    got = torch.ops.quantized.linear_dynamic(x, packed, reduce_range=rows.reduce_range)
    assert torch.equal(got, dyn(x)[:, ids])
    assert Int8Rows.of(layer) is None  # a float layer: the fp32 rows instead


def test_output_columns_need_the_specials_first() -> None:
    with pytest.raises(ValueError, match="PAD, UNK, BOS and EOS"):
        OutputColumns.of(torch.tensor([0, 1, 3, 5]), V)
    cols = OutputColumns.of(torch.tensor([0, 1, 2, 3, 9]), V)
    assert cols.column[9] == 4 and cols.column[8] == -1

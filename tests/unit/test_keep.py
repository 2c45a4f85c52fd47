"""finetune.keep: the KL term toward the frozen base (mt/adapt/keep.py, mt.train.loss).

The term is KL(base || model) per target token: 0 when the model is the base, positive once
they differ, equal to torch's own KL on the real targets; an update with it moves the trained
model alone, the base keeping its weights and taking no gradient. With `keep_on: general` it
covers the rows of general corpora alone (`Batch.general`), the base seeing only those.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from mt.adapt.keep import Keep
from mt.batching import Batch
from mt.config import Config, ModelConfig
from mt.model import Transformer
from mt.tokenizer import PAD
from mt.train.distributed import Dist
from mt.train.loss import kl_to_reference, log_probs
from mt.train.update import Update


def a_batch() -> Batch:
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, PAD]])
    tgt_in = torch.tensor([[1, 4, 5], [1, 6, PAD]])
    tgt_out = torch.tensor([[4, 5, 2], [6, 2, PAD]])
    return Batch(src, tgt_in, tgt_out, src_tokens=7, tgt_tokens=5)


def small() -> tuple[Config, Transformer]:
    cfg = Config()
    cfg.model = ModelConfig(d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1)
    cfg.train.schedule, cfg.train.warmup = "inverse_sqrt", 1
    torch.manual_seed(0)
    return cfg, Transformer(cfg.model, 12, 12)


def with_moved_base() -> tuple[Config, Transformer, Transformer]:
    """The small model in eval mode (dropout off: its distributions are fixed) and a copy of
    it whose output layer moved, as the base: the term between them is positive."""
    cfg, model = small()
    model.eval()
    base = copy.deepcopy(model)
    with torch.no_grad():
        base.output.weight.add_(0.1)
    return cfg, model, base


def term(keep: Keep, model: Transformer, b: Batch) -> torch.Tensor:
    logp = log_probs(model(b.src, b.tgt_in))
    return kl_to_reference(keep.reference(b.src, b.tgt_in, "fp32"), logp, b.tgt_out, PAD)


def test_kl_to_reference_is_torchs_kl_over_real_targets():
    torch.manual_seed(0)
    ref, cur = F.log_softmax(torch.randn(2, 3, 5), -1), F.log_softmax(torch.randn(2, 3, 5), -1)
    target = torch.tensor([[1, 2, PAD], [3, PAD, PAD]])
    want = F.kl_div(cur, ref, log_target=True, reduction="none").sum(-1)[target.ne(PAD)].sum()
    assert kl_to_reference(ref, cur, target, PAD).item() == pytest.approx(want.item(), rel=1e-5)
    assert kl_to_reference(ref, ref, target, PAD).item() == pytest.approx(0.0, abs=1e-7)


def test_the_term_is_zero_for_the_base_itself_and_positive_once_the_model_moves():
    _, model = small()
    model.eval()  # dropout off: the same weights give the same distributions
    keep = Keep(copy.deepcopy(model), 1.0)
    assert term(keep, model, a_batch()).item() == pytest.approx(0.0, abs=1e-6)
    with torch.no_grad():
        model.output.weight.add_(0.05 * torch.randn_like(model.output.weight))
    moved = term(keep, model, a_batch()).item()
    assert moved > 1e-4
    # Padding positions count for nothing: the second row's pad column changes nothing.
    b = a_batch()
    b.tgt_out[1, 2] = PAD
    assert term(keep, model, b).item() == pytest.approx(moved, rel=1e-6)


def test_an_update_with_the_term_trains_the_model_alone():
    cfg, model = small()
    base = copy.deepcopy(model)
    with torch.no_grad():  # a base that differs, so the term has a gradient
        for p in base.parameters():
            p.add_(0.05 * torch.randn_like(p))
    frozen = {k: v.clone() for k, v in base.state_dict().items()}
    keep = Keep(base, 2.0)
    assert not base.training and not any(p.requires_grad for p in base.parameters())

    plain_model = copy.deepcopy(model)
    plain = Update(cfg.train, cfg.model, plain_model, Dist(), torch.device("cpu"), "fp32")
    kept = Update(cfg.train, cfg.model, model, Dist(), torch.device("cpu"), "fp32", keep)
    assert {id(p) for g in kept.optimizer.param_groups for p in g["params"]}.isdisjoint(
        id(p) for p in base.parameters()
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(1)
    plain([a_batch()], 1)
    torch.manual_seed(1)  # the same dropout masks: only the term differs
    kept([a_batch()], 1)
    for k, v in base.state_dict().items():
        assert torch.equal(v, frozen[k]), k
    assert all(p.grad is None for p in base.parameters())
    moved = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert moved, "the trained model did not change"
    differs = [
        k
        for k, v in model.state_dict().items()
        if not torch.allclose(v, plain_model.state_dict()[k], atol=1e-7)
    ]
    assert differs, "the KL term changed nothing in the update"
    assert kept.kl_sum.item() > 0  # summed for the log


def test_the_objective_adds_the_weighted_term():
    cfg, model, base = with_moved_base()
    for weight in (0.5, 3.0):
        update = Update(
            cfg.train, cfg.model, model, Dist(), torch.device("cpu"), "fp32", Keep(base, weight)
        )
        loss, _, objective = update._losses(a_batch())
        want = loss + weight * term(Keep(base, 1.0), model, a_batch())
        assert objective.item() == pytest.approx(want.item(), rel=1e-5)


def test_on_general_rows_the_term_is_theirs_alone():
    cfg, model, base = with_moved_base()
    keep = Keep(base, 2.0, on="general")
    update = Update(cfg.train, cfg.model, model, Dist(), torch.device("cpu"), "fp32", keep)
    plain = Update(cfg.train, cfg.model, model, Dist(), torch.device("cpu"), "fp32")
    b = a_batch()
    loss, _, plain_objective = plain._losses(b)
    # no row general (or no corpus marked): the objective is the plain one, the base unused
    for general in (torch.tensor([False, False]), None):
        b.general = general
        _, _, objective = update._losses(b)
        assert objective.item() == pytest.approx(plain_objective.item(), rel=1e-6)
    # the second row alone: its KL, computed on that row as a batch of its own
    b.general = torch.tensor([False, True])
    _, _, objective = update._losses(b)
    row = Batch(b.src[1:], b.tgt_in[1:], b.tgt_out[1:], src_tokens=3, tgt_tokens=2)
    want = plain_objective + 2.0 * term(Keep(base, 1.0), model, row)
    assert objective.item() == pytest.approx(want.item(), rel=1e-5)
    both = a_batch()
    both.general = torch.tensor([True, True])
    _, _, objective = update._losses(both)
    whole = plain_objective + 2.0 * term(Keep(base, 1.0), model, a_batch())
    assert objective.item() == pytest.approx(whole.item(), rel=1e-5)
    assert whole.item() > want.item() > plain_objective.item()


def test_on_general_rows_with_rdrop_both_copies_count():
    cfg, model, base = with_moved_base()  # eval: both copies' KL is the row's
    cfg.train.rdrop = 1.0
    update = Update(
        cfg.train,
        cfg.model,
        model,
        Dist(),
        torch.device("cpu"),
        "fp32",
        Keep(base, 1.0, on="general"),
    )
    b = a_batch()
    b.general = torch.tensor([True, False])
    before = update.kl_sum.item()
    update._losses(b)
    row = Batch(b.src[:1], b.tgt_in[:1], b.tgt_out[:1], src_tokens=4, tgt_tokens=3)
    # two copies of the row, halved as the loss is
    assert update.kl_sum.item() - before == pytest.approx(
        term(Keep(base, 1.0), model, row).item(), rel=1e-5
    )

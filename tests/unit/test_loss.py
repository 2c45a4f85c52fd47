"""Label-smoothed cross entropy against a hand computation, and R-Drop's term and update."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mt.batching import Batch
from mt.config import Config, ModelConfig
from mt.model import Transformer
from mt.train.distributed import Dist
from mt.train.loss import label_smoothed_loss, log_probs, symmetric_kl
from mt.train.update import Update

PAD = 0
# Two positions over a vocabulary of 4, given as probabilities so the sums can be done by hand.
PROBS = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.4, 0.1]])


def logits_of(probs: torch.Tensor) -> torch.Tensor:
    return probs.log()[None]  # (1, T, V); log_softmax of log p is log p


def test_hand_computed_value():
    loss, nll = label_smoothed_loss(logits_of(PROBS), torch.tensor([[3, 2]]), 0.1, PAD)
    nll_hand = -math.log(0.4) - math.log(0.4)
    smooth_hand = (
        -(math.log(0.1) + math.log(0.2) + math.log(0.3) + math.log(0.4)) / 4
        - (2 * math.log(0.25) + math.log(0.4) + math.log(0.1)) / 4
    )
    assert nll.item() == pytest.approx(nll_hand, rel=1e-6)
    assert loss.item() == pytest.approx(0.9 * nll_hand + 0.1 * smooth_hand, rel=1e-6)


def test_pad_targets_are_ignored():
    target = torch.tensor([[3, PAD]])
    loss, nll = label_smoothed_loss(logits_of(PROBS), target, 0.1, PAD)
    smooth_hand = -(math.log(0.1) + math.log(0.2) + math.log(0.3) + math.log(0.4)) / 4
    assert nll.item() == pytest.approx(-math.log(0.4), rel=1e-6)
    assert loss.item() == pytest.approx(0.9 * -math.log(0.4) + 0.1 * smooth_hand, rel=1e-6)
    # Whatever the model predicts at a pad position, the loss and its gradient there are zero.
    logits = logits_of(PROBS).clone().requires_grad_(True)
    label_smoothed_loss(logits, target, 0.1, PAD)[0].backward()
    assert torch.all(logits.grad[0, 1] == 0)
    assert torch.any(logits.grad[0, 0] != 0)


def test_all_pad_gives_zero():
    loss, nll = label_smoothed_loss(logits_of(PROBS), torch.tensor([[PAD, PAD]]), 0.1, PAD)
    assert loss.item() == 0.0 and nll.item() == 0.0


def test_no_smoothing_is_plain_nll():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11)
    target = torch.randint(1, 11, (3, 5))
    target[1, 3:] = PAD
    loss, nll = label_smoothed_loss(logits, target, 0.0, PAD)
    expected = F.cross_entropy(
        logits.view(-1, 11), target.view(-1), ignore_index=PAD, reduction="sum"
    )
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert nll.item() == pytest.approx(expected.item(), rel=1e-5)


def test_smoothing_matches_torch_label_smoothing():
    # torch's label_smoothing also spreads eps uniformly over all classes.
    torch.manual_seed(1)
    logits = torch.randn(2, 4, 9)
    target = torch.randint(1, 9, (2, 4))
    target[0, 2:] = PAD
    loss, _ = label_smoothed_loss(logits, target, 0.2, PAD)
    expected = F.cross_entropy(
        logits.view(-1, 9), target.view(-1), ignore_index=PAD, reduction="sum", label_smoothing=0.2
    )
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_sums_not_means():
    target = torch.tensor([[3, 2]])
    one, _ = label_smoothed_loss(logits_of(PROBS[:1]), target[:, :1], 0.1, PAD)
    both, _ = label_smoothed_loss(logits_of(PROBS), target, 0.1, PAD)
    two, _ = label_smoothed_loss(logits_of(PROBS[1:]), target[:, 1:], 0.1, PAD)
    assert both.item() == pytest.approx(one.item() + two.item(), rel=1e-6)


def test_half_precision_logits_give_float32_loss():
    logits = logits_of(PROBS).to(torch.bfloat16)
    loss, nll = label_smoothed_loss(logits, torch.tensor([[3, 2]]), 0.1, PAD)
    assert loss.dtype == torch.float32 and nll.dtype == torch.float32


def test_symmetric_kl_is_the_mean_of_both_divergences_over_real_targets():
    torch.manual_seed(0)
    a, b = torch.randn(2, 3, 5), torch.randn(2, 3, 5)
    target = torch.tensor([[1, 2, PAD], [3, PAD, PAD]])
    pa, pb = F.log_softmax(a, -1), F.log_softmax(b, -1)
    kl_ab = F.kl_div(pb, pa, log_target=True, reduction="none").sum(-1)  # KL(p_a || p_b)
    kl_ba = F.kl_div(pa, pb, log_target=True, reduction="none").sum(-1)
    keep = target.ne(PAD)
    want = ((kl_ab + kl_ba) / 2)[keep].sum()
    assert symmetric_kl(pa, pb, target, PAD).item() == pytest.approx(want.item(), rel=1e-5)
    assert symmetric_kl(pb, pa, target, PAD).item() == pytest.approx(want.item(), rel=1e-5)
    assert symmetric_kl(pa, pa, target, PAD).item() == pytest.approx(0.0, abs=1e-6)


def update_of(rdrop: float, dropout: float) -> tuple[Update, torch.nn.Module]:
    cfg = Config()
    cfg.model = ModelConfig(
        d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1, dropout=dropout
    )
    cfg.train.rdrop, cfg.train.schedule, cfg.train.warmup = rdrop, "inverse_sqrt", 1
    torch.manual_seed(0)
    model = Transformer(cfg.model, 12, 12).train()
    return Update(cfg.train, cfg.model, model, Dist(), torch.device("cpu"), "fp32"), model


def a_batch() -> Batch:
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, PAD]])
    tgt_in = torch.tensor([[1, 4, 5], [1, 6, PAD]])
    tgt_out = torch.tensor([[4, 5, 2], [6, 2, PAD]])
    return Batch(src, tgt_in, tgt_out, src_tokens=7, tgt_tokens=5)


def test_rdrop_without_dropout_is_plain_training():
    """Two passes with no dropout agree, so the KL term is 0: the same loss and gradient as
    plain training, and an update runs with it."""
    runs = []
    for rdrop in (0.0, 5.0):
        update, model = update_of(rdrop, dropout=0.0)
        loss, nll, objective = update._losses(a_batch())
        objective.backward()
        runs.append((loss, nll, objective, [p.grad.clone() for p in model.parameters()]))
        assert update([a_batch()], 1)[2] == 5
    (loss, nll, objective, grads), (rd_loss, rd_nll, rd_objective, rd_grads) = runs
    assert rd_loss.item() == pytest.approx(loss.item(), rel=1e-5)
    assert rd_nll.item() == pytest.approx(nll.item(), rel=1e-5)
    assert rd_objective.item() == pytest.approx(objective.item(), rel=1e-5)
    for plain, rd in zip(grads, rd_grads):
        torch.testing.assert_close(plain, rd, rtol=1e-4, atol=1e-6)


def test_rdrop_adds_the_divergence_of_two_dropout_masks():
    update, model = update_of(5.0, dropout=0.3)
    torch.manual_seed(1)
    loss, nll, objective = update._losses(a_batch())
    torch.manual_seed(1)  # the same masks: the stacked pass, taken apart by hand
    b = a_batch()
    two = [torch.cat([x, x]) for x in (b.src, b.tgt_in, b.tgt_out)]
    logits = model(two[0], two[1])
    both, both_nll = label_smoothed_loss(logits, two[2], 0.1, PAD)
    kl = symmetric_kl(*log_probs(logits).chunk(2), b.tgt_out, PAD)
    assert kl.item() > 0  # different masks, different predictions
    assert loss.item() == pytest.approx(both.item() / 2, rel=1e-5)  # the mean of the two
    assert nll.item() == pytest.approx(both_nll.item() / 2, rel=1e-5)
    assert objective.item() == pytest.approx(both.item() / 2 + 2.5 * kl.item(), rel=1e-5)

"""Label-smoothed cross entropy against a hand computation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mt.train.loss import label_smoothed_loss

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

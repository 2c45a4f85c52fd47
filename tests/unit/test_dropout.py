"""The hashed CPU dropout: rate, scale, gradient, independence and reproducibility."""

from __future__ import annotations

import pytest
import torch

from mt.dropout import Dropout, dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_keep_rate_matches_p_within_sampling_error(p):
    torch.manual_seed(0)
    n = 400_000
    keep, scale = keep_mask(torch.Size([n]), p, torch.device("cpu"))
    rate = keep.float().mean().item()
    sd = (p * (1 - p) / n) ** 0.5
    assert abs(rate - (1 - p)) < 5 * sd + 1 / 65536
    assert scale == pytest.approx(1 / (1 - round(p * 65536) / 65536))


def test_expected_value_is_preserved_and_dropped_entries_are_zero():
    torch.manual_seed(1)
    x = torch.full((1000, 500), 3.0)
    y = dropout(x, 0.1, training=True)
    zero = y.eq(0)
    assert 0.09 < zero.float().mean().item() < 0.11
    assert torch.allclose(y[~zero], torch.tensor(3.0 * 65536 / (65536 - 6554)))
    assert y.mean().item() == pytest.approx(3.0, rel=5e-3)


def test_mask_bits_look_independent():
    """Neighbouring elements, the two halves of one hash, and successive calls are uncorrelated."""
    torch.manual_seed(2)
    a = keep_mask(torch.Size([200_000]), 0.5, torch.device("cpu"))[0].float()
    b = keep_mask(torch.Size([200_000]), 0.5, torch.device("cpu"))[0].float()
    for u, v in [(a[:-1], a[1:]), (a[0::2], a[1::2]), (a, b)]:
        corr = torch.corrcoef(torch.stack([u, v]))[0, 1].item()
        assert abs(corr) < 0.01
    assert not torch.equal(a, b)


def test_gradient_is_mask_times_scale():
    torch.manual_seed(3)
    x = torch.randn(7, 33, requires_grad=True)  # odd element count
    y = dropout(x, 0.25, training=True)
    g = torch.randn_like(y)
    y.backward(g)
    kept = y.ne(0)
    scale = 65536 / (65536 - 16384)
    assert torch.allclose(y[kept], x.detach()[kept] * scale)
    assert torch.allclose(x.grad, g * kept * scale)


def test_reproducible_from_the_torch_seed_and_identity_in_eval():
    x = torch.randn(4, 9, 16)
    torch.manual_seed(5)
    y1 = dropout(x, 0.1, True)
    torch.manual_seed(5)
    y2 = dropout(x, 0.1, True)
    assert torch.equal(y1, y2)
    module = Dropout(0.1).eval()
    assert module(x) is x
    assert dropout(x, 0.0, True) is x
    assert torch.equal(dropout(x, 1.0, True), torch.zeros_like(x))

"""CPU decoding copies of a model: oneDNN pre-packed Linear layers (same outputs, the source
model untouched) and int8 ones."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mt.config import ModelConfig
from mt.decode.int8 import quantize_linears
from mt.decode.packed import PackedLinear, pack_linears, packing_available
from mt.model import Transformer

pytestmark = pytest.mark.skipif(
    not packing_available(nn.Linear(2, 2)), reason="this torch has no oneDNN linear ops"
)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 48), (7, 48), (300, 48), (5, 1, 48), (3, 9, 48)])
def test_packed_linear_matches_linear(bias, shape):
    torch.manual_seed(0)
    linear = nn.Linear(48, 80, bias=bias)
    x = torch.randn(*shape)
    with torch.no_grad():
        want = linear(x)
        got = PackedLinear(linear)(x)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def small_model(tie: bool = True) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=32, n_heads=2, d_ff=64, encoder_layers=2, decoder_layers=2, tie_embeddings=tie
    )
    return Transformer(cfg, 40, 40)


@pytest.mark.parametrize("tie", [True, False])
def test_pack_linears_copies_and_keeps_the_source_model(tie):
    model = small_model(tie).train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    packed = pack_linears(model)
    assert packed is not model
    assert model.training  # the caller's model keeps its mode, modules and weights
    assert not any(isinstance(m, PackedLinear) for m in model.modules())
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n])
    assert not packed.training
    assert not any(type(m) is nn.Linear for m in packed.modules())
    n_linear = sum(type(m) is nn.Linear for m in model.modules())
    assert sum(isinstance(m, PackedLinear) for m in packed.modules()) == n_linear
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 10, 11], [1, 12, 0]])
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(packed(src, tgt), model(src, tgt), atol=1e-4, rtol=1e-4)


def test_not_packed_when_not_fp32_on_cpu():
    model = small_model().double()
    assert pack_linears(model) is model


def test_packed_model_runs_under_cpu_autocast():
    """The trainer scores dev BLEU under bf16 autocast on CPUs with AMX."""
    model = small_model().eval()
    packed = pack_linears(model)
    src = torch.tensor([[5, 6, 7, 2]])
    tgt = torch.tensor([[1, 10, 11]])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = model(src, tgt)
        got = packed(src, tgt)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float())


def test_int8_copy_is_close_and_cpu_only():
    model = small_model().eval()
    quantized = quantize_linears(model)
    assert quantized is not model
    assert sum(type(m) is nn.Linear for m in model.modules()) > 0  # the source is untouched
    assert not any(type(m) is nn.Linear for m in quantized.modules())
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 10, 11], [1, 12, 0]])
    with torch.no_grad():
        want, got = model(src, tgt), quantized(src, tgt)
    assert (got - want).abs().max() < 0.05 * want.abs().max()  # int8 error, not a new model
    with pytest.raises(ValueError, match="CPU only"):
        quantize_linears(small_model().to("meta"))

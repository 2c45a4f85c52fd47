"""int8 decoding: a quantised copy, close to the fp32 model, CPU only, the source untouched."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mt.config import ModelConfig
from mt.model import Transformer, applied
from mt.runtime.int8 import engine_available, quantize_linears


def small_model(tie: bool = True) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=32, n_heads=2, d_ff=64, encoder_layers=2, decoder_layers=2, tie_embeddings=tie
    )
    return Transformer(cfg, 40, 40)


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


@pytest.mark.filterwarnings("ignore:.*deprecated:DeprecationWarning")
def test_int8_relu_layers_are_fused_with_the_values_of_the_unfused_copy():
    """A ReLU feed-forward layer's first product applies the ReLU itself: the same logits as
    quantising each Linear layer alone and applying the ReLU after it."""
    model = small_model().eval()
    fused = quantize_linears(model)
    for layer in [*fused.encoder, *fused.decoder]:
        assert "ReLU" in type(layer.ffn.fc1).__name__ and layer.ffn.activation is applied
    plain = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    assert all(layer.ffn.activation is F.relu for layer in plain.decoder)
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 10, 11], [1, 12, 0]])
    with torch.no_grad():
        torch.testing.assert_close(fused(src, tgt), plain(src, tgt), rtol=1e-6, atol=1e-6)
    assert all(layer.ffn.activation is F.relu for layer in model.decoder)  # source untouched


def test_int8_other_activations_stay_apart():
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_heads=2, d_ff=64, encoder_layers=1, decoder_layers=1)
    cfg.activation = "gelu"
    quantized = quantize_linears(Transformer(cfg, 40, 40).eval())
    assert quantized.decoder[0].ffn.activation is F.gelu
    assert "ReLU" not in type(quantized.decoder[0].ffn.fc1).__name__


@pytest.mark.skipif(not engine_available("onednn"), reason="this torch lacks the oneDNN engine")
@pytest.mark.filterwarnings("ignore:.*deprecated:DeprecationWarning")
def test_an_onednn_copy_is_close_and_leaves_the_engine_as_it_was():
    """Packed for oneDNN, the copy computes what the fp32 model does to int8's error, and
    runs on oneDNN's kernels whatever the engine is after: the setting is restored, and a copy
    packed for torch's default engine in the same process keeps its own kernels."""
    model = small_model().eval()
    before = torch.backends.quantized.engine
    onednn_copy = quantize_linears(model, "onednn")
    assert torch.backends.quantized.engine == before
    default_copy = quantize_linears(model)
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 10, 11], [1, 12, 0]])
    with torch.no_grad():
        want = model(src, tgt)
        got, other = onednn_copy(src, tgt), default_copy(src, tgt)
        torch.backends.quantized.engine = "onednn"
        try:  # the kernels come with the packed weights, not from the setting
            torch.testing.assert_close(onednn_copy(src, tgt), got, rtol=0, atol=0)
            torch.testing.assert_close(default_copy(src, tgt), other, rtol=0, atol=0)
        finally:
            torch.backends.quantized.engine = before
    assert (got - want).abs().max() < 0.05 * want.abs().max()
    with pytest.raises(ValueError, match="int8 engine 'fbgemm'"):
        quantize_linears(model, "fbgemm")

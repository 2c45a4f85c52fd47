"""int8 decoding on CPU: the Linear layers dynamically quantised (int8 weights per tensor,
activations quantised per call), the rest fp32.

It decodes faster than fp32 for a small BLEU cost (docs/benchmarks.md has the measured
speed and BLEU). torch
has deprecated its quantized tensor types in favour of torchao; they still work in the pinned
torch, and the deprecation warning is not shown to `mt translate` users.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn


def quantize_linears(model: nn.Module) -> nn.Module:
    """A copy of `model` in eval mode with every `nn.Linear` dynamically quantised to int8."""
    if any(p.device.type != "cpu" for p in model.parameters()):
        raise ValueError("int8 decoding runs on CPU only")
    quantize = getattr(torch.ao.quantization, "quantize_dynamic", None)
    if quantize is None:
        raise ValueError(f"torch {torch.__version__} has no dynamic quantisation for int8 decoding")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*deprecated.*")
        quantized = quantize(model, {nn.Linear}, dtype=torch.qint8)
    return quantized.eval()

"""int8 decoding on CPU: the Linear layers dynamically quantised (int8 weights per tensor,
activations quantised per call), the rest fp32.

It decodes faster than fp32 for a small BLEU cost (measured in docs/studies/decoding-speed.md).
torch has deprecated its quantized tensor types in favour of torchao; they still work in the
pinned torch, and the deprecation warning is not shown to `mt translate` users.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from mt.model import FeedForward, applied, fusable

# The float module torch's dynamic quantisation turns into its fused int8 LinearReLU.
LinearReLU = getattr(getattr(torch.ao.nn, "intrinsic", None), "LinearReLU", None)


def quantize_linears(model: nn.Module) -> nn.Module:
    """A copy of `model` in eval mode with every `nn.Linear` dynamically quantised to int8,
    and a ReLU feed-forward layer's activation applied inside its first product (torch's
    fused dynamic LinearReLU), which spares a pass over its widest activations."""
    if any(p.device.type != "cpu" for p in model.parameters()):
        raise ValueError("int8 decoding runs on CPU only")
    quantize = getattr(torch.ao.quantization, "quantize_dynamic", None)
    if quantize is None:
        raise ValueError(f"torch {torch.__version__} has no dynamic quantisation for int8 decoding")
    shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    fused = copy.deepcopy(model, memo=shared)  # new modules, the same weights
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*deprecated.*")
        kinds: set[type[nn.Module]] = {nn.Linear}
        if LinearReLU is not None:
            kinds.add(LinearReLU)
            for module in fused.modules():
                if isinstance(module, FeedForward) and fusable(module):
                    module.fc1 = LinearReLU(module.fc1, nn.ReLU())
                    module.activation = applied
        quantized = quantize(fused, kinds, dtype=torch.qint8, inplace=True)
    return quantized.eval()

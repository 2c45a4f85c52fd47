"""Linear layers with their weights packed once for oneDNN, for fp32 decoding on CPU.

A decoding step multiplies a few hundred rows by each weight matrix. torch's default CPU GEMM
(MKL) repacks the weight matrix into its blocked layout on every call, which at these shapes
costs as much as the multiply: the (rows x 256) x (256 x 8000) output layer of the recipe model
ran at 97 GFLOP/s with `F.linear` and 131 with a pre-packed oneDNN weight, 52 against 101 at 64
rows (2 EPYC cores; `scripts/bench_decode.py` shows the end-to-end effect). Training keeps
plain `nn.Linear`: its weights change every step, and its large row counts gain nothing.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

ROWS_HINT = 256  # the row count oneDNN tunes the packed layout for; any row count works


def packing_available(model: nn.Module) -> bool:
    """The model is fp32 on CPU (the only case packing is for) and this torch's oneDNN ops
    work. They are the ones torch.compile's CPU backend uses, not a documented API, so a torch
    without them, or with other signatures, falls back to plain `nn.Linear`."""
    if not all(p.device.type == "cpu" and p.dtype == torch.float32 for p in model.parameters()):
        return False
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        probe = nn.Linear(4, 3)
        x = torch.randn(2, 4)
        with torch.no_grad():
            return torch.allclose(PackedLinear(probe)(x), probe(x), atol=1e-5)
    except (RuntimeError, AttributeError, TypeError):
        return False


class PackedLinear(nn.Module):
    """`nn.Linear`'s forward, for inference, from a weight packed once into oneDNN's layout.

    Under CPU autocast, or for input that is not fp32, it runs `F.linear` on the original
    weight (kept by reference, not copied), so that dev BLEU under bf16 autocast still works."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach()
        self.register_buffer("weight", weight, persistent=False)
        self.register_buffer(
            "packed", torch.ops.mkldnn._reorder_linear_weight(weight, ROWS_HINT), persistent=False
        )
        bias = linear.bias.detach().clone() if linear.bias is not None else None
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or torch.is_autocast_enabled("cpu"):
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def pack_linears(model: nn.Module) -> nn.Module:
    """A copy of `model` in eval mode with every `nn.Linear` replaced by a `PackedLinear`, or
    `model` itself where packing does not apply (no oneDNN, not fp32 on CPU). The copy keeps
    the original's other parameters (embeddings, norms), so the model passed in, which may be
    in the middle of training, is never changed."""
    if not packing_available(model):
        return model
    packed = copy.deepcopy(model).eval()
    for module in list(packed.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, PackedLinear(child))
    return packed

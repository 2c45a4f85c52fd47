"""CPU decoding's Linear layers through oneDNN's matrix multiply (`decode.gemm`): fp32's output
layer, and every Linear layer of a bf16 copy.

torch's default CPU fp32 GEMM is MKL's, which on AMD CPUs takes a slower path: oneDNN (the
library CTranslate2 uses there) runs a wide output layer faster, and an OPUS-MT-base model's
58k-wide one is half of a decoding step (measured in docs/studies/importing.md). The decoder's
other Linear layers (512-2048 wide) gained nothing measurable, so they stay `nn.Linear`. The
weight is used as it is (no packed copy); the logits bias is added inside the same call.

oneDNN builds and keeps a kernel, and its memory, for every row count it meets, and a decode
meets hundreds (sentences finish, beams shrink), so rows are padded up to a multiple of
`ROW_STEP` and fed `MAX_ROWS` at a time: at most 32 row counts.

bf16 on a CPU with native bf16 (`onednn_bf16`): every Linear layer of the half copy goes through
oneDNN on its weight reordered once into oneDNN's blocked layout (torch's bf16 `F.linear` hands
over the plain weight at every call), rows padded the same way (and to `LONG_ROW_STEP` beyond
`MAX_ROWS`, in one call: split calls cost beam search what packing gained), since oneDNN builds a
bf16 kernel for every shape it meets and a fresh `mt translate` pays for each. Against torch's
bf16 products this pays at beam 5, warm and more so in a fresh process's first pass, and leaves
greedy about even (docs/studies/bf16-and-threads.md). The reorder gets no batch-size hint: one
of 256 rows ran slower at the rows a decoding step has.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from mt.model import FeedForward, applied, fusable

ROW_STEP = 8
MAX_ROWS = 256  # mt.search.steps.ROWS_PER_CHUNK: search projects this many rows at a time
LONG_ROW_STEP = 64  # bf16: more rows (the encoder's, a batch's first step) pad to this


@functools.cache
def available() -> bool:
    """This torch has the oneDNN op and it computes a Linear layer. It is the op torch.compile's
    CPU backend calls, not a documented API, so a torch without it decodes with `F.linear`."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        # Fixed values, not random ones: a probe during training's evaluation must not move
        # the global RNG that dropout draws from.
        w = torch.arange(12, dtype=torch.float32).view(3, 4) / 7
        b, x = torch.tensor([0.5, -1.0, 2.0]), torch.linspace(-1, 1, 8).view(2, 4)
        y = torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")
        return bool(torch.allclose(y, F.linear(x, w, b), atol=1e-5))
    except (RuntimeError, AttributeError, TypeError):
        return False


class OneDnnLinear(nn.Module):
    """`F.linear(x, weight, bias)` through oneDNN, for fp32 inference on CPU; shares `weight`
    and `bias` with the model (nothing is copied). Other dtypes, and calls under autocast,
    go to `F.linear`."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.weight, self.bias = weight, bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or torch.is_autocast_enabled("cpu"):
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(-1, x.size(-1))
        parts = [_padded(part, self.weight, self.bias) for part in flat.split(MAX_ROWS)]
        y = parts[0] if len(parts) == 1 else torch.cat(parts)
        return y.view(*x.shape[:-1], y.size(-1))


class PackedLinear(nn.Module):
    """A bf16 Linear layer for decoding on a CPU: the weight is held only in oneDNN's blocked
    layout, so the half copy costs no more memory than before; inputs are cast to bf16.
    `post` "relu" applies a ReLU inside the same call (oneDNN's post-op), sparing a pass over
    the feed-forward layer's widest activations."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, post: str = "none") -> None:
        super().__init__()
        weight = weight.detach().to(torch.bfloat16)
        self.out_features = weight.size(0)
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight)
        self.bias = None if bias is None else bias.detach().to(torch.bfloat16)
        self.post = post

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.to(torch.bfloat16).reshape(-1, x.size(-1))
        step = ROW_STEP if flat.size(0) <= MAX_ROWS else LONG_ROW_STEP
        y = _padded(flat, self.packed, self.bias, step, self.post)
        return y.view(*x.shape[:-1], self.out_features)


def _padded(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    step: int = ROW_STEP,
    post: str = "none",
) -> torch.Tensor:
    """oneDNN's product of `x`'s rows, padded to a multiple of `step` for the call."""
    rows = x.size(0)
    pad = -rows % step
    if pad:
        x = torch.cat([x, x.new_zeros(pad, x.size(1))])
    y = torch.ops.mkldnn._linear_pointwise(x, weight, bias, post, [], "")
    return y[:rows] if pad else y


def onednn_output(model: nn.Module) -> nn.Module:
    """A copy of `model` (a Transformer or an Ensemble of them) in eval mode whose output layer,
    logits bias included, computes through oneDNN. The copy shares every parameter and buffer
    with `model` (only the module objects are new), so it costs no weight memory, and the
    model passed in (maybe mid-training) is not changed."""
    shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    fast = copy.deepcopy(model, memo=shared).eval()
    for member in getattr(fast, "members", [fast]):
        _set_output(member, OneDnnLinear)
    return fast


def _set_output(member: nn.Module, kind: Callable[..., nn.Module]) -> None:
    """`member`'s output layer computed by a `kind` layer, its logits bias inside; an adapted
    output layer (mt.adapt.lora) keeps its update beside a `kind` base, which adds the bias."""
    output = member.output
    if type(output) is nn.Linear:
        member.output = kind(output.weight, member.output_bias)
    else:
        output.base = kind(output.base.weight, member.output_bias)
    member.output_bias = None


@functools.cache
def bf16_available() -> bool:
    """This torch packs a bf16 weight for oneDNN and computes a Linear layer with it."""
    if not (available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
        return False
    try:
        w = (torch.arange(12, dtype=torch.float32).view(3, 4) / 7).to(torch.bfloat16)
        x = torch.linspace(-1, 1, 8).view(2, 4).to(torch.bfloat16)
        y = PackedLinear(w, None)(x)
        return bool(torch.allclose(y.float(), F.linear(x, w).float(), atol=1e-2))
    except (RuntimeError, AttributeError, TypeError):
        return False


def onednn_bf16(model: nn.Module) -> nn.Module:
    """A bf16 copy of `model` (a Transformer or an Ensemble of them) in eval mode whose Linear
    layers, the output layer and its logits bias included, compute through oneDNN with packed
    weights, and a ReLU feed-forward layer's activation inside its first product. The
    embeddings stay plain bf16 tables (a tied output layer gets its own packed copy)."""
    half = copy.deepcopy(model).to(torch.bfloat16).eval()
    for member in getattr(half, "members", [half]):
        _set_output(member, PackedLinear)
    for module in list(half.modules()):
        if isinstance(module, FeedForward) and fusable(module):
            module.fc1 = PackedLinear(module.fc1.weight, module.fc1.bias, post="relu")
            module.activation = applied
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, PackedLinear(child.weight, child.bias))
    return half

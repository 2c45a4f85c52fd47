"""The output layer of fp32 decoding on CPU through oneDNN's matrix multiply (`decode.gemm`).

torch's default CPU fp32 GEMM is MKL's, which on AMD CPUs takes a slower path: the 58k-wide
output layer of an OPUS-MT-base model, half of a decoding step there, ran 1.3-1.6x faster
through oneDNN (the library CTranslate2 uses on AMD) on 16-256 rows, 1 EPYC Zen 3 core
(docs/benchmarks.md). The decoder's other Linear layers (512-2048 wide) gained nothing
measurable, so they stay `nn.Linear`. The weight is used as it is (no packed copy); the logits
bias is added inside the same call.

oneDNN builds and keeps a kernel for every row count it meets (~0.7 MB each), and a decode
meets hundreds (sentences finish, beams shrink), so rows are padded up to a multiple of
`ROW_STEP` and fed `MAX_ROWS` at a time: at most 32 row counts, ~22 MB.
"""

from __future__ import annotations

import copy
import functools

import torch
import torch.nn.functional as F
from torch import nn

ROW_STEP = 8
MAX_ROWS = 256  # mt.decode.steps.ROWS_PER_CHUNK: search projects this many rows at a time


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
        parts = [self._rows(part) for part in flat.split(MAX_ROWS)]
        y = parts[0] if len(parts) == 1 else torch.cat(parts)
        return y.view(*x.shape[:-1], y.size(-1))

    def _rows(self, x: torch.Tensor) -> torch.Tensor:
        """At most MAX_ROWS rows, padded to a multiple of ROW_STEP for the call."""
        rows = x.size(0)
        pad = -rows % ROW_STEP
        if pad:
            x = torch.cat([x, x.new_zeros(pad, x.size(1))])
        y = torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return y[:rows] if pad else y


def onednn_output(model: nn.Module) -> nn.Module:
    """A copy of `model` (a Transformer or an Ensemble of them) in eval mode whose output layer,
    logits bias included, computes through oneDNN. The copy shares every parameter and buffer
    with `model` (only the module objects are new), so it costs no weight memory, and the
    model passed in (maybe mid-training) is not changed."""
    shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    fast = copy.deepcopy(model, memo=shared).eval()
    for member in getattr(fast, "members", [fast]):
        member.output = OneDnnLinear(member.output.weight, member.output_bias)
        member.output_bias = None
    return fast

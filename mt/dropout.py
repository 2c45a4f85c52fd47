"""Dropout whose CPU masks come from a counter hash instead of one Bernoulli draw per element.

torch's CPU dropout draws every element from the serial Mersenne Twister: with the paper's
dropout of 0.1 on every residual branch that is a visible share of a base-model training step.
Here one 32-bit seed is drawn from torch's default generator per call
(so `torch.manual_seed` and the RNG state saved in checkpoints still make runs reproducible),
and the mask is `fmix32(counter + seed)` (MurmurHash3's finaliser, vectorised over int32
tensors) split into two 16-bit draws per hash, several times cheaper on CPU. The drop
probability is rounded to a multiple of 1/65536 (0.1 becomes 0.100006) and kept values are
scaled by the exact inverse of the realised keep rate, so the expected value is unchanged.
On other devices torch's own fused kernel is already fast and is used as is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_C1 = 0x85EBCA6B - (1 << 32)  # MurmurHash3 fmix32 constants, as signed int32
_C2 = 0xC2B2AE35 - (1 << 32)


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """Boolean mask, True with probability ~1 - p, and the scale 1 / (realised keep rate)."""
    n = 1
    for s in shape:
        n *= s
    drop = round(p * 65536)
    seed = int(torch.randint(-(1 << 31), 1 << 31, (), dtype=torch.int64))
    x = torch.arange((n + 1) // 2, dtype=torch.int32, device=device)
    x += seed  # wraps modulo 2^32, as uint32 arithmetic would
    # fmix32 with logical right shifts (torch's >> on int32 is arithmetic, hence the masks)
    x ^= (x >> 16) & 0xFFFF
    x *= _C1
    x ^= (x >> 13) & 0x7FFFF
    x *= _C2
    x ^= (x >> 16) & 0xFFFF
    keep = x.view(torch.int16)[:n].view(shape) >= drop - 32768
    return keep, 65536.0 / (65536 - drop)


class _MaskedScale(torch.autograd.Function):
    """y = x * keep * scale, saving only the boolean mask for backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(keep).mul_(scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return grad.mul(keep).mul_(ctx.scale), None, None


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout: zero each element with probability p while training, else identity."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, True)
    keep, scale = keep_mask(x.shape, p, x.device)
    return _MaskedScale.apply(x, keep, scale)


class Dropout(nn.Module):
    """Drop-in for nn.Dropout that uses the cheap CPU masks above."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"

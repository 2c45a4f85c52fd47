"""The simpler simple recurrent unit (SSRU), a light stand-in for a decoder layer's
self-attention (Kim et al. 2019, "From Research to Production and Back: Ludicrously Fast Neural
Machine Translation"; the decoder of Bergamot's students).

    f_t = sigmoid(W_f x_t + b_f)
    c_t = f_t * c_{t-1} + (1 - f_t) * W x_t
    y_t = ReLU(c_t)

Why: a decoding step of self-attention reads every earlier position's keys and values, so its
cost and its cache grow with the output and each row's cache is copied whenever search reorders
rows; the SSRU carries one vector per row, and a step is one product of the step's token and
a few element-wise operations. It has no output projection and no heads. Training runs the
recurrence position by position (a Python loop over the target length: element-wise work, the
products for all positions are made at once before it); the running state is kept in fp32 under
bf16 autocast, so a long target does not sum bf16 rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mt.decoder_state import RecurrentCache


class SSRU(nn.Module):
    """Takes a decoder self-attention's place and its call: (x, mask, cache, need_weights,
    causal) -> (y, None). The recurrence is causal by construction, so `mask` and `causal` are
    not needed: targets are right-padded, and a padded position never feeds a real one."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, 2 * d_model)  # [W x ; W_f x + b_f]: one product

    def forward(
        self,
        x: torch.Tensor,  # (B, T, D)
        mask: torch.Tensor | None = None,
        cache: RecurrentCache | None = None,
        need_weights: bool = False,
        causal: bool = False,
    ) -> tuple[torch.Tensor, None]:
        wx, gate = self.proj(x).float().chunk(2, dim=-1)
        forget = torch.sigmoid(gate)
        c = cache.c if cache is not None and cache.c is not None else wx.new_zeros(wx[:, 0].shape)
        states = []
        for t in range(x.size(1)):
            c = torch.lerp(wx[:, t], c, forget[:, t])  # f * c + (1 - f) * Wx
            states.append(c)
        if cache is not None:
            cache.c = c
        y = states[0][:, None] if len(states) == 1 else torch.stack(states, dim=1)
        return F.relu(y).to(x.dtype), None

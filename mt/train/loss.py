"""Label-smoothed cross entropy that ignores padding."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed smoothed loss and summed NLL over non-pad targets.

    The smoothed target puts 1 - eps on the reference and spreads eps uniformly over the whole
    vocabulary (the paper's eps_ls = 0.1), i.e. loss = (1 - eps) * nll + eps * mean_v(-log p_v).
    Sums, not means, so gradient accumulation and DDP can normalise by the true token count.
    """
    logp = F.log_softmax(logits.float(), dim=-1).view(-1, logits.size(-1))  # (N, V)
    target = target.reshape(-1)
    keep = target.ne(pad_id)
    nll = -logp.gather(1, target[:, None]).squeeze(1)
    smooth = -logp.mean(dim=-1)
    loss = (1.0 - smoothing) * nll + smoothing * smooth
    # Zeroing pads rather than indexing with `keep` keeps shapes static: boolean indexing
    # would make the host wait for the device (to size the result) on every micro-batch.
    return loss.masked_fill(~keep, 0.0).sum(), nll.masked_fill(~keep, 0.0).sum()

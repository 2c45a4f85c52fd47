"""Label-smoothed cross entropy that ignores padding, and R-Drop's consistency term."""

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
    return smoothed_loss_of_log_probs(log_probs(logits), target, smoothing, pad_id)


def log_probs(logits: torch.Tensor) -> torch.Tensor:
    """Log-softmax over the vocabulary in fp32 (under autocast the logits may be half)."""
    return F.log_softmax(logits.float(), dim=-1)


def smoothed_loss_of_log_probs(
    logp: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """label_smoothed_loss from log-probabilities already computed, so that R-Drop's KL term
    reuses them instead of normalising the (batch, length, vocabulary) logits a second time."""
    logp = logp.view(-1, logp.size(-1))  # (N, V)
    target = target.reshape(-1)
    keep = target.ne(pad_id)
    nll = -logp.gather(1, target[:, None]).squeeze(1)
    smooth = -logp.mean(dim=-1)
    loss = (1.0 - smoothing) * nll + smoothing * smooth
    # Zeroing pads rather than indexing with `keep` keeps shapes static: boolean indexing
    # would make the host wait for the device (to size the result) on every micro-batch.
    return loss.masked_fill(~keep, 0.0).sum(), nll.masked_fill(~keep, 0.0).sum()


def symmetric_kl(
    logp_a: torch.Tensor, logp_b: torch.Tensor, target: torch.Tensor, pad_id: int
) -> torch.Tensor:
    """Summed over non-pad targets: (KL(p_a || p_b) + KL(p_b || p_a)) / 2, R-Drop's term that
    pulls two dropout-masked predictions of the same batch together. Takes log-probabilities
    (`log_probs`), which the smoothed loss of the same forward pass has already computed."""
    kl = ((logp_a.exp() - logp_b.exp()) * (logp_a - logp_b)).sum(dim=-1) / 2  # both KLs, halved
    return kl.masked_fill(target.eq(pad_id), 0.0).sum()


def kl_to_reference(
    logp_ref: torch.Tensor, logp: torch.Tensor, target: torch.Tensor, pad_id: int
) -> torch.Tensor:
    """Summed over non-pad targets: KL(p_ref || p), how far the distribution `logp` moved from
    a fixed reference `logp_ref` (a frozen base, mt/adapt/keep.py). Its gradient is that of the
    cross entropy toward the reference's distribution (word-level distillation): the reference
    takes none."""
    kl = (logp_ref.exp() * (logp_ref - logp)).sum(dim=-1)  # (B, T)
    return kl.masked_fill(target.eq(pad_id), 0.0).sum()

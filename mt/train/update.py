"""One optimizer update: gradient accumulation over a group of batches, DDP's gradient sync on
the last of them, clipping, and a non-finite update skipped on the device.

The loss is scaled to the gradient per target token of the whole global batch (all batches of
the group on all ranks), so the update does not depend on how the batch was split. An update
whose loss or gradient is not finite is skipped without a host sync (fused Adam reads
`found_inf`); `bad_run` counts such updates in a row for the divergence rule, `bad_total` all of
them for the log. Both travel in `last.pt` (`counts`), so a resumed run logs the run's total and
its divergence rule counts across the resume. With `finetune.keep: kl` the objective adds a KL term
toward the frozen base (mt/adapt/keep.py); `kl_sum` sums it for the log.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from mt.adapt.keep import Keep
from mt.batching import Batch
from mt.config import ModelConfig, TrainConfig
from mt.device import autocast
from mt.tokenizer import PAD
from mt.train import distributed
from mt.train.distributed import Dist
from mt.train.loss import kl_to_reference, log_probs, smoothed_loss_of_log_probs, symmetric_kl
from mt.train.schedule import learning_rate


class Update:
    """The optimizer (Adam), the fp16 scaler and the steps they take; `net` is what the
    forward pass calls: `model`, or its DDP or compiled wrapper once the trainer sets it."""

    def __init__(
        self,
        t: TrainConfig,
        m: ModelConfig,
        model: torch.nn.Module,
        d: Dist,
        device: torch.device,
        precision: str,
        keep: Keep | None = None,
        groups: list[dict[str, Any]] | None = None,
    ) -> None:
        """`t` and `m`: the train and model sections (the schedule reads `model.d_model`);
        `keep`: the frozen base of `finetune.keep` whose KL term the objective adds; `groups`:
        Adam's parameter groups where they differ (an `lr_scale` each times the schedule's
        rate), else every trainable parameter in one."""
        self.train_cfg, self.model_cfg = t, m
        self.keep = keep
        # finetune.keep: the KL term summed over the updates since the log last read it
        self.kl_sum = torch.zeros((), device=device)
        self.model, self.net = model, model
        self.dist, self.device, self.precision = d, device, precision
        self.optimizer = torch.optim.Adam(
            groups or [p for p in model.parameters() if p.requires_grad],  # not train.freeze's
            lr=learning_rate(1, t, m),
            betas=(t.optimizer_betas[0], t.optimizer_betas[1]),
            eps=t.optimizer_eps,
            weight_decay=t.weight_decay,
            fused=True,  # one kernel for all parameters instead of one per tensor
        )
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        self.bad_run = torch.zeros((), dtype=torch.long, device=device)
        self.bad_total = torch.zeros((), dtype=torch.long, device=device)

    def counts(self) -> dict[str, int]:
        """The skipped-update counts for `last.pt` (a host sync: at checkpoints only)."""
        return {"in_a_row": int(self.bad_run), "total": int(self.bad_total)}

    def restore_counts(self, saved: dict[str, int] | None) -> None:
        """Put back `counts()` from `last.pt`; a checkpoint written without them starts at 0."""
        if saved:
            self.bad_run = torch.tensor(saved["in_a_row"], dtype=torch.long, device=self.device)
            self.bad_total = torch.tensor(saved["total"], dtype=torch.long, device=self.device)

    def __call__(
        self, group: list[Batch], step: int, used: float = 0.0
    ) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]:
        """Optimizer step number `step` over `group` with `used` of the budget spent (for
        train.cooldown): the loss sums, target tokens and gradient norm before clipping, left
        on the device."""
        t = self.train_cfg
        lr = learning_rate(step, t, self.model_cfg, used)
        for g in self.optimizer.param_groups:
            g["lr"] = lr * g.get("lr_scale", 1.0)
        ntok = sum(b.tgt_tokens for b in group)
        scale: float | torch.Tensor = 1.0 / ntok
        if self.dist.active:
            # DDP averages gradients over ranks, so scale by world / global tokens to get the
            # gradient of the loss per target token of the whole global batch. The count stays
            # on the device: no host sync per step.
            tok = torch.tensor(float(ntok), device=self.device)
            scale = self.dist.world / distributed.all_sum(self.dist, tok)
        loss_sum = torch.zeros((), device=self.device)
        nll_sum = torch.zeros((), device=self.device)
        for i, b in enumerate(group):
            b = b.to(self.device)
            last = i == len(group) - 1
            sync = contextlib.nullcontext() if last or not self.dist.active else self.net.no_sync()
            with sync:
                loss, nll, objective = self._losses(b)
                self.scaler.scale(objective * scale).backward()
            loss_sum += loss.detach()
            nll_sum += nll.detach()
        self.scaler.unscale_(self.optimizer)
        params = [p for p in self.model.parameters() if p.grad is not None]
        if t.clip_norm:
            norm = torch.nn.utils.clip_grad_norm_(params, t.clip_norm)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        # A non-finite loss or gradient: skip the update on the device (fused Adam reads
        # `found_inf`), with no host sync; fp16's scaler does the same with its own flag.
        bad = ~torch.isfinite(norm)
        if not self.scaler.is_enabled():
            self.optimizer.found_inf = bad.float()
            self.optimizer.grad_scale = None
        self.bad_run = (self.bad_run + 1) * bad  # updates skipped in a row
        self.bad_total += bad
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_sum, nll_sum, ntok, norm.detach()

    def _losses(self, b: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The batch's summed smoothed loss and NLL (for the log) and the objective to descend.
        With train.rdrop the batch runs twice in one forward pass (stacked, so two dropout
        masks); the loss is the mean of the two and the objective adds alpha/2 times their
        symmetric KL (the mean of both KLs): R-Drop's loss (Liang et al., 2021) halved, so
        alpha means what it means there."""
        t = self.train_cfg
        src, tgt_in, tgt_out = b.src, b.tgt_in, b.tgt_out
        if t.rdrop:
            src, tgt_in, tgt_out = (torch.cat([x, x]) for x in (src, tgt_in, tgt_out))
        with autocast(self.device, self.precision):
            logits = self.net(src, tgt_in)
        logp = log_probs(logits)
        loss, nll = smoothed_loss_of_log_probs(logp, tgt_out, t.label_smoothing, PAD)
        objective = loss
        if t.rdrop:
            loss, nll = loss / 2, nll / 2
            kl = symmetric_kl(*logp.chunk(2), b.tgt_out, PAD)
            objective = loss + t.rdrop * kl / 2
        if self.keep is not None:  # finetune.keep: toward the frozen base (mt/adapt/keep.py)
            term = self._kept(b, src, tgt_in, tgt_out, logp)
            if term is not None:
                term = term / 2 if t.rdrop else term  # per target token, as the loss
                self.kl_sum += term.detach()
                objective = objective + self.keep.weight * term
        return loss, nll, objective

    def _kept(
        self,
        b: Batch,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        tgt_out: torch.Tensor,
        logp: torch.Tensor,
    ) -> torch.Tensor | None:
        """finetune.keep's summed KL on the rows it sees (finetune.keep_on), None where the
        batch holds none of them; with train.rdrop the rows stand twice (both copies)."""
        assert self.keep is not None
        n = b.src.size(0)
        rows = self.keep.rows(b.general, n)
        if rows is not None:
            if not rows.numel():
                return None
            if self.train_cfg.rdrop:  # the batch stands twice, stacked
                rows = torch.cat([rows, rows + n])
            rows = rows.to(self.device)
            src, tgt_in, tgt_out, logp = (
                x.index_select(0, rows) for x in (src, tgt_in, tgt_out, logp)
            )
        reference = self.keep.reference(src, tgt_in, self.precision)
        return kl_to_reference(reference, logp, tgt_out, PAD)

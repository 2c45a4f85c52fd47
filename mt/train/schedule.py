"""Learning-rate schedules as pure functions of the step and the share of the budget spent, so
resuming needs only the step and the training time the checkpoint holds."""

from __future__ import annotations

from mt.config import ModelConfig, TrainConfig


def noam_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """The paper's schedule: scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def inverse_sqrt_lr(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to `peak` at `warmup`, then decay with 1/sqrt(step) (fairseq's)."""
    step = max(step, 1)
    return peak * min(step / warmup, (warmup / step) ** 0.5)


def constant_lr(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to `peak` at `warmup`, then flat: with `train.cooldown` the
    warmup-stable-decay shape, which spends a short budget nearer the peak than 1/sqrt does."""
    return peak * min(max(step, 1) / warmup, 1.0)


def budget_used(train: TrainConfig, step: int, elapsed: float) -> float:
    """The share of the run's budget spent at `step` after `elapsed` seconds of training: of
    max_steps, or of max_minutes when the clock is nearer its end (in [0, 1])."""
    used = step / train.max_steps
    if train.max_minutes:
        used = max(used, elapsed / (60 * train.max_minutes))
    return min(used, 1.0)


def cooldown_factor(cooldown: float, used: float) -> float:
    """1 until the last `cooldown` share of the budget, then falling linearly to 0 at its end:
    a short run ends at a small learning rate, which a time budget otherwise never reaches."""
    if not cooldown:
        return 1.0
    return max(0.0, min(1.0, (1.0 - used) / cooldown))


def learning_rate(step: int, train: TrainConfig, model: ModelConfig, used: float = 0.0) -> float:
    """The rate of update `step` when `used` of the budget is spent (budget_used)."""
    if train.schedule == "noam":
        lr = noam_lr(step, model.d_model, train.warmup, train.lr_scale)
    elif train.schedule == "constant":
        lr = constant_lr(step, train.lr, train.warmup)
    else:
        lr = inverse_sqrt_lr(step, train.lr, train.warmup)
    return lr * cooldown_factor(train.cooldown, used)

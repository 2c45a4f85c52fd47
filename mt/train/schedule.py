"""Learning-rate schedules as pure functions of the step, so resuming needs only the step."""

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


def learning_rate(step: int, train: TrainConfig, model: ModelConfig) -> float:
    if train.schedule == "noam":
        return noam_lr(step, model.d_model, train.warmup, train.lr_scale)
    return inverse_sqrt_lr(step, train.lr, train.warmup)

"""Learning-rate schedules at known steps."""

from __future__ import annotations

import pytest

from mt.config import ModelConfig, TrainConfig
from mt.train.schedule import inverse_sqrt_lr, learning_rate, noam_lr


def test_noam_known_values():
    d, w = 512, 4000
    assert noam_lr(w, d, w) == pytest.approx(d**-0.5 * w**-0.5)
    assert noam_lr(1, d, w) == pytest.approx(d**-0.5 * w**-1.5)
    assert noam_lr(4 * w, d, w) == pytest.approx(d**-0.5 * (4 * w) ** -0.5)
    assert noam_lr(4 * w, d, w) == pytest.approx(noam_lr(w, d, w) / 2)
    assert noam_lr(w // 2, d, w) == pytest.approx(noam_lr(w, d, w) / 2)  # linear warmup
    assert noam_lr(w, d, w, scale=2.0) == pytest.approx(2 * d**-0.5 * w**-0.5)
    assert noam_lr(0, d, w) == noam_lr(1, d, w)  # step 0 is treated as step 1, never lr 0


def test_inverse_sqrt_known_values():
    peak, w = 5e-4, 100
    assert inverse_sqrt_lr(w, peak, w) == pytest.approx(peak)
    assert inverse_sqrt_lr(1, peak, w) == pytest.approx(peak / w)
    assert inverse_sqrt_lr(w // 2, peak, w) == pytest.approx(peak / 2)
    assert inverse_sqrt_lr(4 * w, peak, w) == pytest.approx(peak / 2)
    assert inverse_sqrt_lr(0, peak, w) == inverse_sqrt_lr(1, peak, w)


@pytest.mark.parametrize(
    "lr",
    [lambda s: noam_lr(s, 64, 50), lambda s: inverse_sqrt_lr(s, 1e-3, 50)],
    ids=["noam", "inverse_sqrt"],
)
def test_rises_to_warmup_then_falls(lr):
    values = [lr(s) for s in range(1, 501)]
    peak = max(range(len(values)), key=values.__getitem__) + 1
    assert peak == 50
    assert all(a < b for a, b in zip(values[:49], values[1:50]))
    assert all(a > b for a, b in zip(values[49:], values[50:]))
    assert all(v > 0 for v in values)


def test_learning_rate_dispatches_on_config():
    model = ModelConfig(d_model=64, n_heads=4)
    noam = TrainConfig(schedule="noam", warmup=10, lr_scale=2.0)
    inv = TrainConfig(schedule="inverse_sqrt", warmup=10, lr=3e-3)
    assert learning_rate(7, noam, model) == pytest.approx(noam_lr(7, 64, 10, 2.0))
    assert learning_rate(7, inv, model) == pytest.approx(inverse_sqrt_lr(7, 3e-3, 10))
    assert learning_rate(10, inv, model) == pytest.approx(3e-3)

"""Learning-rate schedules at known steps, and train.cooldown's fall to 0 at the budget's end."""

from __future__ import annotations

import json

import pytest
from support.tasks import reverse_task_config

from mt.config import ModelConfig, TrainConfig
from mt.train.schedule import (
    budget_used,
    constant_lr,
    cooldown_factor,
    inverse_sqrt_lr,
    learning_rate,
    noam_lr,
)


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


def test_constant_warms_up_then_stays_at_the_peak():
    peak, w = 2e-3, 100
    assert constant_lr(1, peak, w) == pytest.approx(peak / w)
    assert constant_lr(w // 2, peak, w) == pytest.approx(peak / 2)
    assert constant_lr(0, peak, w) == constant_lr(1, peak, w)
    assert [constant_lr(s, peak, w) for s in (w, 2 * w, 100 * w)] == [peak] * 3
    values = [constant_lr(s, peak, w) for s in range(1, w + 1)]
    assert all(a < b for a, b in zip(values, values[1:]))


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
    flat = TrainConfig(schedule="constant", warmup=10, lr=3e-3, cooldown=0.5)
    assert learning_rate(7, flat, model) == pytest.approx(constant_lr(7, 3e-3, 10))
    assert learning_rate(900, flat, model, used=0.4) == pytest.approx(3e-3)
    assert learning_rate(900, flat, model, used=0.75) == pytest.approx(3e-3 / 2)  # the cooldown


def test_budget_used_is_the_budget_nearer_its_end():
    steps_only = TrainConfig(max_steps=200)
    assert budget_used(steps_only, 50, 1e6) == pytest.approx(0.25)  # no clock budget
    both = TrainConfig(max_steps=200, max_minutes=10)
    assert budget_used(both, 50, 60.0) == pytest.approx(0.25)  # steps nearer their end
    assert budget_used(both, 50, 300.0) == pytest.approx(0.5)  # the clock nearer its end
    assert budget_used(both, 500, 900.0) == 1.0  # never past the end


def test_cooldown_falls_linearly_to_zero_over_the_last_share():
    assert cooldown_factor(0.0, 0.99) == 1.0  # off
    assert cooldown_factor(0.2, 0.0) == cooldown_factor(0.2, 0.79) == 1.0
    assert cooldown_factor(0.2, 0.8) == pytest.approx(1.0)
    assert cooldown_factor(0.2, 0.9) == pytest.approx(0.5)
    assert cooldown_factor(0.2, 0.95) == pytest.approx(0.25)
    assert cooldown_factor(0.2, 1.0) == 0.0
    model = ModelConfig(d_model=64, n_heads=4)
    t = TrainConfig(schedule="inverse_sqrt", cooldown=0.2)
    half = inverse_sqrt_lr(40, t.lr, t.warmup) / 2
    assert learning_rate(40, t, model, 0.9) == pytest.approx(half)


def test_a_run_with_cooldown_updates_at_the_scheduled_rates(tmp_path, mt_cli):
    """Every logged rate is the schedule's times the cooldown at the steps done before that
    update, so the last update still moves the weights and the run ends near rate 0."""
    steps, cooldown = 24, 0.5
    config = reverse_task_config(tmp_path, max_steps=steps, log_every=1, cooldown=cooldown)
    result = mt_cli("train", config, "--run-dir", tmp_path / "run")
    assert result.rc == 0, result.err
    lines = (tmp_path / "run" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    rates = {r["step"]: r["lr"] for r in map(json.loads, lines) if "lr" in r}
    assert sorted(rates) == list(range(1, steps + 1))
    t = TrainConfig(schedule="noam", warmup=8, max_steps=steps, cooldown=cooldown)
    model = ModelConfig(d_model=32, n_heads=2, d_ff=64)
    for step, lr in rates.items():
        want = noam_lr(step, 32, 8) * min(1.0, (1 - (step - 1) / steps) / cooldown)
        assert lr == pytest.approx(want, rel=1e-6), step
        assert lr == pytest.approx(learning_rate(step, t, model, (step - 1) / steps), rel=1e-6)
    assert 0 < rates[steps] < rates[steps // 2] / 10

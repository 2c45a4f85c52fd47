"""Dropout by the epochs a budget reaches (mt/train/budget.py): the rule's rates, when and from
what a run decides them, and that they reach every dropout of the model."""

from __future__ import annotations

import pytest
import torch

from mt.config import DropoutByEpochs, ModelConfig, TrainConfig
from mt.config_rules import dropout_rule_checks
from mt.dropout import Dropout
from mt.model import CrossAttention, FeedForward, SelfAttention, Transformer
from mt.train.budget import (
    PROBE,
    REVIEW,
    SKIP,
    WINDOW,
    BudgetDropout,
    interpolate,
    rates_at,
    set_rates,
)

RULE = DropoutByEpochs(
    epochs=[15, 25], dropout=[0.1, 0.2], attention_dropout=[0.0, 0.1], activation_dropout=[]
)


def never(value: float) -> float:
    raise AssertionError("a step-bounded run asks no other rank")


def test_rates_interpolate_between_points_and_hold_outside():
    assert interpolate([15, 25], [0.1, 0.2], 20) == pytest.approx(0.15)
    assert interpolate([15, 25], [0.1, 0.2], 3) == 0.1
    assert interpolate([15, 25], [0.1, 0.2], 40) == 0.2
    assert interpolate([0, 10, 20], [0.0, 0.3, 0.1], 15) == pytest.approx(0.2)
    assert rates_at(RULE, 17.5) == {"dropout": 0.125, "attention_dropout": 0.025}
    assert rates_at(RULE, 30) == {"dropout": 0.2, "attention_dropout": 0.1}  # activation: kept


def test_a_step_bounded_run_decides_before_its_first_update():
    train = TrainConfig(max_steps=2000, dropout_by_epochs=RULE)
    budget = BudgetDropout(RULE, train)
    assert budget.pending and "from max_steps" in budget.announce()
    epochs, how = budget.after(0, 0.0, 100, never)
    assert epochs == 20 and "max_steps 2,000" in how
    assert budget.chosen == {"dropout": 0.15, "attention_dropout": 0.05}
    assert not budget.pending and budget.after(1, 1.0, 100, never) is None
    capped = BudgetDropout(RULE, TrainConfig(max_steps=2000, max_epochs=12))
    assert capped.after(0, 0.0, 100, never)[0] == 12  # max_epochs ends it first


def test_a_time_bounded_run_projects_its_epochs_from_the_pace_after_the_probe():
    """Two updates a second after a slow start, 10 minutes, 50 updates an epoch: the probe
    measures 2.0/s from update SKIP on, and the rest of the budget at that pace decides."""
    train = TrainConfig(max_minutes=10, max_steps=100_000)
    budget = BudgetDropout(RULE, train)
    assert f"after {SKIP + PROBE} updates" in budget.announce()
    elapsed, decided = 0.0, None
    for step in range(SKIP + PROBE + 1):
        decided = budget.after(step, elapsed, 50, lambda v: v)
        if step < SKIP + PROBE:
            assert decided is None, step
        elapsed += 3.0 if step < SKIP else 0.5  # the first updates set kernels up
    start = SKIP * 3.0 + PROBE * 0.5
    expected = (SKIP + PROBE + 2.0 * (600 - start)) / 50
    assert decided[0] == pytest.approx(expected)
    assert "2.00 updates/s" in decided[1]
    assert budget.chosen == rates_at(RULE, expected)
    # rank 0's projection is what every rank takes
    other = BudgetDropout(RULE, train)
    for step in range(SKIP + PROBE + 1):
        decided = other.after(step, step * 100.0, 50, lambda v: 30.0)
    assert decided[0] == 30.0 and other.chosen == {"dropout": 0.2, "attention_dropout": 0.1}


def test_a_burst_of_load_in_the_probe_is_undone_at_the_review():
    """30 minutes, 50 updates an epoch: a busy machine takes updates 21-80 at 0.5/s, then
    the run goes at 2/s. The probe's median window is a slow one; the review at a fifth of
    the budget takes the median of every window so far, the fast pace, and is final."""
    train = TrainConfig(max_minutes=30, max_steps=100_000)
    budget = BudgetDropout(RULE, train)
    assert "reviewed at 6 minutes" in budget.announce()
    elapsed, decisions = 0.0, []
    for step in range(2000):
        decided = budget.after(step, elapsed, 50, lambda v: v)
        if decided is not None:
            decisions.append((step, elapsed, *decided, dict(budget.chosen), budget.final))
        if not budget.pending:
            break
        elapsed += 3.0 if step < SKIP else 2.0 if step < 80 else 0.5
    (first, review) = decisions
    assert first[0] == SKIP + PROBE and not first[5]
    assert "0.50 updates/s" in first[3] and f"{PROBE // WINDOW} windows" in first[3]
    assert first[2] == pytest.approx((first[0] + 0.5 * (1800 - first[1])) / 50)
    assert first[4] == rates_at(RULE, first[2])  # 0.5/s: about 18 epochs
    step, at, epochs, how, rates, final = review
    assert final and "review: 2.00 updates/s" in how
    assert at >= REVIEW * 1800 > at - 0.5  # the first update past a fifth of the budget
    assert epochs == pytest.approx((step + 2.0 * (1800 - at)) / 50)
    assert rates == rates_at(RULE, epochs) and rates["dropout"] > first[4]["dropout"]
    assert "kept" in budget.announce() and budget.after(step + 1, at + 1, 50, lambda v: v) is None
    # resumed between the two: the choice stands until this process's own review
    resumed = BudgetDropout(RULE, train, dict(first[4]))
    assert resumed.pending and "until its review" in resumed.announce()


def test_a_resumed_choice_is_kept_and_an_empty_rule_is_off():
    kept = BudgetDropout(RULE, TrainConfig(), {"dropout": 0.17})
    assert not kept.pending and "kept: dropout 0.17" in kept.announce()
    off = BudgetDropout(DropoutByEpochs(), TrainConfig())
    assert not off.pending and off.announce() == ""


def test_set_rates_reaches_every_dropout_of_the_model():
    cfg = ModelConfig(d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1)
    net = Transformer(cfg, 20, 20)
    src = torch.randint(4, 20, (3, 7))
    tgt = torch.randint(4, 20, (3, 5))
    net.train()
    torch.manual_seed(0)
    assert not torch.equal(net(src, tgt), net.eval()(src, tgt))  # dropout 0.1 on
    set_rates(net, cfg, {"dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0})
    assert (cfg.dropout, cfg.attention_dropout, cfg.activation_dropout) == (0.0, 0.0, 0.0)
    torch.testing.assert_close(net.train()(src, tgt), net.eval()(src, tgt), rtol=0, atol=0)
    set_rates(net, cfg, {"dropout": 0.3, "attention_dropout": 0.2, "activation_dropout": 0.1})
    attention = [m for m in net.modules() if isinstance(m, SelfAttention | CrossAttention)]
    ffn = [m.dropout for m in net.modules() if isinstance(m, FeedForward)]
    rest = [m for m in net.modules() if isinstance(m, Dropout) and all(m is not f for f in ffn)]
    assert attention and ffn and rest
    assert {m.dropout for m in attention} == {0.2}
    assert {m.p for m in ffn} == {0.1} and {m.p for m in rest} == {0.3}


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (DropoutByEpochs(epochs=[10, 5], dropout=[0.1, 0.2]), "epochs must be increasing"),
        (DropoutByEpochs(epochs=[5, 10], dropout=[0.1]), "dropout needs one rate per epoch"),
        (DropoutByEpochs(epochs=[5], dropout=[1.2]), "dropout must be in [0, 1)"),
        (DropoutByEpochs(epochs=[5]), "epochs needs train.dropout_by_epochs.dropout"),
        (DropoutByEpochs(dropout=[0.1]), "dropout needs train.dropout_by_epochs.epochs"),
        (
            DropoutByEpochs(epochs=[5], dropout=[0.1], attention_dropout=[0.1, 0.2]),
            "attention_dropout needs one rate per epoch count (1)",
        ),
    ],
)
def test_a_broken_rule_is_refused_with_its_key(rule, message):
    failed = [
        text for ok, text in dropout_rule_checks(TrainConfig(dropout_by_epochs=rule)) if not ok
    ]
    assert any(message in text for text in failed), failed

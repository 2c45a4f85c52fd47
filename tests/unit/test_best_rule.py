"""Which evaluation becomes best.pt (mt/train/best.py), on metrics written by hand."""

from __future__ import annotations

import pytest

from mt.config import WatchConfig
from mt.train.best import BestRule, Bound, choose, consider
from mt.train.state import TrainState


def ev(step: int, dev: float, general: float, other: float = 50.0) -> tuple[int, dict]:
    return step, {
        "valid_loss": 3.0,
        "dev_bleu": dev,
        "watch_bleu/general": general,
        "watch_bleu/other": other,
    }


# A fine-tuning run: the domain's BLEU rises while the general set's falls.
RUN = [
    ev(0, 2.0, 22.7),  # the base
    ev(100, 8.0, 22.1),
    ev(200, 11.0, 21.8),  # the best within 1.0 of 22.7 (floor 21.7)
    ev(300, 14.0, 19.0),  # the domain's best overall, the general set lost
    ev(400, 10.0, 21.9),  # admitted, below step 200's 11.0
]


def test_without_bounds_the_highest_dev_bleu_wins():
    assert choose(BestRule(), RUN) == 300


def test_keep_within_picks_the_domains_best_among_the_admitted():
    assert choose(BestRule((Bound("general", 1.0),)), RUN) == 200
    assert choose(BestRule((Bound("general", 0.6),)), RUN) == 100  # floor 22.1
    assert choose(BestRule((Bound("general", 5.0),)), RUN) == 300


def test_the_base_is_best_when_nothing_else_keeps_the_general_domain():
    assert choose(BestRule((Bound("general", 0.1),)), RUN) == 0


def test_every_bound_must_hold():
    run = [ev(0, 2.0, 22.7, 40.0), ev(100, 9.0, 22.5, 30.0), ev(200, 8.0, 22.6, 39.5)]
    rule = BestRule((Bound("general", 1.0), Bound("other", 1.0)))
    assert choose(rule, run) == 200
    assert choose(BestRule((Bound("general", 1.0),)), run) == 100


def test_the_start_is_the_first_evaluation_and_ties_keep_the_earlier_step():
    state = TrainState()
    rule = BestRule((Bound("general", 1.0),))
    assert consider(rule, state, *ev(0, 5.0, 20.0))
    assert state.watch_start == {"general": 20.0, "other": 50.0}
    assert not consider(rule, state, *ev(10, 5.0, 20.0))  # a tie
    assert consider(rule, state, *ev(20, 6.0, 19.0))  # exactly at the floor: admitted
    assert not consider(rule, state, *ev(30, 9.0, 18.99))
    assert (state.best_step, state.best_score) == (20, 6.0)
    assert state.watch_start == {"general": 20.0, "other": 50.0}  # kept from the start


def test_without_dev_bleu_the_lowest_loss_wins():
    run = [(0, {"valid_loss": 3.0}), (5, {"valid_loss": 2.5}), (10, {"valid_loss": 2.7})]
    assert choose(BestRule(), run) == 5


def test_the_rule_comes_from_the_watch_entries_and_says_what_it_does():
    watch = [
        WatchConfig(name="general", src="a", ref="b", keep_within=1.0),
        WatchConfig(name="shown", src="c", ref="d"),  # watched, no bound
    ]
    rule = BestRule.of(watch)
    assert rule.bounds == (Bound("general", 1.0),)
    text = rule.describe({"general": 22.71})
    assert "watch_bleu/general >= 21.71" in text and "22.71" in text and "1" in text
    assert "shown" not in text
    assert BestRule.of(watch[1:]).describe() == (
        "the highest dev_bleu (the lowest valid_loss without dev BLEU)"
    )


@pytest.mark.parametrize("within", [0.0, 2.5])
def test_admits_measures_from_the_start(within):
    rule = BestRule((Bound("general", within),))
    start = {"general": 10.0}
    assert rule.admits({"watch_bleu/general": 10.0 - within}, start)
    assert not rule.admits({"watch_bleu/general": 10.0 - within - 0.01}, start)


def test_a_resumed_run_needs_the_start_values_of_its_bounds(tmp_path):
    from mt.errors import MtError

    rule = BestRule((Bound("general", 1.0),))
    rule.check_resumed(TrainState(watch_start={"general": 20.0}), tmp_path / "last.pt")
    BestRule().check_resumed(TrainState(), tmp_path / "last.pt")  # no bounds: nothing needed
    with pytest.raises(MtError, match=r"last.pt holds no start value for general"):
        rule.check_resumed(TrainState(watch_start={"other": 1.0}), tmp_path / "last.pt")

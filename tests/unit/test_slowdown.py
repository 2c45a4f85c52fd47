"""The slow-down warning's rule, fed numbers: once, only after a sustained collapse."""

from __future__ import annotations

from mt.train.logline import SlowdownWatch


def feed(watch: SlowdownWatch, rates: list[float]) -> list[int]:
    """Indices of the intervals at which the watch spoke."""
    return [i for i, r in enumerate(rates) if watch.observe(r) is not None]


def test_sustained_collapse_warns_once():
    watch = SlowdownWatch(baseline=3, ratio=0.5, sustained=3)
    rates = [1000, 1100, 1050, 1020, 400, 450, 420, 300, 200, 400, 100]
    assert feed(watch, rates) == [6]  # third slow interval in a row, and never again


def test_message_names_both_rates_and_the_cause():
    watch = SlowdownWatch(baseline=3, ratio=0.5, sustained=2)
    for r in (900, 1000, 1100, 300):
        assert watch.observe(r) is None
    line = watch.observe(250)
    assert line is not None and "\n" not in line
    assert "250 tgt tok/s" in line and "1,000" in line  # the median of the first three
    assert "another process may be competing for the cores" in line


def test_short_dips_and_noise_do_not_warn():
    watch = SlowdownWatch(baseline=3, ratio=0.5, sustained=3)
    rates = [1000, 1000, 1000] + [400, 400, 900, 400, 400, 600, 700, 480, 520] * 3
    assert feed(watch, rates) == []


def test_a_slow_first_interval_does_not_lower_the_baseline():
    watch = SlowdownWatch(baseline=3, ratio=0.5, sustained=2)
    # Warm-up makes the first interval slow; the median ignores it.
    assert feed(watch, [100, 1000, 1000, 450, 450]) == [4]


def test_a_run_that_starts_slow_and_stays_there_is_not_warned():
    watch = SlowdownWatch()
    assert feed(watch, [300.0] * 50) == []

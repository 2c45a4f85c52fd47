"""Which evaluation becomes `best.pt`: the rule, stated so the run can say which one it used.

Without watched bounds the rule is the one runs always had: the highest `dev_bleu` (or the
lowest dev loss without dev BLEU). A fine-tuning run that watches the general domain
(`train.watch`) can bound it: with `keep_within: 1.0` on the set `general`, only evaluations
whose `watch_bleu/general` is at least the run's start value less 1.0 may become `best.pt` (the
domain's best among the models that kept the general domain). The start values are the
evaluation before the first step (the base model's), kept in `last.pt` with the run's state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mt.config import WatchConfig
from mt.errors import MtError
from mt.train.state import TrainState


@dataclass(frozen=True)
class Bound:
    """A watched set whose BLEU may fall at most `within` below its start value."""

    name: str
    within: float

    @property
    def key(self) -> str:
        return f"watch_bleu/{self.name}"


@dataclass(frozen=True)
class BestRule:
    bounds: tuple[Bound, ...] = ()

    @classmethod
    def of(cls, watch: list[WatchConfig]) -> BestRule:
        return cls(tuple(Bound(w.name, w.keep_within) for w in watch if w.keep_within is not None))

    @staticmethod
    def score(metrics: dict[str, float]) -> float:
        """What is maximised: dev BLEU, or minus the dev loss without it."""
        return metrics.get("dev_bleu", -metrics["valid_loss"])

    def admits(self, metrics: dict[str, float], start: dict[str, float]) -> bool:
        """Whether this evaluation may become best.pt: every bound's set within its margin of
        its `start` value."""
        return all(metrics[b.key] >= start[b.name] - b.within for b in self.bounds)

    def check_resumed(self, state: TrainState, last: Path) -> None:
        """A resumed run must have its bounds' start values in `last.pt`'s state."""
        missing = [b.name for b in self.bounds if b.name not in state.watch_start]
        if missing:
            raise MtError(
                f"train.watch: {last} holds no start value for {', '.join(missing)} (watched "
                "from a later start): its keep_within has nothing to measure from; remove it, "
                "or start the run again"
            )

    def describe(self, start: dict[str, float] | None = None) -> str:
        """The rule in words, with the start values and floors when known."""
        if not self.bounds:
            return "the highest dev_bleu (the lowest valid_loss without dev BLEU)"
        parts = []
        for b in self.bounds:
            if start is not None and b.name in start:
                parts.append(
                    f"{b.key} >= {start[b.name] - b.within:.2f} (its start {start[b.name]:.2f} "
                    f"less keep_within {b.within:g})"
                )
            else:
                parts.append(f"{b.key} at most {b.within:g} below its start")
        return "the highest dev_bleu among the evaluations with " + " and ".join(parts)


def consider(rule: BestRule, state: TrainState, step: int, metrics: dict[str, float]) -> bool:
    """Whether the evaluation at `step` becomes best.pt under `rule`, updating `state`'s best
    score and step (and, at the run's first evaluation with watched sets, their start values).
    An earlier step keeps a tie."""
    if not state.watch_start:
        prefix = "watch_bleu/"
        found = {k.removeprefix(prefix): v for k, v in metrics.items() if k.startswith(prefix)}
        state.watch_start = found
    score = rule.score(metrics)
    better = rule.admits(metrics, state.watch_start) and score > state.best_score
    if better:
        state.best_score, state.best_step = score, step
    return better


def choose(rule: BestRule, evaluations: Iterable[tuple[int, dict[str, float]]]) -> int | None:
    """The step `rule` picks among a run's `evaluations` (step, metrics), in order, the first
    the start: what the trainer does evaluation by evaluation, for tools and tests. None when
    none is admitted (possible only when the first is not the start)."""
    state = TrainState()
    for step, metrics in evaluations:
        consider(rule, state, step, metrics)
    return None if state.best_step < 0 else state.best_step

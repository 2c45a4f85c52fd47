"""What the budget buys: dropout chosen from the epochs a run reaches (`train.dropout_by_epochs`).

The committed 30-minute recipes fix minutes, not epochs, so a CPU that trains three times as
fast runs three times the epochs and overfits at the dropout that suits a slow one (and the
slow one underfits at the fast one's). The rule maps the epochs the run will reach to its
dropout rates. A step-bounded run knows them before its first update (`max_steps`, or
`max_epochs`), so it stays exactly reproducible. A time-bounded one measures its pace in
windows of `WINDOW` updates after skipping the first `SKIP` (whose kernels are being set up),
projects the updates left in `max_minutes` at the median window's pace (evaluations not
counted) and sets the rates after `PROBE` updates, inside the warmup where dropout matters
least; then, a `REVIEW` share into the budget, it projects again from every window so far and
keeps that choice. The median and the second look are for a machine that is busy with
something else for a minute or two at the start: a burst of load in the probe alone would
otherwise set the whole run's regularization (docs/studies/recipe-search.md, round 40).
Under torchrun rank 0's clock and projection rule, as its clock rules the time budget. The
choice goes into `TrainState.dropout` and `dropout_final` (so `--resume` keeps it rather than
probing again) and into the model config that checkpoints carry.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from tqdm import tqdm

from mt.config import DropoutByEpochs, ModelConfig, TrainConfig
from mt.dropout import Dropout
from mt.model import CrossAttention, FeedForward, SelfAttention, Transformer
from mt.train.state import TrainState

SKIP = 20  # updates before the pace is measured: the first batch shapes set kernels up
WINDOW = 20  # updates per pace window: the median window's pace projects
PROBE = 100  # updates whose windows make the first projection of a time budget's epochs
REVIEW = 0.2  # the share of max_minutes after which every window so far projects again


def interpolate(xs: list[float], ys: list[float], x: float) -> float:
    """The piecewise-linear function through (xs, ys) at x; the end values outside."""
    if x <= xs[0]:
        return ys[0]
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:]), strict=False):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1]


def rates_at(rule: DropoutByEpochs, epochs: float) -> dict[str, float]:
    """The dropout keys the rule sets (model config names) and their rates at `epochs`."""
    out = {}
    for key in ("dropout", "attention_dropout", "activation_dropout"):
        values = getattr(rule, key)
        if values:
            out[key] = round(interpolate(rule.epochs, values, epochs), 4)
    return out


def set_rates(model: Transformer, m: ModelConfig, rates: dict[str, float]) -> None:
    """Write `rates` into the model config and every dropout of `model` they govern."""
    for key, value in rates.items():
        setattr(m, key, value)
    for module in model.modules():
        if isinstance(module, SelfAttention | CrossAttention):
            module.dropout = m.attention_dropout
        elif isinstance(module, FeedForward):
            module.dropout.p = m.activation_dropout
    feed_forward = {id(f.dropout) for f in model.modules() if isinstance(f, FeedForward)}
    for module in model.modules():
        if isinstance(module, Dropout) and id(module) not in feed_forward:
            module.p = m.dropout


def bounded_epochs(t: TrainConfig, steps_per_epoch: int) -> float:
    """The epochs `max_steps` and `max_epochs` allow."""
    epochs = t.max_steps / steps_per_epoch
    return min(epochs, t.max_epochs) if t.max_epochs else epochs


@dataclass
class BudgetDropout:
    """Decides the rates from the bounds, or from the pace: after the probe, then once more
    at the review, which is final."""

    rule: DropoutByEpochs
    train: TrainConfig
    chosen: dict[str, float] = field(default_factory=dict)  # TrainState.dropout
    final: bool = False  # TrainState.dropout_final: no review to come
    _marks: list[tuple[int, float]] = field(default_factory=list)  # (step, elapsed) per window
    _seen: int = 0  # updates this process took

    def __post_init__(self) -> None:
        if self.chosen and not self.train.max_minutes:  # a step bound's choice is final
            self.final = True

    @property
    def pending(self) -> bool:
        return bool(self.rule.epochs) and not self.final

    def announce(self) -> str:
        """What the start line says about the rule."""
        if not self.rule.epochs:
            return ""
        if self.final:
            return f", dropout by budget kept: {_shown(self.chosen)}"
        if self.chosen:
            return f", dropout by budget {_shown(self.chosen)} until its review"
        if self.train.max_minutes:
            return (
                f", dropout by budget after {SKIP + PROBE} updates, reviewed at "
                f"{REVIEW * self.train.max_minutes:g} minutes"
            )
        return ", dropout by budget from max_steps"

    def after(
        self, step: int, elapsed: float, steps_per_epoch: int, rank0: Callable[[float], float]
    ) -> tuple[float, str] | None:
        """Call before each update (step = updates so far); returns (epochs, how) when the
        rates are decided now. `rank0` gives rank 0's value of a float on every rank."""
        if not self.pending:
            return None
        t = self.train
        bound = bounded_epochs(t, steps_per_epoch)
        if not t.max_minutes:
            epochs, how = bound, f"max_steps {t.max_steps:,}"
            self.final = True
        else:
            self._seen += 1
            if self._seen > SKIP and (self._seen - SKIP - 1) % WINDOW == 0:
                self._marks.append((step, elapsed))
            windows = len(self._marks) - 1
            if windows < PROBE // WINDOW:
                return None
            if self.chosen:  # the review: rank 0's clock says when, on every rank alike
                if rank0(elapsed) < REVIEW * 60 * t.max_minutes:
                    return None
                self.final = True
            elif self._seen != SKIP + PROBE + 1:
                return None
            pace = statistics.median(
                (s1 - s0) / max(e1 - e0, 1e-9)
                for (s0, e0), (s1, e1) in zip(self._marks, self._marks[1:], strict=False)
            )  # updates/s
            left = max(60 * t.max_minutes - elapsed, 0.0)
            projected = rank0((step + pace * left) / steps_per_epoch)
            epochs = min(projected, bound)
            first, last = self._marks[0][0] + 1, self._marks[-1][0]
            how = (
                f"{pace:.2f} updates/s, the median of {windows} windows of {WINDOW} updates "
                f"over updates {first}-{last}"
            )
            how = f"review: {how}" if self.final else how
        self.chosen.update(rates_at(self.rule, epochs))  # the TrainState's dict
        return epochs, how


def _shown(rates: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in rates.items())


def decide(
    budget: BudgetDropout,
    state: TrainState,
    steps_per_epoch: int,
    model: Transformer,
    m: ModelConfig,
    rank0: Callable[[float], float],
    write: Callable[[dict], None] | None,
) -> None:
    """Before an update: decide the rates when due, set them, log the choice (rank 0)."""
    step = state.step
    decided = budget.after(step, state.elapsed, steps_per_epoch, rank0)
    if decided is None:
        return
    epochs, how = decided
    set_rates(model, m, budget.chosen)
    state.dropout_final = budget.final
    if write is not None:
        review = {"review": True} if budget.final and budget.train.max_minutes else {}
        write({"step": step, "budget_epochs": round(epochs, 2), **review, **budget.chosen})
        tqdm.write(
            f"step {step}: the budget reaches about {epochs:.1f} epochs ({how}, "
            f"{steps_per_epoch:,} updates an epoch): {_shown(budget.chosen)} "
            "(train.dropout_by_epochs)",
            file=sys.stderr,
        )

"""What the budget buys: dropout chosen from the epochs a run reaches (`train.dropout_by_epochs`).

The committed 30-minute recipes fix minutes, not epochs, so a CPU that trains three times as
fast runs three times the epochs and overfits at the dropout that suits a slow one (and the
slow one underfits at the fast one's). The rule maps the epochs the run will reach to its
dropout rates. A step-bounded run knows them before its first update (`max_steps`, or
`max_epochs`), so it stays exactly reproducible; a time-bounded one measures its pace over
`PROBE` updates after skipping the first `SKIP` (whose kernels are being set up), projects the
updates left in `max_minutes` at that pace (evaluations not counted), and sets the rates then,
inside the warmup where dropout matters least. Under torchrun rank 0's projection rules, as its
clock rules the time budget. The choice goes into `TrainState.dropout` (so `--resume` keeps it
rather than probing again) and into the model config that checkpoints carry.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from tqdm import tqdm

from mt.config import DropoutByEpochs, ModelConfig, TrainConfig
from mt.dropout import Dropout
from mt.model import CrossAttention, FeedForward, SelfAttention, Transformer
from mt.train.state import TrainState

SKIP = 20  # updates before the pace is measured: the first batch shapes set kernels up
PROBE = 100  # updates whose pace projects a time budget's epochs


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
    """Decides the rates once, from the bounds or from the pace of the first updates."""

    rule: DropoutByEpochs
    train: TrainConfig
    chosen: dict[str, float] = field(default_factory=dict)  # TrainState.dropout
    _mark: tuple[int, float] | None = None  # (step, elapsed) where the pace is measured from
    _seen: int = 0  # updates this process took

    @property
    def pending(self) -> bool:
        return bool(self.rule.epochs) and not self.chosen

    def announce(self) -> str:
        """What the start line says about the rule."""
        if not self.rule.epochs:
            return ""
        if self.chosen:
            return f", dropout by budget kept: {_shown(self.chosen)}"
        if self.train.max_minutes:
            return f", dropout by budget after {SKIP + PROBE} updates"
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
        else:
            self._seen += 1
            if self._seen == SKIP + 1:
                self._mark = (step, elapsed)
            if self._seen < SKIP + PROBE + 1 or self._mark is None:
                return None
            pace = (step - self._mark[0]) / max(elapsed - self._mark[1], 1e-9)  # updates/s
            left = max(60 * t.max_minutes - elapsed, 0.0)
            projected = rank0((step + pace * left) / steps_per_epoch)
            epochs = min(projected, bound)
            how = f"{pace:.2f} updates/s over updates {self._mark[0] + 1}-{step}"
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
    if write is not None:
        write({"step": step, "budget_epochs": round(epochs, 2), **budget.chosen})
        tqdm.write(
            f"step {step}: the budget reaches about {epochs:.1f} epochs ({how}, "
            f"{steps_per_epoch:,} updates an epoch): {_shown(budget.chosen)} "
            "(train.dropout_by_epochs)",
            file=sys.stderr,
        )

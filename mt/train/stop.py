"""When a run stops: the stop rules, the time left until the first of them, and divergence.

The rules are `train.max_steps`, `max_epochs`, `max_minutes` (training time, across resumes)
and `patience` (evaluations without a better dev score); divergence (too many non-finite
updates in a row) stops with its own exit code. Overfitting stops nothing but is said once,
since a config tuned for one CPU's budget can reach twice the epochs on a faster one.
"""

from __future__ import annotations

from pathlib import Path

from mt.config import TrainConfig
from mt.errors import EXIT_DIVERGED, MtError
from mt.train.state import TrainState


def stop_reason(t: TrainConfig, s: TrainState) -> str | None:
    """The name of the first stop rule that holds now, or None to go on."""
    if s.step >= t.max_steps:
        return "max_steps"
    if t.max_epochs and s.epoch >= t.max_epochs:
        return "max_epochs"
    if t.max_minutes and s.elapsed >= 60 * t.max_minutes:
        return "max_minutes"
    if t.patience and s.bad_evals >= t.patience:
        return "patience"
    return None


def eta(
    t: TrainConfig,
    s: TrainState,
    seconds_per_step: float,
    batches_left: int,
    steps_per_epoch: int,
) -> tuple[float, str]:
    """Seconds to the first stop rule that will fire, and its name (patience cannot be
    foreseen, so it is left out)."""
    options = [((t.max_steps - s.step) * seconds_per_step, "max_steps")]
    if t.max_minutes:
        options.append((60 * t.max_minutes - s.elapsed, "max_minutes"))
    if t.max_epochs:
        per_epoch = max(steps_per_epoch, 1)
        steps = batches_left / t.accum_steps + (t.max_epochs - s.epoch - 1) * per_epoch
        options.append((steps * seconds_per_step, "max_epochs"))
    return min(options)


def diverged(t: TrainConfig, s: TrainState, bad_in_a_row: int, last: Path) -> MtError | None:
    """The error that stops a run once `max_bad_updates` updates in a row were skipped."""
    if bad_in_a_row < t.max_bad_updates:
        return None
    return MtError(
        f"train: stopped at step {s.step}: {bad_in_a_row} updates in a row had a non-finite "
        f"loss or gradient (train.max_bad_updates {t.max_bad_updates}); every one was skipped, "
        f"so {last} holds finite weights. Lower train.lr / train.lr_scale or set "
        "train.clip_norm, then --resume",
        EXIT_DIVERGED,
    )


OVERFIT_EVALS = 3  # evaluations without a lower validation NLL before the note
OVERFIT_RISE = 1.01  # and the NLL at least 1% above its lowest: noise on a plateau says nothing


def overfit_note(s: TrainState, nll: float) -> str | None:
    """Record validation NLL `nll` of the evaluation at `s.step`; the first time it has not
    fallen for `OVERFIT_EVALS` evaluations and lies `OVERFIT_RISE` above its lowest, the line
    that says so (once a run, kept across --resume).

    On a fast CPU the Multi30k recipe's 30 minutes reach 24 epochs: its validation NLL rises
    after mid-run and `best.pt` stays at an early step, where more dropout scores higher
    (docs/studies/recipe-search.md, round 28). The log is where a user sees it."""
    if nll < s.best_nll:
        s.best_nll, s.best_nll_step, s.nll_bad_evals = nll, s.step, 0
        return None
    s.nll_bad_evals += 1
    if s.overfit_noted or s.nll_bad_evals < OVERFIT_EVALS or nll < s.best_nll * OVERFIT_RISE:
        return None
    s.overfit_noted = True
    return (
        f"note: validation NLL {nll:.3f} at step {s.step} is above its lowest, "
        f"{s.best_nll:.3f} at step {s.best_nll_step}, after {s.nll_bad_evals} evaluations: "
        "the model is overfitting. More dropout (model.dropout) or fewer epochs help; "
        "best.pt keeps the best dev score's weights"
    )

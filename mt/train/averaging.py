"""Weight averaging: an exponential moving average (EMA) of the weights during training, and
the mean of the last step checkpoints at the end.

Both give weights that sit nearer the middle of the valley the optimizer walks around in, which
often translate better than the last step's. With `train.ema_decay` the EMA is what the run
evaluates and what `best.pt` and the step checkpoints hold; `last.pt` keeps the raw weights
(the ones training continues from) with the EMA in its training state, so `--resume` goes on
exactly. With `train.average_last` the mean of the last step checkpoints is scored on the dev
set at the end and becomes `best.pt` when it beats the best evaluation.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

import torch
from tqdm import tqdm

from mt import checkpoint
from mt.adapt.lora import load_weights
from mt.train.rotation import Checkpoints
from mt.train.state import TrainState

WARMUP = 10  # the decay rises as (1 + step) / (WARMUP + step) before it reaches ema_decay


def ema_decay_at(step: int, decay: float) -> float:
    """The decay of the update after optimizer step `step`: `min(decay, (1 + step) / (10 +
    step))`, as TensorFlow's ExponentialMovingAverage with `num_updates`. Early on the average
    follows the weights closely, so a short run's EMA is not held back by its random start."""
    return min(decay, (1 + step) / (WARMUP + step))


class Ema:
    """The moving average of every parameter of `model`: after each optimizer step `step`,
    `ema = d * ema + (1 - d) * weights` with `d = ema_decay_at(step, decay)`. Kept in fp32 on
    the model's device and updated with one fused kernel per step, with no host sync."""

    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        self.decay = decay
        # The trained parameters: a frozen one (train.freeze, an adapter's base) is its own
        # average, and keeping a copy would put the base into an adapter run's last.pt.
        every = list(model.parameters())
        self.trained = [i for i, p in enumerate(every) if p.requires_grad]
        self.total = len(every)
        self.params = [every[i] for i in self.trained]
        self.shadow = [p.detach().clone() for p in self.params]

    @torch.no_grad()
    def update(self, step: int) -> None:
        """Move the average towards the weights after optimizer step `step`."""
        weight = 1.0 - ema_decay_at(step, self.decay)
        torch._foreach_lerp_(self.shadow, [p.detach() for p in self.params], weight)

    def state_dict(self) -> list[torch.Tensor]:
        """What `last.pt` keeps of the average (on the CPU, in parameter order)."""
        return [s.detach().cpu() for s in self.shadow]

    @torch.no_grad()
    def load_state_dict(self, saved: list[torch.Tensor] | None) -> None:
        """Put a saved average back; None (a run resumed that had no EMA) starts it from the
        current weights."""
        if saved is None:
            return
        if len(saved) == self.total != len(self.shadow):  # kept with the frozen ones too
            saved = [saved[i] for i in self.trained]
        for s, v in zip(self.shadow, saved, strict=True):
            s.copy_(v)

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The model holds the averaged weights inside the block, its own ones again after."""
        with torch.no_grad():
            kept = [p.detach().clone() for p in self.params]
            for p, s in zip(self.params, self.shadow):
                p.copy_(s)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, k in zip(self.params, kept):
                    p.copy_(k)


def ema_weights(ema: Ema | None) -> contextlib.AbstractContextManager[None]:
    """The block runs on the EMA weights when there is an EMA, on the model's own otherwise."""
    return ema.applied() if ema is not None else contextlib.nullcontext()


def average_at_end(
    checkpoints: Checkpoints,
    model: torch.nn.Module,
    n: int,
    evaluate: Callable[[], dict[str, float]],
    state: TrainState,
    admits: Callable[[dict[str, float]], bool] = lambda metrics: True,
) -> tuple[dict[str, float], bool]:
    """Write `averaged.pt` (the mean of the last `n` step checkpoints, `mt average`'s code),
    score it on the dev set and make it `best.pt` (and its score the run's best) when it beats
    the run's best evaluation and the best rule `admits` its metrics (mt/train/best.py: the
    watched sets' bounds). Returns its metrics (rounded as logged) and whether it became
    `best.pt`. The model holds its own weights again after."""
    path = checkpoints.average_last(n)
    averaged = checkpoint.load(path)
    with torch.no_grad():
        kept = {k: v.detach().clone() for k, v in model.state_dict().items()}
        load_weights(model, averaged["model"])
    try:
        raw = evaluate()
        score = raw.get("dev_bleu", -raw["valid_loss"])  # as the evaluations during training
        metrics = {k: round(v, 4) for k, v in raw.items()}
        better = score > state.best_score and admits(raw)
        if better:
            sources = averaged["averaged_from"]
            checkpoints.save("best.pt", state.step, metrics=metrics, averaged_from=sources)
            state.best_score, state.best_step = score, state.step
    finally:
        model.load_state_dict(kept)
    shown = " ".join(f"{k} {v:.3f}" for k, v in metrics.items())
    verdict = "now best.pt" if better else "best.pt kept"
    tqdm.write(f"averaged last {n} checkpoints: {shown} ({verdict})", file=sys.stderr)
    return metrics, better

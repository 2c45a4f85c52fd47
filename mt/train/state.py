"""Where a run is: the counters `last.pt` keeps, the run's id and the random number streams.

Everything here goes into `last.pt` so that `--resume` continues at the same step, data
position and dropout masks as the uninterrupted run would have.
"""

from __future__ import annotations

import math
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

import torch


def new_run_id() -> str:
    """A fresh id for a run; every checkpoint of the run carries it (`mt average` checks it)."""
    return uuid.uuid4().hex


@dataclass
class TrainState:
    """Where a run is; saved in `last.pt` so `--resume` continues at the same point."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of the current epoch already consumed
    elapsed: float = 0.0  # seconds of training so far, across resumes
    best_score: float = -math.inf  # dev BLEU, or minus validation loss without BLEU
    best_step: int = -1  # the step of best.pt (mt/train/best.py)
    # train.watch: each watched set's BLEU at the run's first evaluation (the base's, before
    # the first step), what a `keep_within` bound is measured from
    watch_start: dict[str, float] = field(default_factory=dict)
    bad_evals: int = 0
    last_eval_step: int = -1
    best_nll: float = math.inf  # the lowest validation NLL so far (`stop.overfit_note`)
    best_nll_step: int = -1
    nll_bad_evals: int = 0  # evaluations since the NLL last fell
    overfit_noted: bool = False  # said once a run
    # train.dropout_by_epochs: the rates chosen for the budget (model config keys); empty
    # until chosen, so a resumed run keeps its choice instead of measuring its pace again
    dropout: dict[str, float] = field(default_factory=dict)
    dropout_final: bool = False  # the time budget's review made (mt/train/budget.py)
    # Made when a run starts (fine-tuning too), kept across --resume. A last.pt written before
    # runs had ids gets a new one on resume.
    run_id: str = field(default_factory=new_run_id)


def rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)

"""What a log interval reports: the window of steps it sums, and the plain stderr line.

Loss and token counts are summed on the device over the window (no host sync per step) and
read once per interval. When stderr is a file (nohup, Slurm, CI) the interval is one plain
line in fairseq's simple format instead of a progress bar.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch


class Window:
    """Sums over the steps since the last log line; evaluation time is left out of its span,
    so tokens/s measures training alone."""

    def __init__(self, device: torch.device) -> None:
        self.loss = torch.zeros((), device=device)
        self.nll = torch.zeros((), device=device)
        self.grad_norm = torch.zeros((), device=device)  # summed over finite updates
        self.finite = torch.zeros((), device=device)
        self.tokens = 0
        self.steps = 0
        self.start = time.perf_counter()
        self.eval_seconds = 0.0

    def add(self, loss: torch.Tensor, nll: torch.Tensor, tokens: int, norm: torch.Tensor) -> None:
        """One update: its loss sums, target tokens and gradient norm (before clipping)."""
        self.loss += loss
        self.nll += nll
        finite = torch.isfinite(norm)
        self.grad_norm += torch.where(finite, norm, 0.0)  # a skipped update has no norm
        self.finite += finite
        self.tokens += tokens
        self.steps += 1

    def mean_grad_norm(self) -> float:
        return float(self.grad_norm) / max(float(self.finite), 1.0)

    def seconds(self) -> float:
        """Training seconds in the window: wall clock less evaluation."""
        return time.perf_counter() - self.start - self.eval_seconds

    def reset(self) -> None:
        self.loss.zero_()
        self.nll.zero_()
        self.grad_norm.zero_()
        self.finite.zero_()
        self.tokens = self.steps = 0
        self.start = time.perf_counter()
        self.eval_seconds = 0.0


def minutes(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min"


def log_line(rec: dict[str, Any], eta: tuple[float, str]) -> str:
    """fairseq's simple log format: one plain line per log interval when stderr is a file."""
    parts = [
        f"step {rec['step']}",
        f"epoch {rec['epoch'] + 1}",
        f"loss {rec['loss']:.3f}",
        f"lr {rec['lr']:.3g}",
        f"{rec['tgt_tokens_per_s']:,.0f} tgt tok/s",
        f"elapsed {minutes(rec['elapsed'])}",
    ]
    if rec.get("skipped_updates"):
        parts.append(f"skipped {rec['skipped_updates']}")
    parts.append(f"eta {minutes(eta[0])} ({eta[1]})")
    return "train: " + " | ".join(parts)


class SlowdownWatch:
    """Notices a run whose throughput collapses after its start, the usual sign of another
    process taking the cores, and says so once.

    The baseline is the median tokens/s of the first `baseline` log intervals (the median, so
    one slow warm-up interval does not lower it); the warning comes when `sustained` intervals
    in a row ran below `ratio` times the baseline.
    """

    def __init__(self, baseline: int = 3, ratio: float = 0.5, sustained: int = 3) -> None:
        self.baseline, self.ratio, self.sustained = baseline, ratio, sustained
        self.first: list[float] = []
        self.slow = 0
        self.warned = False

    def observe(self, tokens_per_s: float) -> str | None:
        """Feed one log interval's tokens/s; returns the warning line the one time it fires."""
        if self.warned:
            return None
        if len(self.first) < self.baseline:
            self.first.append(tokens_per_s)
            return None
        start = statistics.median(self.first)
        self.slow = self.slow + 1 if tokens_per_s < self.ratio * start else 0
        if self.slow < self.sustained:
            return None
        self.warned = True
        return (
            f"warning: training slowed to {tokens_per_s:,.0f} tgt tok/s, under {self.ratio:.0%} "
            f"of the {start:,.0f} it measured at its start, for {self.slow} log intervals in a "
            "row: another process may be competing for the cores"
        )

"""Ctrl-C, SIGTERM and SIGUSR1 as a request to stop at the next step boundary.

The first signal is only recorded: the trainer finishes the current update, saves `last.pt`
and stops, so `--resume` loses nothing. Ctrl-C (SIGINT) is a user stopping the run (exit 130);
SIGTERM and SIGUSR1 are what schedulers send before they kill a job (Slurm's `--signal=USR1@90`,
Kubernetes' SIGTERM, torchrun forwarding its own), so the run exits with `EXIT_REQUEUE`, the
code that asks for the job to be requeued. A second signal raises KeyboardInterrupt at once,
for a user who does not want to wait.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


class StopSignals:
    """While entered, SIGINT, SIGTERM and SIGUSR1 set `requested` instead of ending the
    process."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return bool(self.received)

    @property
    def preempted(self) -> str | None:
        """The scheduler's signal (SIGTERM or SIGUSR1) when one ended the run, else None."""
        if self.received and self.received[0] != signal.SIGINT:
            return signal.Signals(self.received[0]).name
        return None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received:
            raise KeyboardInterrupt
        self.received.append(signum)

    def __enter__(self) -> StopSignals:
        # Handlers can only be installed from the main thread (tests may train in another).
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED:
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

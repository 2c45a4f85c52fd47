"""Ctrl-C and SIGTERM as a request to stop at the next step boundary.

The first signal is only recorded: the trainer finishes the current update, saves `last.pt`
and stops, so `--resume` loses nothing. A second one raises KeyboardInterrupt at once, for a
user who does not want to wait.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any


class StopSignals:
    """While entered, SIGINT and SIGTERM set `requested` instead of ending the process."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return bool(self.received)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received:
            raise KeyboardInterrupt
        self.received.append(signum)

    def __enter__(self) -> StopSignals:
        # Handlers can only be installed from the main thread (tests may train in another).
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
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

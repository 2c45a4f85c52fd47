"""Progress for long work: a tqdm bar at a terminal, plain log lines everywhere else.

Cluster jobs, `nohup` and CI capture stderr in a file, where a bar is either disabled (tqdm's
`disable=None`) or a smear of carriage returns. There a plain line every `interval` seconds says
the same thing and stays readable.
"""

from __future__ import annotations

import sys
import time

from tqdm import tqdm


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


class Progress:
    """Counts work done; shows it as a bar (terminal) or as a line every `interval` seconds."""

    def __init__(self, what: str, unit: str, interval: float = 30.0, enabled: bool = True) -> None:
        self.what, self.unit, self.n = what, unit, 0
        self.interval = interval
        self.enabled = enabled
        self.start = self._last_print = time.perf_counter()
        self.bar = None
        if enabled and stderr_is_terminal():
            self.bar = tqdm(unit=unit, unit_scale=True, dynamic_ncols=True, desc=what)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.enabled and time.perf_counter() - self._last_print >= self.interval:
            self._last_print = time.perf_counter()
            rate = self.n / max(self._last_print - self.start, 1e-9)
            print(
                f"{self.what}: {self.n:,} {self.unit}, {rate:,.0f} {self.unit}/s",
                file=sys.stderr,
                flush=True,
            )

    def write(self, message: str) -> None:
        """A message that does not break the bar."""
        if self.bar is not None:
            self.bar.write(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

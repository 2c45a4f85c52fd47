"""Progress for long work: a tqdm bar at a terminal, plain log lines everywhere else.

Cluster jobs, `nohup` and CI capture stderr in a file, where a bar is either disabled (tqdm's
`disable=None`) or a smear of carriage returns. There a plain line every `interval` seconds says
the same thing and stays readable.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from tqdm import tqdm


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


class Progress:
    """Counts work done; shows it as a bar (terminal) or as a line every `interval` seconds."""

    def __init__(
        self,
        what: str,
        unit: str,
        total: int | None = None,
        initial: int = 0,
        interval: float = 30.0,
        line: Callable[[Progress], str] | None = None,
        enabled: bool = True,
    ) -> None:
        self.what, self.unit, self.total, self.n = what, unit, total, initial
        self.interval = interval
        self.line = line or Progress.default_line
        self.enabled = enabled
        self.start = time.perf_counter()
        self._last_print = self.start
        self._initial = initial
        self.bar = None
        if enabled and stderr_is_terminal():
            self.bar = tqdm(
                total=total,
                initial=initial,
                unit=unit,
                unit_scale=True,
                dynamic_ncols=True,
                desc=what,
            )

    def update(self, n: int = 1, **postfix: str) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix(postfix, refresh=False)
        elif self.enabled and time.perf_counter() - self._last_print >= self.interval:
            self._last_print = time.perf_counter()
            print(self.line(self), file=sys.stderr, flush=True)

    def rate(self) -> float:
        return (self.n - self._initial) / max(time.perf_counter() - self.start, 1e-9)

    @staticmethod
    def default_line(p: Progress) -> str:
        total = f"/{p.total:,}" if p.total else ""
        return f"{p.what}: {p.n:,}{total} {p.unit}, {p.rate():,.0f} {p.unit}/s"

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

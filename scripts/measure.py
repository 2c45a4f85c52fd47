"""A measured child: a command in its own session, timed, its peak RSS read, killed with its
whole process tree when it runs too long. What the benchmarks of training and data loading
measure with (scripts/bench/data.py, data_setup.py); the tests never measure, so this is not in
tests/support/ (which scripts import from too) but here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.support.processes import alive, descendants


class MeasureError(Exception):
    """A measured command failed or timed out; the report shows the reason instead of a number."""


class Child:
    """A command in its own session, logged to a file, waited for with `os.wait4`.

    `wait4` returns the rusage of this child (and of the children it reaped) only, which is
    what a per-measurement peak RSS needs.
    """

    live: set[Child] = set()  # killed on the way out: a child in its own session outlives us

    def __init__(self, cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
        self.cmd, self.log_path = cmd, log
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log.open("wb")
        self.start = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.pid = self.proc.pid
        Child.live.add(self)
        self.exit: int | None = None
        self.seconds = 0.0
        self.maxrss_kib = 0
        self.first_step_s = 0.0

    def poll(self) -> bool:
        """True once the child has ended (its exit code, time and peak RSS are then set)."""
        if self.exit is not None:
            return True
        pid, status, usage = os.wait4(self.pid, os.WNOHANG)
        if pid == 0:
            return False
        self._ended(status, usage)
        return True

    def _ended(self, status: int, usage: Any) -> None:
        self.seconds = time.perf_counter() - self.start
        self.exit = os.waitstatus_to_exitcode(status)
        self.proc.returncode = self.exit  # Popen must not wait for it again
        self.maxrss_kib = usage.ru_maxrss
        self.log.close()
        Child.live.discard(self)

    def wait(self, timeout: float) -> None:
        while not self.poll():
            if time.perf_counter() > self.start + timeout:
                self.kill()
                raise MeasureError(f"timed out after {timeout:.0f} s: {self.describe()}")
            time.sleep(0.05)
        if self.exit != 0:
            raise MeasureError(f"exit {self.exit}: {self.describe()}")

    def wait_first_step(self, metrics: Path, timeout: float) -> float:
        """Seconds from launch until `metrics.jsonl` holds its first complete line."""
        while True:
            try:
                if b"\n" in metrics.read_bytes():
                    return time.perf_counter() - self.start
            except FileNotFoundError:
                pass
            if self.poll():
                raise MeasureError(f"ended before step 1, exit {self.exit}: {self.describe()}")
            if time.perf_counter() > self.start + timeout:
                self.kill()
                raise MeasureError(f"no first step within {timeout:.0f} s: {self.describe()}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL the whole tree. torchrun starts each worker in a session of its own, so the
        child's process group alone would leave the workers running; and SIGKILL, not SIGTERM,
        because `mt train` answers SIGTERM by finishing the step and saving last.pt."""
        if self.exit is not None:
            return
        tree = [self.pid, *descendants(self.pid)]
        for pid in tree:
            try:
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _, status, usage = os.wait4(self.pid, 0)
        self._ended(status, usage)
        deadline = time.perf_counter() + 30
        while any(alive(p) for p in tree) and time.perf_counter() < deadline:
            time.sleep(0.05)  # let memory and cores free up before the next measurement

    def describe(self) -> str:
        tail = self.log_path.read_text(errors="replace").strip().splitlines()[-3:]
        return f"{' '.join(self.cmd[1:])} (log {self.log_path}: {' | '.join(tail)})"

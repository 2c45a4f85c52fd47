"""Child processes a benchmark measures: started in their own session, waited for with their
own peak RSS, killed with their whole tree, and their memory read from /proc.

`Child` runs one command with a timeout; `process_memory` splits a process's RSS and PSS into
the pages of files under one folder (a memory-mapped store) and the rest; `summarize` adds the
processes of one measurement up. Used by scripts/bench_data.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

MIB = 2**20


class MeasureError(Exception):
    """A measured command failed or timed out; the report shows the reason instead of a number."""


# -- child processes ---------------------------------------------------------------------------


def process_tree() -> dict[int, list[int]]:
    """Parent pid -> child pids, for every process on the machine (from /proc/*/stat)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])  # after "(comm) STATE"
        children.setdefault(ppid, []).append(int(name))
    return children


def descendants(pid: int) -> list[int]:
    tree = process_tree()
    out: list[int] = []
    todo = [pid]
    while todo:
        kids = tree.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


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


# -- memory from /proc -------------------------------------------------------------------------


def _kib(line: str) -> int:
    return int(line.split()[1])


def process_memory(pid: int, store: Path) -> dict[str, float]:
    """RSS, PSS and anonymous memory of `pid` in MiB, in total and for files under `store`.

    PSS divides each shared page by the number of processes mapping it, so the store PSS of all
    processes adds up to the store pages resident once, however many processes map them.
    Anonymous memory is what no other process could share by mapping a file: heap, Python
    objects, tensors (and pages a forked loader worker still shares copy-on-write).
    """
    prefix = str(store.resolve()) + "/"
    total: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(("Rss:", "Pss:", "Anonymous:")):
            total[line.split(":")[0]] = _kib(line)
    store_rss = store_pss = 0
    in_store = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", head[0]):  # a mapping's header line
            in_store = len(head) == 6 and head[5].startswith(prefix)
        elif in_store and line.startswith("Rss:"):
            store_rss += _kib(line)
        elif in_store and line.startswith("Pss:"):
            store_pss += _kib(line)
    rss, pss = total.get("Rss", 0), total.get("Pss", 0)
    return {
        "pid": pid,
        "rss": rss / 1024,
        "pss": pss / 1024,
        "anon": total.get("Anonymous", 0) / 1024,
        "store_rss": store_rss / 1024,
        "store_pss": store_pss / 1024,
        "rss_excl_store": (rss - store_rss) / 1024,
    }


def summarize(trainers: list[dict], loaders: list[dict], store_bytes: int) -> dict[str, Any]:
    """Per-trainer means and sums over all processes; loader workers are kept apart."""

    def mean(rows: list[dict], key: str) -> float:
        return sum(r[key] for r in rows) / len(rows) if rows else 0.0

    def total(rows: list[dict], key: str) -> float:
        return sum(r[key] for r in rows)

    everyone = trainers + loaders
    return {
        "trainers": len(trainers),
        "loader_workers": len(loaders),
        "trainer_rss_mib": mean(trainers, "rss"),
        "trainer_rss_excl_store_mib": mean(trainers, "rss_excl_store"),
        "trainer_anon_mib": mean(trainers, "anon"),
        "trainer_store_rss_mib": mean(trainers, "store_rss"),
        "trainer_pss_mib": mean(trainers, "pss"),
        "store_pss_trainers_mib": total(trainers, "store_pss"),
        "loader_rss_excl_store_mib": mean(loaders, "rss_excl_store"),
        "loader_anon_mib": mean(loaders, "anon"),
        "loader_pss_mib": total(loaders, "pss"),
        "store_pss_all_mib": total(everyone, "store_pss"),
        "total_pss_mib": total(everyone, "pss"),
        "store_on_disk_mib": store_bytes / MIB,
    }

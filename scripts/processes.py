"""Processes that tests and scripts start and end: a free loopback port, a real `mt serve`,
torchrun launchers and their workers, and a measured child killed with its whole tree.

Shared by tests/ (pytest's `pythonpath` puts the repository root on the path) and the
benchmarks and tools (run from the repository root as `python -m scripts...`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

# torchrun's c10d rendezvous shares one store across restart rounds by default, and a restarted
# group can then read the old group's addresses and fail to connect
# (docs/more-than-one-gpu-or-machine.md).
ELASTIC_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def free_port() -> int:
    """A loopback port no one listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- a real `mt serve` --------------------------------------------------------------------------


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    log: Path

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then the exit code (killed after `timeout`: a hung server fails the test)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


def start_server(*args: object, log: Path, ready_within: float = 120.0) -> Server:
    """`python -m mt serve ARGS --port P` in a child process, once /health says ready."""
    port = free_port()
    out = open(log, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mt", "serve", *map(str, args), "--port", str(port)],
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + ready_within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mt serve exited {proc.returncode}: {log.read_text()}")
        try:
            if httpx.get(server.url + "/health", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"mt serve not ready in {ready_within} s: {log.read_text()}")


# -- the process table (/proc) ------------------------------------------------------------------


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
    """Every process below `pid`: its children, theirs, and so on."""
    tree = process_tree()
    out: list[int] = []
    todo = [pid]
    while todo:
        kids = tree.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def children(pid: int) -> list[int]:
    """Direct child processes of `pid`."""
    return process_tree().get(pid, [])


# -- torchrun launchers and their workers -------------------------------------------------------


def torchrun() -> str:
    """The torchrun of this interpreter's environment."""
    found = Path(sys.executable).with_name("torchrun")
    return str(found) if found.exists() else (shutil.which("torchrun") or "torchrun")


def launch(
    args: list[str],
    cwd: Path,
    log: Path,
    env: dict[str, str] | None = None,
) -> subprocess.Popen:
    """`torchrun ARGS` in its own session (so it and its workers can be killed together),
    stdout and stderr to `log`."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [torchrun(), *args],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **ELASTIC_ENV, "OMP_NUM_THREADS": "1", **(env or {})},
            start_new_session=True,
        )


def node_args(port: int, nnodes: int, nproc: int, max_restarts: int = 0) -> list[str]:
    """c10d rendezvous on 127.0.0.1:`port` for `nnodes` launchers of `nproc` workers each."""
    return [
        f"--nnodes={nnodes}",
        f"--nproc_per_node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=mt-test",
        f"--max-restarts={max_restarts}",
        "--monitor-interval=0.2",
    ]


def worker(launcher: subprocess.Popen, rank: int) -> int | None:
    """The pid of the launcher's worker with global RANK `rank`, None if it has none now."""
    for pid in children(launcher.pid):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env:
            return pid
    return None


def wait_until(
    predicate: Callable[[], bool], what: str, timeout: float, *alive: subprocess.Popen
) -> None:
    """Poll `predicate` every 0.1 s until it holds; fail after `timeout` s or when one of
    `alive` ended first."""
    end = time.monotonic() + timeout
    while not predicate():
        for p in alive:
            if p.poll() is not None:
                raise AssertionError(f"{what}: a launcher ended first (rc {p.returncode})")
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.1)


def finish(procs: list[subprocess.Popen], timeout: float) -> list[int]:
    """Wait for `procs` up to `timeout` s in all, then kill what is left (its whole session:
    the launcher and its workers). The exit codes (negative: killed here)."""
    end = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(end - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        if p.poll() is None:
            kill_tree(p)
            p.wait()
    return [p.returncode for p in procs]


def kill_tree(launcher: subprocess.Popen) -> None:
    """SIGKILL a launcher and its workers, as a node failure would. torchrun starts each
    worker in a session of its own, so killing the launcher's session leaves them running."""
    for pid in children(launcher.pid):
        try:
            os.killpg(pid, signal.SIGKILL)  # the worker and its DataLoader processes
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(launcher.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# -- a measured child and its process tree ------------------------------------------------------


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

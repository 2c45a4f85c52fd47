"""Processes that tests and scripts start and end: a free loopback port, a real `mt serve`,
torchrun's path, and the process table."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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


# -- torchrun and the process table (/proc) -----------------------------------------------------


def torchrun() -> str:
    """The torchrun of this interpreter's environment."""
    found = Path(sys.executable).with_name("torchrun")
    return str(found) if found.exists() else (shutil.which("torchrun") or "torchrun")


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


def children(pid: int) -> list[int]:
    """Direct child processes of `pid`."""
    return process_tree().get(pid, [])


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

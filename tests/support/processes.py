"""Processes that tests and scripts start and end: a free loopback port, a real `mt serve`,
torchrun's path, and the process table.

A server is started in a session of its own and remembered until it has ended, so that what is
killed is only ever what was started here: on a timeout its own process group (the server and
the decode workers it forked), never a process found by name. Start and stop are bounded in
time (`ready_within`, `stop(timeout)`), the tries at a port someone else took in between in
number (`PORT_TRIES`), and the servers alive at once in number (`MAX_LIVE`), so a test that
forgets to stop one fails at the next start instead of leaving servers to pile up; whatever is
still alive when the interpreter exits is killed then.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import httpx

# torchrun's c10d rendezvous shares one store across restart rounds by default, and a restarted
# group can then read the old group's addresses and fail to connect
# (docs/more-than-one-gpu-or-machine.md).
ELASTIC_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
LOOPBACK = "127.0.0.1"  # `mt serve`'s default --host: nothing here listens beyond the machine
PORT_TRIES = 3  # a port free when chosen can be taken before the server binds it
MAX_LIVE = 4  # servers of this process alive at once; more means one was never stopped


def free_port() -> int:
    """A loopback port no one listens on now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


# -- a real `mt serve` --------------------------------------------------------------------------


@dataclass(eq=False)
class Server:
    proc: subprocess.Popen
    url: str
    log: Path

    live: ClassVar[set[Server]] = set()  # started here and not yet reaped; killed at exit

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then the exit code. A server not gone after `timeout` s is killed with its
        process group and the stop raises: a hung server fails the test."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        finally:
            Server.live.discard(self)

    def kill(self) -> None:
        """SIGKILL the server's own process group (it leads it: started in a session of its
        own), then reap it. Only while the server is not yet reaped: until then its pid, the
        group's id, can be no one else's."""
        if self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        Server.live.discard(self)


@atexit.register
def _kill_live() -> None:
    for server in list(Server.live):
        server.kill()


def start_server(*args: object, log: Path, ready_within: float = 120.0) -> Server:
    """`python -m mt serve ARGS --port P` in a child process, once /health says ready; on a
    free loopback port, tried again on another when the server finds the port taken."""
    running = [s for s in Server.live if s.proc.poll() is None]
    if len(running) >= MAX_LIVE:
        raise RuntimeError(f"{len(running)} servers still running: stop() the ones done with")
    for _ in range(PORT_TRIES):
        server = _start(args, log)
        try:
            if _ready(server, ready_within):
                return server
        except BaseException:
            server.kill()
            raise
        if "is in use" not in log.read_text(errors="replace"):
            raise RuntimeError(f"mt serve exited {server.proc.returncode}: {log.read_text()}")
    raise RuntimeError(f"mt serve found its port in use {PORT_TRIES} times: {log.read_text()}")


def _start(args: tuple[object, ...], log: Path) -> Server:
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mt", "serve", *map(str, args), "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            start_new_session=True,
        )
    server = Server(proc, f"http://{LOOPBACK}:{port}", log)
    Server.live.add(server)
    return server


def _ready(server: Server, within: float) -> bool:
    """True once /health answers 200; False when the server exited first (reaped); raises
    when it is still not ready after `within` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            Server.live.discard(server)
            return False
        try:
            if httpx.get(server.url + "/health", timeout=2).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"mt serve not ready in {within} s: {server.log.read_text()}")


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

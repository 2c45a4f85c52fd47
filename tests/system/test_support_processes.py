"""tests/support/processes.py, which every server test starts `mt serve` with: bounded in time
(a hung server is killed, one not ready in time too) and in number (a port taken in between is tried
again, a test that leaves servers running fails the next start), and what it kills is only what
it started: the server's own process group, never a process beside it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import processes
from support.processes import Server, alive, descendants, start_server

# A stand-in for a hung server: the shell and the child it waits for both ignore SIGTERM.
HUNG = ["sh", "-c", "trap '' TERM; sleep 60 & wait"]


def gone(pids: list[int], within: float = 10.0) -> bool:
    """Whether every one of `pids` has ended (a zombie counts as ended) within `within` s."""
    end = time.monotonic() + within
    while any(alive(p) for p in pids):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def hung(tmp_path: Path) -> Iterator[Server]:
    proc = subprocess.Popen(HUNG, start_new_session=True)
    server = Server(proc, "http://127.0.0.1:9", tmp_path / "log")
    Server.live.add(server)
    yield server
    server.kill()


def test_a_hung_server_is_killed_with_its_group_and_nothing_else(hung: Server) -> None:
    beside = subprocess.Popen(["sleep", "60"])  # ours too, but no part of the server
    try:
        deadline = time.monotonic() + 10
        while not (group := descendants(hung.proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert group, "the stand-in's child never started"
        with pytest.raises(subprocess.TimeoutExpired):
            hung.stop(timeout=0.5)
        assert hung.proc.returncode == -9  # killed, after SIGTERM went unheeded
        assert gone(group)  # its child with it: the whole group
        assert hung not in Server.live
        assert beside.poll() is None  # what is beside it lives on
    finally:
        beside.kill()
        beside.wait()


def test_a_reaped_server_is_never_killed_by_its_old_pid(hung: Server, monkeypatch) -> None:
    """Once reaped, its pid (the group's id) may be another's: kill() sends nothing."""
    hung.kill()
    sent = []
    monkeypatch.setattr(processes.os, "killpg", lambda *a: sent.append(a))
    hung.kill()
    assert sent == [] and hung not in Server.live


class Started(Exception):
    """Raised where a server would start."""


def refuse(*_: object) -> Server:
    raise Started


def test_servers_left_running_fail_the_next_start(hung: Server, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(processes, "MAX_LIVE", 1)
    monkeypatch.setattr(processes, "_start", refuse)
    with pytest.raises(RuntimeError, match="1 servers still running"):
        start_server("model.pt", log=tmp_path / "log")
    hung.kill()
    with pytest.raises(Started):  # stopped, it no longer counts
        start_server("model.pt", log=tmp_path / "log")


def test_servers_left_at_exit_are_killed(tmp_path: Path) -> None:
    code = (
        "import subprocess\n"
        "from pathlib import Path\n"
        "from tests.support.processes import Server\n"
        f"p = subprocess.Popen({HUNG!r}, start_new_session=True)\n"
        "Server.live.add(Server(p, '', Path('log')))\n"
        "print(p.pid, flush=True)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert gone([int(out.stdout)])


def test_a_server_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"mt serve exited 2: .*missing\.pt: checkpoint not"):
        start_server(tmp_path / "missing.pt", "--device", "cpu", log=tmp_path / "log")
    assert not Server.live


def test_a_server_not_ready_in_time_is_killed(tmp_path: Path, monkeypatch) -> None:
    started = []
    start = processes._start
    monkeypatch.setattr(processes, "_start", lambda *a: started.append(start(*a)) or started[-1])
    with pytest.raises(RuntimeError, match="not ready in 0 s"):
        start_server(tmp_path, log=tmp_path / "log", ready_within=0)
    assert started[0].proc.returncode is not None and not Server.live


@pytest.mark.slow  # a script's or a retry's check of many seconds: `pytest -m slow`
def test_a_port_taken_in_between_is_tried_again(tiny_run: Path, tmp_path: Path, monkeypatch):
    """The port was free when chosen and someone else's by the time the server binds it."""
    with socket.socket() as taken:
        taken.bind((processes.LOOPBACK, 0))
        taken.listen()
        ports = [taken.getsockname()[1]]
        free = processes.free_port
        monkeypatch.setattr(processes, "free_port", lambda: ports.pop(0) if ports else free())
        server = start_server(tiny_run / "best.pt", "--device", "cpu", log=tmp_path / "log")
        try:
            assert not ports  # the taken port was tried first
            assert server.url != f"http://127.0.0.1:{taken.getsockname()[1]}"
            assert server.url.startswith("http://127.0.0.1:")
        finally:
            assert server.stop() == 0
    assert server not in Server.live

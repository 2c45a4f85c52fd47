"""torchrun launchers for the cluster tests and scripts/cluster_check.py: free ports, the worker
processes of a launcher, and cleanup of only what was started."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

# torchrun's c10d rendezvous shares one store across restart rounds by default, and a
# restarted group can then read the old group's addresses and fail to connect (docs/cluster.md).
ELASTIC_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def torchrun() -> str:
    """The torchrun of this interpreter's environment."""
    found = Path(sys.executable).with_name("torchrun")
    return str(found) if found.exists() else (shutil.which("torchrun") or "torchrun")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def children(pid: int) -> list[int]:
    """Direct child processes of `pid` (from /proc)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


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


def wait_until(predicate, what: str, timeout: float, *alive: subprocess.Popen) -> None:
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

"""torchrun launchers and their workers, as the cluster and shard tests drive them: started in
a session of their own, a worker found by its RANK, waited for within a bound, and killed with
its workers as a node failure would, and only those.

Only the tests start and kill launchers this way (scripts/bench/shards.py runs torchrun to the
end and needs only its path and environment, from support.processes), so this is here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from support.processes import ELASTIC_ENV, children, torchrun


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

"""The run directory: one writer at a time, and a writable place before any work starts.

Two processes writing one run directory interleave `metrics.jsonl` and overwrite each other's
checkpoints; a requeued cluster job or a mistyped command must be refused, not merged. The lock
is an OS lock on `run_dir/.lock`, held for the life of the process: the kernel drops it when the
process ends, however it ends, so a lock left by a killed run never blocks the next one. It is a
POSIX record lock (`lockf`), not `flock`, because forked children (DataLoader workers) do not
inherit it: a killed trainer's lingering worker must not keep its run directory locked. The file
records the holder's pid and host for the refusal message.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import IO

from mt.errors import MtError

LOCK_NAME = ".lock"


class RunLock:
    """An exclusive lock on a run directory; `release()` or process exit frees it."""

    def __init__(self, run_dir: Path, what: str) -> None:
        self.path = run_dir / LOCK_NAME
        try:
            self.file: IO[str] = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115
        except OSError as err:
            raise MtError(f"{run_dir}: cannot create {LOCK_NAME} ({err.strerror})") from None
        try:
            fcntl.lockf(self.file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # EACCES or EAGAIN: another process holds it
            self.file.seek(0)
            holder = self.file.read().strip() or "another process"
            self.file.close()
            raise MtError(
                f"{run_dir}: in use by {holder}; one process writes a run directory at a time "
                "(wait for it, stop it, or pass --run-dir for a new run)"
            ) from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(f"mt {what} (pid {os.getpid()} on {socket.gethostname()})\n")
        self.file.flush()

    def release(self) -> None:
        if not self.file.closed:
            fcntl.lockf(self.file.fileno(), fcntl.LOCK_UN)
            self.file.close()


def make_run_dir(run_dir: Path) -> None:
    """Create the folder and prove it writable before minutes of preparation are spent."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise MtError(f"{run_dir}: run directory is not writable ({err.strerror})") from None


def lock_run_dir(run_dir: Path, what: str) -> RunLock:
    """Create `run_dir` if needed and take its lock (`what` names the command for others)."""
    make_run_dir(run_dir)
    return RunLock(run_dir, what)


def refuse_finished_run(run_dir: Path, resume: bool) -> None:
    """A run directory with a `last.pt` is continued with --resume, never trained over."""
    if not resume and (run_dir / "last.pt").exists():
        raise MtError(
            f"{run_dir}: already holds a run (last.pt); pass --resume to continue it "
            "or --run-dir for a new one"
        )

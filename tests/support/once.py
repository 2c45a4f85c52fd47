"""Session fixtures built once per test run, however many xdist workers ask for them.

Each pytest-xdist worker is a process with its own session, so a session fixture that trains a
model trains it once per worker: on the 2-core CI machine, a core's seconds spent twice. The
workers of one run share the folder above their own temporary roots; there the first worker to
ask builds the fixture under a lock while the others wait, and later ones read the path it
left (pytest-xdist's documented recipe). Without xdist the fixture is built as before.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

WAIT_S = 900  # longer than any fixture's build on a loaded machine; then the test fails


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Path]) -> Path:
    """`build(folder)`'s result for an empty `folder`, built by one worker of the run; a build
    that failed left no mark, so the next worker to ask tries again in a folder of its own."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return build(factory.mktemp(name))
    root = factory.getbasetemp().parent / f"once-{name}"
    root.mkdir(exist_ok=True)
    mark = root / "built"
    with FileLock(str(root / "lock"), timeout=WAIT_S):
        if mark.is_file():
            return Path(mark.read_text(encoding="utf-8"))
        out = build(Path(tempfile.mkdtemp(dir=root)))
        mark.write_text(str(out), encoding="utf-8")
        return out

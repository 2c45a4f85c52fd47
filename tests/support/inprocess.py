"""`mt ARGS` run inside the test process as `python -m mt ARGS` runs it, the process put back
after.

A child `python -m mt` spends ~2.5 s starting an interpreter and importing torch before it does
anything; most tests check what a command does, not how a process starts, so they call the entry
point here. The call sees what a child would: its arguments, a stdin of the given bytes, the
environment and working directory asked for, and file descriptors 1 and 2 of its own, so that
what native code (sentencepiece, OpenMP) writes is captured with what Python writes, in order.
What a command may change for the whole process (torch's threads, dtype and random state,
signal handlers, logging, warnings filters, os.environ, the working directory, sys.argv and
sys.path) is restored after every call, so tests stay independent.

A traceback is never turned into an exit code: an exception that escapes `mt.cli.main` is a bug
a user would see, so it fails the test with its traceback (what the command wrote so far is
printed to the test's captured output). Signals, pipes, kills, torchrun, servers and the
interpreter's own start are what a real child is for: `mt_process` in conftest.py.
"""

from __future__ import annotations

import io
import logging
import os
import random
import signal
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

# The filters of a fresh interpreter that has imported torch, as a child `mt` has: pytest's
# own ("always" for deprecations, which it sets around collection and each test) left out.
_PYTEST_ADDS = {
    ("always", None, c, None, 0) for c in (DeprecationWarning, PendingDeprecationWarning)
}
_FRESH_FILTERS = [f for f in warnings.filters if f not in _PYTEST_ADDS]


@dataclass
class CliResult:
    """What a user of `mt` sees: the exit code and the two streams as text."""

    rc: int
    out: str
    err: str


def exit_code(ex: SystemExit) -> int:
    """The status a process exits with for `SystemExit(code)`, as the interpreter maps it."""
    if ex.code is None:
        return 0
    if isinstance(ex.code, int):
        return ex.code
    print(ex.code, file=sys.stderr)  # sys.exit("text"): the text on stderr, status 1
    return 1


def run_mt_here(
    *args: object,
    stdin: bytes | str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
) -> CliResult:
    """`mt ARGS` through `mt.cli.main` in this process; keywords as a child would take them
    (`env` adds to this process's environment, with OMP_NUM_THREADS=1 as for a child)."""
    from mt.cli import main

    data = stdin.encode("utf-8") if isinstance(stdin, str) else (stdin or b"")
    failure: BaseException | None = None
    with ExitStack() as stack:
        stack.enter_context(_process_state())
        stack.enter_context(_environment({"OMP_NUM_THREADS": "1", **(env or {})}, cwd))
        stack.enter_context(_argv(args))
        stack.enter_context(_fresh_warnings())
        written = stack.enter_context(_streams(data))
        try:
            main()
            rc = 0
        except SystemExit as ex:
            rc = exit_code(ex)
        except BaseException as ex:  # a bug (or the tester's Ctrl-C): never an exit code
            rc, failure = -1, ex
        out, err = written()
    if failure is not None:
        print(f"--- mt stdout before the exception\n{out}--- mt stderr\n{err}")
        raise failure
    return CliResult(rc, out, err)


def _text(f: IO[bytes]) -> str:
    f.seek(0)
    return f.read().decode("utf-8", "replace")


@contextmanager
def _streams(data: bytes) -> Iterator[Callable[[], tuple[str, str]]]:
    """Descriptors 0, 1, 2 on temporary files and sys.std* opened on them as a piped
    interpreter opens them; yields what reads back (stdout, stderr) so far."""
    saved_std = (sys.stdin, sys.stdout, sys.stderr)
    for s in saved_std[1:]:
        s.flush()
    with ExitStack() as files:
        fin, fout, ferr = (files.enter_context(tempfile.TemporaryFile()) for _ in range(3))
        fin.write(data)
        fin.flush()
        fin.seek(0)

        def written() -> tuple[str, str]:
            for s in (sys.stdout, sys.stderr):
                try:
                    s.flush()
                except (OSError, ValueError):  # closed by the command: nothing left to flush
                    pass
            return _text(fout), _text(ferr)

        saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
        for fd, f in zip((0, 1, 2), (fin, fout, ferr)):
            os.dup2(f.fileno(), fd)
        sys.stdin = _std(0, "<stdin>", "r", "strict")
        sys.stdout = _std(1, "<stdout>", "w", "strict")
        sys.stderr = _std(2, "<stderr>", "w", "backslashreplace", line_buffering=True)
        try:
            yield written
        finally:
            written()
            for fd, saved in zip((0, 1, 2), saved_fds):
                os.dup2(saved, fd)
                os.close(saved)
            sys.stdin, sys.stdout, sys.stderr = saved_std


def _std(fd: int, name: str, mode: str, errors: str, line_buffering: bool = False) -> IO[str]:
    """A standard stream as the interpreter opens it on a pipe (name, encoding, buffering)."""
    raw = io.FileIO(fd, mode, closefd=False)
    raw.name = name  # what `getattr(stream, "name")` in an error line reads
    buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
    return io.TextIOWrapper(buffered, "utf-8", errors, line_buffering=line_buffering)


@contextmanager
def _environment(env: dict[str, str], cwd: Path | str | None) -> Iterator[None]:
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        for key in set(os.environ) - set(saved_env):
            del os.environ[key]
        for key, value in saved_env.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


@contextmanager
def _argv(args: tuple[object, ...]) -> Iterator[None]:
    """sys.argv and __main__ as under `python -m mt`, so usage lines name `python -m mt`."""
    import mt.__main__ as entry

    saved = sys.argv, list(sys.path), sys.modules["__main__"]
    sys.argv = [entry.__file__, *map(str, args)]
    sys.modules["__main__"] = entry
    try:
        yield
    finally:
        sys.argv, sys.path[:], sys.modules["__main__"] = saved


def _show(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
          line: str | None = None) -> None:  # fmt: skip
    """Writes a warning on stderr as the interpreter's own `showwarning` does."""
    try:
        (file or sys.stderr).write(
            warnings.formatwarning(message, category, filename, lineno, line)
        )
    except OSError:
        pass


@contextmanager
def _fresh_warnings() -> Iterator[None]:
    """Filters as in a fresh interpreter and warnings on stderr (pytest records them instead);
    each call shows its `default` warnings again, as each child process did."""
    with warnings.catch_warnings():
        warnings.filters[:] = _FRESH_FILTERS
        warnings.showwarning = _show
        yield


@contextmanager
def _process_state() -> Iterator[None]:
    """torch's threads, dtype, grad mode and random state; Python's and numpy's random state;
    signal handlers; logging's levels and handlers."""
    import numpy as np

    saved_torch = (
        torch.get_num_threads(),
        torch.get_default_dtype(),
        torch.is_grad_enabled(),
        torch.get_rng_state(),
    )
    saved_random = random.getstate(), np.random.get_state()
    saved_signals = _signal_handlers()
    saved_logging = _logging_state()
    try:
        yield
    finally:
        threads, dtype, grad, rng = saved_torch
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        torch.set_rng_state(rng)
        random.setstate(saved_random[0])
        np.random.set_state(saved_random[1])
        for sig, handler in saved_signals.items():
            if signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
        _restore_logging(saved_logging)


def _signal_handlers() -> dict[signal.Signals, Any]:
    handlers = {}
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
        if handler is not None:  # None: set outside Python, cannot be put back from here
            handlers[sig] = handler
    return handlers


def _loggers() -> list[logging.Logger]:
    known = logging.Logger.manager.loggerDict.values()
    return [logging.root, *(lg for lg in known if isinstance(lg, logging.Logger))]


def _logging_state() -> tuple[int, dict[logging.Logger, tuple]]:
    state = {lg: (lg.level, list(lg.handlers), lg.propagate, lg.disabled) for lg in _loggers()}
    return logging.root.manager.disable, state


def _restore_logging(saved: tuple[int, dict[logging.Logger, tuple]]) -> None:
    """Loggers as they were; a logger the command created keeps its handlers, which write to
    descriptor 2 as a library configured once per process would."""
    disable, state = saved
    logging.disable(disable)
    for lg, (level, handlers, propagate, disabled) in state.items():
        lg.setLevel(level)
        lg.handlers[:] = handlers
        lg.propagate, lg.disabled = propagate, disabled


def run_in_process(
    args: list[object], capsys, monkeypatch, stdin: bytes | str | None = None
) -> tuple[int, str, str]:
    """`mt ARGS` through the real entry point, in this process: (exit code, stdout, stderr).
    `capsys` and `monkeypatch` are kept for the callers; the runner restores what it changes."""
    result = run_mt_here(*args, stdin=stdin)
    return result.rc, result.out, result.err

"""The in-process runner behind `mt_cli` (tests/support/inprocess.py): what a child `python -m mt`
would show, the process put back after, and a bug never passed off as an exit code."""

from __future__ import annotations

import importlib
import os
import signal
import sys

import pytest
import torch
from support.inprocess import run_mt_here

ENTRY = importlib.import_module("mt.cli.app")  # the module; `mt.cli.app` names the Typer app


def test_a_usage_error_reads_as_from_the_real_child(mt_process):
    here, child = run_mt_here("no-such-command"), mt_process("no-such-command")
    assert (here.rc, here.out, here.err) == (child.rc, child.out, child.err)
    assert here.rc == 2 and "Usage: python -m mt" in here.err


def test_env_cwd_threads_and_signal_handlers_are_put_back(tmp_path):
    cwd, threads = os.getcwd(), torch.get_num_threads()
    handler = signal.getsignal(signal.SIGTERM)
    torch.set_num_threads(2)
    try:
        # `--threads 1` sizes torch's pool; the missing checkpoint is then one error line.
        result = run_mt_here(
            "translate", "missing.pt", "--threads", "1", env={"MT_PROBE": "1"}, cwd=tmp_path
        )
        assert result.rc == 2 and "missing.pt" in result.err
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert os.getcwd() == cwd and "MT_PROBE" not in os.environ
    assert signal.getsignal(signal.SIGTERM) is handler
    assert sys.argv[0] != "mt" and sys.modules["__main__"].__name__ != "mt.__main__"


def test_streams_are_a_piped_processes_down_to_the_descriptors(monkeypatch):
    """stdin's bytes under the interpreter's name, stdout's buffer, and what native code
    writes to descriptor 2 come back in order; SystemExit's code is the exit code."""

    def command(**_: object) -> None:
        data = sys.stdin.buffer.read()
        sys.stdout.buffer.write(data.upper())
        print(f"{sys.stdin.name} {sys.stdin.isatty()}", file=sys.stderr)
        os.write(2, b"from C\n")
        raise SystemExit(3)

    monkeypatch.setattr(ENTRY, "app", command)
    result = run_mt_here("x", stdin=b"caf\xc3\xa9\n")
    assert (result.rc, result.out, result.err) == (3, "CAF\u00e9\n", "<stdin> False\nfrom C\n")


def test_an_exception_fails_the_test_and_is_no_exit_code(monkeypatch):
    def broken(**_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ENTRY, "app", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        run_mt_here("--help")
    assert sys.stdout is not None and not isinstance(sys.stdout.name, int)

"""`mt translate` as a Unix filter: quiet on a closed pipe, 130 on Ctrl-C, bounded memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest


def translate_cmd(ckpt) -> list[str]:
    return [sys.executable, "-m", "mt", "translate", str(ckpt), "--greedy"]


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def test_closed_pipe_exits_quietly(tiny_run):
    lines = "".join(f"Ein Hund rennt {i}.\n" for i in range(3000))
    mt = subprocess.Popen(
        translate_cmd(tiny_run / "best.pt"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    head = subprocess.Popen(["head", "-n", "3"], stdin=mt.stdout, stdout=subprocess.PIPE)
    mt.stdout.close()  # head alone reads it now
    mt.stdin.write(lines.encode())
    mt.stdin.close()
    out, _ = head.communicate(timeout=300)
    err = mt.stderr.read().decode()
    assert mt.wait(timeout=300) == 0
    assert len(out.decode().splitlines()) == 3
    assert "Traceback" not in err and "BrokenPipe" not in err


def cpu_ticks(pid: int) -> int:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def wait_until_idle(pid: int, quiet: float = 1.5, limit: float = 120.0) -> None:
    """Until the process has used no CPU for `quiet` seconds (it waits for input), at most
    `limit` seconds: a signal sent while it still imports its modules tests those modules."""
    deadline = time.monotonic() + limit
    last, since = cpu_ticks(pid), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = cpu_ticks(pid)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
    pytest.fail(f"process {pid} still busy after {limit:g} s")


def as_at_a_terminal() -> None:
    """The child's SIGINT as a shell hands it over: default handling, not blocked. Both an
    ignored SIGINT and a blocked one pass from parent to child, and a process running many
    tests may hold either, which left mt deaf to Ctrl-C (it then exited 0 at end of input)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def test_ctrl_c_exits_130_without_traceback(tiny_run):
    mt = subprocess.Popen(
        translate_cmd(tiny_run / "best.pt"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        preexec_fn=as_at_a_terminal,
    )
    mt.stdin.write(b"Ein Hund rennt.\n" * 10)
    mt.stdin.flush()  # stdin stays open: mt is waiting for more, as at a terminal
    wait_until_idle(mt.pid)  # past its start-up (imports), blocked on stdin
    mt.send_signal(signal.SIGINT)
    _, err = mt.communicate(timeout=60)
    assert mt.returncode == 130
    assert "Traceback" not in err.decode()
    assert err.decode().strip().splitlines()[-1] == "mt: interrupted"


def peak_rss_kb(ckpt, n_lines: int) -> int:
    """Peak RSS of `mt translate` over `n_lines` short lines, measured in a fresh parent."""
    code = (
        "import resource, subprocess, sys\n"
        "cmd = sys.argv[2:]\n"
        "with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL) as p:\n"
        "    chunk = b'Ein Hund.\\n' * 10000\n"
        "    for _ in range(int(sys.argv[1]) // 10000):\n"
        "        p.stdin.write(chunk)\n"
        "    p.stdin.close()\n"
        "assert p.returncode == 0\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(n_lines), *translate_cmd(ckpt)],
        capture_output=True,
        text=True,
        env=ENV,
        check=True,
        timeout=3000,
    )
    return int(out.stdout.strip())


@pytest.mark.slow
def test_memory_stays_bounded_on_a_million_lines(tiny_run):
    small = peak_rss_kb(tiny_run / "best.pt", 20_000)
    large = peak_rss_kb(tiny_run / "best.pt", 1_000_000)
    assert large < small * 1.2 + 50_000, (small, large)  # KiB: no growth with input size

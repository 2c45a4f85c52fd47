"""A real `mt serve` process on a loopback port, for the HTTP and browser tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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

"""The thread policy (mt/device.py): usable cores from the affinity mask and the cgroup's CPU
quota (files under a temporary folder stand for /sys/fs/cgroup), the count each kind of work
takes, `--threads` checked once, and the count said in the start line."""

from __future__ import annotations

import contextlib
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import REPO
from support.inprocess import run_in_process
from support.tasks import reverse_task_config

from mt.config_rules import MAX_THREADS
from mt.device import (
    SHORT_SPIN,
    Cores,
    cgroup_quota,
    choose_threads,
    env_threads,
    usable_cores,
    yield_when_waiting,
)

NO_ENV: dict[str, str] = {}


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="ascii")


def membership(tmp_path: Path, v2: str = "/", v1: str = "/") -> Path:
    """A /proc/self/cgroup of a hybrid host: v1 controllers and the v2 unified line."""
    path = tmp_path / "self_cgroup"
    write(path, f"12:memory:/mem\n4:cpu,cpuacct:{v1}\n1:name=systemd:/\n0::{v2}\n")
    return path


# -- the quota --------------------------------------------------------------------------------


def test_v2_cpu_max_is_quota_over_period(tmp_path):
    write(tmp_path / "cg" / "cpu.max", "150000 100000\n")
    assert cgroup_quota(tmp_path / "cg", membership(tmp_path)) == 1.5


def test_v2_max_means_no_quota(tmp_path):
    write(tmp_path / "cg" / "cpu.max", "max 100000\n")
    assert cgroup_quota(tmp_path / "cg", membership(tmp_path)) is None


def test_the_tightest_quota_on_the_way_to_the_root_counts(tmp_path):
    root = tmp_path / "cg"
    write(root / "cpu.max", "max 100000\n")
    write(root / "lab" / "cpu.max", "100000 100000\n")  # the parent: 1 CPU
    write(root / "lab" / "job" / "cpu.max", "400000 100000\n")  # the child asks 4
    assert cgroup_quota(root, membership(tmp_path, v2="/lab/job")) == 1.0
    # a sibling's quota is not this process's
    write(root / "other" / "cpu.max", "50000 100000\n")
    assert cgroup_quota(root, membership(tmp_path, v2="/lab/job")) == 1.0


def test_v1_cfs_quota_and_period(tmp_path):
    root = tmp_path / "cg"
    write(root / "cpu,cpuacct" / "docker" / "cpu.cfs_quota_us", "250000\n")
    write(root / "cpu,cpuacct" / "docker" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_quota(root, membership(tmp_path, v1="/docker")) == 2.5
    write(root / "cpu,cpuacct" / "docker" / "cpu.cfs_quota_us", "-1\n")
    assert cgroup_quota(root, membership(tmp_path, v1="/docker")) is None


def test_no_cgroup_files_or_bad_ones_are_no_quota(tmp_path):
    assert cgroup_quota(tmp_path / "absent", tmp_path / "absent_membership") is None
    write(tmp_path / "cg" / "cpu.max", "lots 100000\n")
    write(tmp_path / "cg" / "cpu" / "cpu.cfs_quota_us", "x\n")
    write(tmp_path / "cg" / "cpu" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_quota(tmp_path / "cg", membership(tmp_path)) is None


def test_usable_cores_are_the_affinity_capped_by_the_quota(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    write(tmp_path / "cg" / "cpu.max", "100000 100000\n")
    cores = usable_cores(tmp_path / "cg", membership(tmp_path))
    assert cores == Cores(affinity, 1.0) and cores.usable == 1
    assert usable_cores(tmp_path / "none", membership(tmp_path)).usable == affinity
    assert Cores(8, 2.5).usable == 2  # whole CPUs of quota
    assert Cores(8, 0.3).usable == 1  # never none
    assert Cores(2, 16.0).usable == 2  # a quota above the mask does not add cores


# -- the count --------------------------------------------------------------------------------


def test_a_process_takes_its_share_of_the_usable_cores():
    assert choose_threads(Cores(8, 3.0), environ=NO_ENV).count == 3
    assert choose_threads(Cores(8, 2.5), environ=NO_ENV).count == 2
    assert choose_threads(Cores(8, None), environ=NO_ENV).count == 8
    assert choose_threads(Cores(8, None), processes=4, environ=NO_ENV).count == 2
    assert choose_threads(Cores(2, None), processes=4, environ=NO_ENV).count == 1
    assert choose_threads(Cores(1, None), environ=NO_ENV).count == 1


def test_an_asked_count_never_exceeds_the_usable_cores():
    capped = choose_threads(Cores(1, None), asked=4, environ=NO_ENV)
    assert capped.count == 1
    assert capped.describe() == "1 thread (--threads 4 capped at the 1 usable core: affinity 1)"
    kept = choose_threads(Cores(8, 2.0), asked=2, environ=NO_ENV)
    assert kept.count == 2
    why = "2 usable cores: affinity 8, cgroup quota 2 CPUs"
    assert kept.describe() == f"2 threads (--threads; {why})"


def test_omp_num_threads_is_a_request_and_threads_beat_it():
    env = {"OMP_NUM_THREADS": "4"}
    assert choose_threads(Cores(8, None), environ=env).count == 4
    assert choose_threads(Cores(8, None), environ=env).source == "OMP_NUM_THREADS"
    assert choose_threads(Cores(2, None), environ=env).count == 2
    assert choose_threads(Cores(8, None), asked=3, environ=env).count == 3
    assert env_threads({"OMP_NUM_THREADS": "3,1"}) == 3  # nested levels: the outer one
    assert env_threads({"OMP_NUM_THREADS": "0"}) is None
    assert env_threads({"OMP_NUM_THREADS": "many"}) is None


def test_the_wait_policy_spins_briefly_unless_the_user_chose_one():
    env: dict[str, str] = {}
    yield_when_waiting(env)
    assert env == {"GOMP_SPINCOUNT": str(SHORT_SPIN)} and 0 < SHORT_SPIN < 300_000
    for chosen in ({"OMP_WAIT_POLICY": "PASSIVE"}, {"GOMP_SPINCOUNT": "0"}):
        env = dict(chosen)
        yield_when_waiting(env)
        assert env == chosen


# -- the command line -------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["translate", "score", "eval", "export", "serve"])
@pytest.mark.parametrize("value", ["0", "-2", str(MAX_THREADS + 1)])
def test_threads_out_of_bounds_is_one_line_exit_2(command, value, capsys, monkeypatch, tmp_path):
    extra = {
        "translate": [],
        "score": ["--src", tmp_path / "s", "--tgt", tmp_path / "t"],
        "eval": ["--src", tmp_path / "s", "--ref", tmp_path / "r"],
        "export": [tmp_path / "out", "--to", "marian"],
        "serve": [],
    }[command]
    args = [command, tmp_path / "missing.pt", *extra, "--threads", value]
    rc, out, err = run_in_process(args, capsys, monkeypatch)
    assert rc == 2 and out == ""
    bounds = f"between 1 and {MAX_THREADS:,}"
    assert err == f"mt: error: --threads must be {bounds}, got {int(value):,}\n"


def start_line_at_a_terminal(args: list[str], cpus: set[int]) -> str:
    """stderr of `mt ARGS` run with stderr on a pseudo-terminal (as a user at a shell sees
    it) and the affinity mask `cpus` (as under `taskset`), up to the process's exit."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mt", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=child,
        env=env,
        cwd=REPO,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )
    os.close(child)
    chunks = []
    deadline = time.monotonic() + 300  # a loaded machine starts python and torch slowly
    while time.monotonic() < deadline:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    proc.wait(timeout=60)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


def test_the_start_line_says_one_thread_on_one_core(tmp_path):
    one = {min(os.sched_getaffinity(0))}
    err = start_line_at_a_terminal(
        ["translate", str(tmp_path / "missing.pt"), "--threads", "4"], one
    )
    lines = err.splitlines()
    why = "--threads 4 capped at the 1 usable core: affinity 1"
    assert lines[0] == f"mt translate: 1 thread ({why})"
    assert lines[1].startswith("mt: error: ")  # and then the command goes on as before


def test_piped_stderr_holds_no_start_line(tmp_path, mt_process):
    result = mt_process("translate", tmp_path / "missing.pt", "--threads", "1")
    assert result.rc == 2 and result.err.count("\n") == 1 and "thread" not in result.err


def test_training_says_its_threads_capped_by_the_affinity(tmp_path, mt_cli):
    config = reverse_task_config(tmp_path, max_steps=2, threads=2, eval_every=2, log_every=1)
    everyone = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(everyone)})  # as under `taskset`, for this one call
    try:
        result = mt_cli("train", config, "--run-dir", tmp_path / "run", cwd=REPO)
    finally:  # every thread of this process, also those torch started meanwhile
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(tid), everyone)
    assert result.rc == 0, result.err
    start = [line for line in result.err.splitlines() if line.startswith("mt train: ")]
    assert len(start) == 1, result.err
    assert ", 1 thread (train.threads 2 capped at the 1 usable core: affinity 1), " in start[0]

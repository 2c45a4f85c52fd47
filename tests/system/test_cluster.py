"""Training beyond one process, through real torchrun launchers on 127.0.0.1 (gloo): two
"nodes" that share no cache or working directory, a worker killed and restarted by torchrun, a
launcher killed and started again, and a peer that hangs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from support.launchers import finish, kill_tree, launch, node_args, wait_until, worker
from support.processes import free_port
from support.tasks import reverse_task_config


def losses(run: Path) -> dict[int, float]:
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r}


def loss_steps(run: Path) -> list[int]:
    if not (run / "metrics.jsonl").exists():
        return []
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in records if "loss" in r]


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:`port`."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def train_args(config: Path, *sets: str) -> list[str]:
    return [
        "-m",
        "mt",
        "train",
        str(config),
        "--run-dir",
        "run",
        *sum((["--set", s] for s in sets), []),
    ]


@pytest.mark.slow  # ~15 s; test_ddp and the srun test below run torchrun by default
def test_two_nodes_without_a_shared_folder_match_one_node(tmp_path):
    config = reverse_task_config(tmp_path, max_steps=8, eval_every=8, log_every=2)
    one, a, b = (tmp_path / name for name in ("one", "node0", "node1"))
    for folder in (one, a, b):
        folder.mkdir()
    port = free_port()
    single = launch(
        [*node_args(port, 1, 2), *train_args(config)],
        one,
        tmp_path / "one.log",
        {"MT_CACHE": str(one / "cache")},
    )
    assert finish([single], 240) == [0], (tmp_path / "one.log").read_text()[-3000:]

    port = free_port()
    nodes = [
        launch(
            [*node_args(port, 2, 1), *train_args(config)],
            cwd,
            tmp_path / f"{cwd.name}.log",
            {"MT_CACHE": str(cwd / "cache")},
        )
        for cwd in (a, b)
    ]
    rcs = finish(nodes, 240)
    logs = "".join((tmp_path / f"{c.name}.log").read_text()[-2000:] for c in (a, b))
    assert rcs == [0, 0], logs
    # Only global rank 0 writes the run directory; which launcher that is, c10d decides.
    written = [c for c in (a, b) if (c / "run").exists()]
    assert len(written) == 1, logs
    main = written[0]
    assert (main / "run" / "last.pt").exists() and (main / "run" / "spm.model").exists()
    # Each node prepared its own token stores, with the tokenizer rank 0 sent it.
    for c in (a, b):
        assert len(list((c / "cache").glob("*/meta.json"))) == 2, c
    assert losses(main / "run") == pytest.approx(losses(one / "run"), rel=1e-5)
    assert sorted(losses(main / "run")) == [2, 4, 6, 8]
    wa = torch.load(one / "run" / "last.pt", weights_only=True)["model"]
    wb = torch.load(main / "run" / "last.pt", weights_only=True)["model"]
    for name, tensor in wa.items():
        torch.testing.assert_close(wb[name], tensor, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.slow
def test_killed_worker_is_restarted_and_the_run_resumes_by_itself(tmp_path):
    """SIGKILL of a worker after the first checkpoint: torchrun restarts the group, the
    workers resume from last.pt without --resume, each step is logged once."""
    steps, every = 60, 10
    config = reverse_task_config(tmp_path, max_steps=steps, eval_every=every, log_every=1)
    cwds = [tmp_path / "node0", tmp_path / "node1"]
    for c in cwds:
        c.mkdir()
    port = free_port()
    nodes = [
        launch(
            [*node_args(port, 2, 1, max_restarts=2), *train_args(config)],
            c,
            tmp_path / f"{c.name}.log",
            {"MT_CACHE": str(c / "cache")},
        )
        for c in cwds
    ]
    try:
        runs = [c / "run" for c in cwds]
        wait_until(
            lambda: any((r / "last.pt").exists() for r in runs), "first checkpoint", 180, *nodes
        )
        run = next(r for r in runs if (r / "last.pt").exists())
        wait_until(lambda: len(loss_steps(run)) > every + 1, "a step past it", 60, *nodes)
        victim = next(p for p in (worker(n, 1) for n in nodes) if p is not None)
        os.kill(victim, signal.SIGKILL)
        logged_before = max(loss_steps(run))
    finally:
        rcs = finish(nodes, 300)
    logs = "".join((tmp_path / f"{c.name}.log").read_text() for c in cwds)
    assert rcs == [0, 0], logs[-4000:]
    assert loss_steps(run) == list(range(1, steps + 1))  # each step once, in order
    resumed = [int(x.split()[3]) for x in logs.splitlines() if x.startswith("resumed at step")]
    assert len(resumed) == 1, logs[-4000:]
    assert resumed[0] % every == 0 and 0 <= logged_before - resumed[0] <= every + 1
    assert torch.load(run / "last.pt", weights_only=True)["step"] == steps


@pytest.mark.slow
def test_a_killed_launcher_started_again_rejoins_and_the_run_resumes(tmp_path):
    """SIGKILL of node 1's launcher with its worker (a node failure), the launcher started
    again 2 s later: the group re-forms, resumes from last.pt, and logs each step once."""
    steps, every = 60, 10
    config = reverse_task_config(tmp_path, max_steps=steps, eval_every=every, log_every=1)
    cwds = [tmp_path / "node0", tmp_path / "node1"]
    for c in cwds:
        c.mkdir()
    port = free_port()
    args = [*node_args(port, 2, 1, max_restarts=3), *train_args(config)]
    logs = [tmp_path / f"{c.name}.log" for c in cwds]
    envs = [{"MT_CACHE": str(c / "cache")} for c in cwds]
    # Node 0 first: the launcher that binds the port hosts the rendezvous store, which must
    # outlive node 1.
    nodes = [launch(args, cwds[0], logs[0], envs[0])]
    try:
        wait_until(lambda: listening(port), "node 0's rendezvous store", 120, *nodes)
        nodes.append(launch(args, cwds[1], logs[1], envs[1]))
        runs = [c / "run" for c in cwds]
        wait_until(
            lambda: any((r / "last.pt").exists() for r in runs), "first checkpoint", 180, *nodes
        )
        run = next(r for r in runs if (r / "last.pt").exists())
        wait_until(lambda: len(loss_steps(run)) > every + 1, "a step past it", 60, *nodes)
        kill_tree(nodes[1])
        nodes[1].wait()
        logged_before = max(loss_steps(run))
        time.sleep(2)
        nodes[1] = launch(args, cwds[1], logs[1], envs[1])
    finally:
        rcs = finish(nodes, 300)
    text = "".join(log.read_text() for log in logs)
    assert rcs == [0, 0], text[-4000:]
    assert loss_steps(run) == list(range(1, steps + 1))  # each step once, in order
    resumed = [int(x.split()[3]) for x in text.splitlines() if x.startswith("resumed at step")]
    assert resumed and resumed[0] % every == 0, text[-4000:]
    assert 0 <= logged_before - resumed[0] <= every + 1
    assert torch.load(run / "last.pt", weights_only=True)["step"] == steps


@pytest.mark.slow
def test_a_hung_peer_ends_the_run_after_the_collective_timeout(tmp_path):
    config = reverse_task_config(tmp_path, max_steps=100_000, eval_every=100_000, log_every=1)
    port = free_port()
    log = tmp_path / "run.log"
    node = launch(
        [*node_args(port, 1, 2), *train_args(config, "train.collective_timeout_s=4")],
        tmp_path,
        log,
    )
    try:
        wait_until(lambda: len(loss_steps(tmp_path / "run")) >= 3, "training", 180, node)
        hung = worker(node, 1)
        assert hung is not None
        os.kill(hung, signal.SIGSTOP)  # alive but silent: no error reaches the others
        wait_until(lambda: "collective_timeout_s" in log.read_text(), "the timeout line", 60)
        os.kill(hung, signal.SIGKILL)
    finally:
        rcs = finish([node], 60)
    assert rcs[0] != 0
    lines = [x for x in log.read_text().splitlines() if "collective_timeout_s" in x]
    assert len(lines) == 1 and lines[0].startswith("mt: error: train: rank 0:"), lines
    assert "(4 s)" in lines[0]


def test_processes_started_as_srun_starts_them_stop_on_usr1_with_75(tmp_path):
    """docs/more-than-one-gpu-or-machine.md's Slurm script: no torchrun, each process gets
    RANK, WORLD_SIZE and MASTER_ADDR/PORT from the environment; Slurm's SIGUSR1 to every task
    saves last.pt and every task exits 75, the code the script requeues on."""
    config = reverse_task_config(tmp_path, max_steps=100_000, eval_every=100_000, log_every=1)
    port = free_port()
    procs = []
    for rank in range(2):
        env = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank)}
        env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        log = tmp_path / f"task{rank}.log"
        procs.append(
            subprocess.Popen(
                [sys.executable, *train_args(config)],
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=log.open("wb"),
                env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                start_new_session=True,
            )
        )
    try:
        wait_until(lambda: len(loss_steps(tmp_path / "run")) >= 3, "training", 180, *procs)
        for p in procs:
            os.kill(p.pid, signal.SIGUSR1)
    finally:
        rcs = finish(procs, 60)
    assert rcs == [75, 75], [(tmp_path / f"task{r}.log").read_text()[-2000:] for r in range(2)]
    saved = torch.load(tmp_path / "run" / "last.pt", weights_only=True)["step"]
    assert loss_steps(tmp_path / "run") == list(range(1, saved + 1))

"""Cluster targets on one machine: killed workers and launchers, sharded translation, preemption.

    python scripts/cluster_check.py --work /tmp/cluster [--seed 1] [--only kill,preempt,translate]

- kill: two torchrun "nodes" (launchers on 127.0.0.1, c10d rendezvous, 1 worker each, each its
  own working and cache folder) train configs/tiny.yaml on Multi30k. (a) One worker, chosen at
  random, is SIGKILLed at a random step after the first checkpoint; (b) node 1's launcher is
  SIGKILLed with its worker and started again. Checked: the run reaches max_steps, every step
  is in metrics.jsonl once, the steps done again are at most the checkpoint interval, and the
  final checkpoint translates.
- translate: 10,000 Multi30k training sources through `mt translate` as one process with one
  thread (the reference), one process with two threads, and torchrun with two processes of one
  thread each, greedy and beam 5; the sharded output must equal the reference byte for byte.
  Times are wall clock of the whole command (model load and torchrun start included); run this
  part alone under the machine's timed-run lock (`flock LOCK python scripts/cluster_check.py
  --only translate ...`, after a kill check made the model); the load average is printed.
- preempt: `mt train` gets SIGTERM at a random moment (exit 75, nothing lost), is resumed, then
  SIGKILLed at a random moment with train.checkpoint_minutes 0.05: the work lost is at most 3 s
  (plus the step in flight), and metrics.jsonl holds every step once after the last resume.

Prints one JSON object per check (and `ok` or the failed condition).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from cluster_helpers import (  # noqa: E402
    ELASTIC_ENV,
    finish,
    free_port,
    kill_tree,
    launch,
    node_args,
    torchrun,
    wait_until,
    worker,
)

DATA = os.environ.get("MT_DATA") or str(REPO.parent / "shared" / "data" / "multi30k")


def loss_steps(run: Path) -> list[int]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    return [r["step"] for r in map(json.loads, path.read_text().splitlines()) if "loss" in r]


def resumed_steps(*logs: Path) -> list[int]:
    lines = [x for log in logs for x in log.read_text(errors="replace").splitlines()]
    return [int(x.split()[3]) for x in lines if x.startswith("resumed at step")]


def train_sets(steps: int, every: int) -> list[str]:
    sets = [f"train.max_steps={steps}", f"train.eval_every={every}", "train.log_every=1"]
    sets += ["train.eval_bleu=false", "train.threads=1", "data.max_valid_examples=50"]
    sets += ["train.keep_last=0", "train.tensorboard=false"]
    return [x for s in sets for x in ("--set", s)]


def translates(ckpt: Path) -> bool:
    out = subprocess.run(
        [sys.executable, "-m", "mt", "translate", str(ckpt), "--device", "cpu", "--greedy"],
        input="Ein Mann fährt Fahrrad.\nZwei Hunde spielen im Schnee.\n",
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=120,
    )
    return out.returncode == 0 and all(line.strip() for line in out.stdout.splitlines()[:2])


def kill_check(work: Path, mode: str, rng: random.Random) -> dict:
    """One two-node run with a kill of `mode` ("worker" or "launcher") at a random step."""
    steps, every = 240, 40
    root = work / f"kill-{mode}"
    cwds = [root / "node0", root / "node1"]
    for c in cwds:
        c.mkdir(parents=True, exist_ok=True)
    port = free_port()
    args = [*node_args(port, 2, 1, max_restarts=3), "-m", "mt", "train"]
    args += [str(REPO / "configs" / "tiny.yaml"), "--run-dir", "run", *train_sets(steps, every)]
    env = [{"MT_CACHE": str(c / "cache"), "MT_DATA": DATA} for c in cwds]
    logs = [root / "node0.log", root / "node1.log"]
    nodes = [launch(args, cwds[0], logs[0], env[0])]
    time.sleep(3)  # node 0 first: it hosts the rendezvous and (lower pid) gets global rank 0
    nodes.append(launch(args, cwds[1], logs[1], env[1]))
    run = cwds[0] / "run"
    kill_at = rng.randint(every + 1, steps - every)
    started = time.monotonic()
    try:
        wait_until(lambda: (run / "last.pt").exists(), "first checkpoint", 600, *nodes)
        wait_until(lambda: max(loss_steps(run), default=0) >= kill_at, "kill step", 600, *nodes)
        if mode == "worker":
            rank = rng.randint(0, 1)
            pid = worker(nodes[rank], rank)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            what = f"worker of rank {rank}"
        else:
            kill_tree(nodes[1])
            nodes[1].wait()
            time.sleep(2)
            nodes[1] = launch(args, cwds[1], logs[1], env[1])
            what = "launcher of node 1, started again 2 s later"
        logged_before = max(loss_steps(run))
    finally:
        rcs = finish(nodes, 900)
    seconds = time.monotonic() - started
    logged = loss_steps(run)
    resumed = resumed_steps(*logs)
    redone = logged_before - resumed[0] if resumed else None
    checks = {
        "exit codes 0": rcs == [0, 0],
        "max_steps reached": (run / "last.pt").exists() and logged[-1:] == [steps],
        "each step once": logged == list(range(1, steps + 1)),
        "resumed once": len(resumed) == 1,
        "redone <= interval": redone is not None and 0 <= redone <= every,
        "final checkpoint translates": translates(run / "last.pt"),
    }
    return {
        "check": f"kill {mode}",
        "killed": what,
        "at_step": logged_before,
        "resumed_at": resumed,
        "steps_redone": redone,
        "interval": every,
        "seconds": round(seconds, 1),
        "ok": all(checks.values()),
        "failed": [k for k, v in checks.items() if not v],
    }


def timed(cmd: list[str], threads: int, log: Path) -> float:
    env = {**os.environ, **ELASTIC_ENV, "OMP_NUM_THREADS": str(threads)}
    tick = time.perf_counter()
    with log.open("ab") as out:
        subprocess.run(cmd, check=True, env=env, stdout=out, stderr=out, timeout=1800)
    return time.perf_counter() - tick


def translate_check(work: Path, ckpt: Path) -> list[dict]:
    import gzip

    n = 10_000
    src = work / "translate" / "input.de"
    src.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(Path(DATA) / "train.de.gz", "rt", encoding="utf-8") as f:
        src.write_text("".join(next(f) for _ in range(n)), encoding="utf-8")
    log = work / "translate" / "runs.log"
    out = []
    for name, search, rounds in (("greedy", ["--greedy"], 2), ("beam 5", ["--beam", "5"], 1)):
        base = [str(ckpt), "--input", str(src), "--device", "cpu", "--buffer-lines", "500"]
        base += search
        tag = name.replace(" ", "")
        ref = work / "translate" / f"ref-{tag}.txt"
        one = [sys.executable, "-m", "mt", "translate", *base, "--output", str(ref)]
        t_ref = timed(one, 1, log)
        times: dict[str, list[float]] = {"1x2": [], "2x1": []}
        identical = {"1x2": True, "2x1": True}
        for r in range(rounds):
            order = ["1x2", "2x1"] if r % 2 == 0 else ["2x1", "1x2"]
            for kind in order:
                target = work / "translate" / f"{kind}-{tag}-{r}.txt"
                if kind == "1x2":
                    cmd = [sys.executable, "-m", "mt", "translate", *base, "--output", str(target)]
                    times[kind].append(timed(cmd, 2, log))
                else:
                    cmd = [torchrun(), "--nproc_per_node=2", "--rdzv-backend=c10d"]
                    cmd += [f"--rdzv-endpoint=127.0.0.1:{free_port()}", "-m", "mt", "translate"]
                    cmd += [*base, "--output", str(target)]
                    times[kind].append(timed(cmd, 1, log))
                identical[kind] &= target.read_bytes() == ref.read_bytes()
        best = {k: min(v) for k, v in times.items()}
        out.append(
            {
                "check": f"sharded translate, {name}",
                "lines": n,
                "sent_per_s_1proc_1thread": round(n / t_ref, 1),
                "sent_per_s_1proc_2threads": round(n / best["1x2"], 1),
                "sent_per_s_2procs_1thread": round(n / best["2x1"], 1),
                "ratio_2x1_over_1x2": round(best["1x2"] / best["2x1"], 3),
                "seconds": {k: [round(x, 1) for x in v] for k, v in times.items()},
                "identical_to_1proc_1thread": identical,
                "ok": identical["2x1"],
            }
        )
    return out


def preempt_check(work: Path, rng: random.Random) -> dict:
    run = work / "preempt" / "run"
    run.parent.mkdir(parents=True, exist_ok=True)
    minutes = 0.05
    cmd = [sys.executable, "-m", "mt", "train", str(REPO / "configs" / "tiny.yaml")]
    cmd += ["--run-dir", str(run), *train_sets(100_000, 100_000)]
    cmd += ["--set", f"train.checkpoint_minutes={minutes}", "--set", "train.max_minutes=30"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MT_DATA": DATA}

    def start(*extra: str) -> subprocess.Popen:
        return subprocess.Popen(
            [*cmd, *extra],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def ckpt_step() -> int:
        import torch

        return torch.load(run / "last.pt", weights_only=True)["step"]

    # SIGTERM at a random moment: the step ends, last.pt is written, exit 75.
    proc = start()
    wait_until(lambda: len(loss_steps(run)) >= 1, "training", 600, proc)
    time.sleep(rng.uniform(2, 15))
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    term_rc, term_step, term_logged = proc.returncode, ckpt_step(), max(loss_steps(run))
    # Requeued, then SIGKILLed at a random moment: only the timed checkpoints count.
    proc = start("--resume")
    wait_until(lambda: max(loss_steps(run)) > term_logged + 2, "resumed training", 600, proc)
    time.sleep(rng.uniform(2, 15))
    os.killpg(proc.pid, signal.SIGKILL)
    killed_at = time.time()
    proc.wait()
    lost_s = killed_at - (run / "last.pt").stat().st_mtime
    kill_logged, kill_step = max(loss_steps(run)), ckpt_step()
    final = kill_logged + 5
    done = subprocess.run(
        [*cmd, "--resume", "--set", f"train.max_steps={final}"], env=env, capture_output=True
    )
    logged = loss_steps(run)
    checks = {
        "SIGTERM exits 75": term_rc == 75,
        "SIGTERM loses nothing": term_step == term_logged,
        "kill loses <= checkpoint_minutes + 1 s": lost_s <= 60 * minutes + 1.0,
        "requeued run completes": done.returncode == 0,
        "each step once": logged == list(range(1, final + 1)),
    }
    return {
        "check": "preempt",
        "sigterm_at_step": term_logged,
        "sigterm_saved_step": term_step,
        "kill_at_step": kill_logged,
        "kill_last_pt_step": kill_step,
        "kill_lost_steps": kill_logged - kill_step,
        "kill_lost_seconds": round(lost_s, 2),
        "checkpoint_seconds": 60 * minutes,
        "ok": all(checks.values()),
        "failed": [k for k, v in checks.items() if not v],
    }


def uptime() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__repr__()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="folder for runs and outputs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--only", default="kill,translate,preempt", help="also kill-worker, kill-launcher"
    )
    args = ap.parse_args()
    rng = random.Random(args.seed)
    only = args.only.split(",")
    args.work.mkdir(parents=True, exist_ok=True)
    print(json.dumps({"load_before": uptime()}), flush=True)
    results = []
    for mode in ("worker", "launcher"):
        if "kill" in only or f"kill-{mode}" in only:
            results.append(kill_check(args.work, mode, rng))
            print(json.dumps(results[-1]), flush=True)
    if "preempt" in only:
        results.append(preempt_check(args.work, rng))
        print(json.dumps(results[-1]), flush=True)
    if "translate" in only:
        ckpt = args.work / "kill-worker" / "node0" / "run" / "last.pt"
        if not ckpt.exists():
            raise SystemExit(f"{ckpt}: run the kill check first (its model is translated)")
        print(json.dumps({"load_before_timed": uptime()}), flush=True)
        for r in translate_check(args.work, ckpt):
            results.append(r)
            print(json.dumps(r), flush=True)
    print(json.dumps({"load_after": uptime(), "all_ok": all(r["ok"] for r in results)}))


if __name__ == "__main__":
    main()

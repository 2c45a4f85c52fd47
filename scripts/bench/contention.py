"""`mt` on a shared or limited machine: throughput beside other work and on one CPU, as a ratio
to free cores, today's default threads ("old", a checkout of `--base`) against the thread policy
of this tree ("new", mt/device.py).

    flock /work/brief/timed.lock python -m scripts.bench.contention runs/demo \\
        --config configs/demo.yaml --src $MT_DATA/test_2016_flickr.de.gz

Modes, each a real `python -m mt` child process with the tree first on PYTHONPATH:
- translate: `mt translate --beam 5` of `--sentences` lines (wall time, model load included);
- train: `mt train CONFIG` for `--train-seconds` on a prepared run directory (steps/s from its
  metrics.jsonl, the first step left out), stopped with SIGTERM;
- serve: `mt serve`, then every one of `--serve-sentences` lines as its own request from
  `--clients` concurrent clients (sentences/s).
Conditions: free cores; beside a second `mt train CONFIG` with default settings (from the same
tree, started before and stopped after each timed run); beside a pure-Python CPU burner; under
`taskset -c 0`; in a cgroup with a 1-CPU quota (cgroup v1 cpu.cfs_quota_us, made and removed
here; skipped where /sys/fs/cgroup/cpu cannot be written). On one CPU a third variant runs:
old with OMP_NUM_THREADS=1, the manual fix the policy should match.

Variants alternate within each condition over `--rounds` (best kept); the load average before
and after each condition is printed beside it, since other work on the machine skews "free".
The new tree's start line (threads chosen) is printed per condition. Ends with a JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from scripts.common import REPO, describe_machine, git, markdown_table, read_lines, worktree
from tests.support.processes import free_port

CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
CONDITIONS = ("free", "beside-train", "beside-burner", "taskset", "quota")
ONE_CPU = ("taskset", "quota")
MODES = ("translate", "train", "serve")
THREAD_VARS = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS", "GOMP_SPINCOUNT")


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


class Variant:
    """A tree of mt and its thread environment; its children run in the tree (`python -m`
    puts the working directory first on the path)."""

    def __init__(self, name: str, tree: Path, env: dict[str, str] | None = None) -> None:
        self.name, self.tree = name, tree
        base = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
        self.env = {**base, "PYTHONPATH": str(tree), **(env or {})}

    def mt(self, *args: object) -> list[str]:
        return [sys.executable, "-m", "mt", *map(str, args)]


class Condition:
    """How a timed child is started (a prefix, a cgroup) and what runs beside it."""

    def __init__(self, name: str, bench: Bench) -> None:
        self.name, self.bench = name, bench
        self.prefix = ["taskset", "-c", "0"] if name == "taskset" else []
        self.cgroup: Path | None = None

    def preexec(self) -> Callable[[], None] | None:
        cgroup = self.cgroup
        if cgroup is None:
            return None
        return lambda: (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    @contextlib.contextmanager
    def around(self, variant: Variant) -> Iterator[None]:
        """The competing load (started and settled before, stopped after), or the cgroup."""
        if self.name == "quota":
            self.cgroup = CGROUP_CPU / f"mt-bench-{os.getpid()}"
            self.cgroup.mkdir()
            (self.cgroup / "cpu.cfs_period_us").write_text("100000")
            (self.cgroup / "cpu.cfs_quota_us").write_text("100000")
        other = None
        if self.name == "beside-train":
            other = self.bench.start_training(variant, "competitor")
        elif self.name == "beside-burner":
            other = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            yield
        finally:
            if other is not None:
                stop(other)
            if self.cgroup is not None:
                time.sleep(0.2)  # the children have left it
                self.cgroup.rmdir()
                self.cgroup = None


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.ckpt = args.checkpoint.resolve()
        self.config = args.config.resolve()
        lines = read_lines(args.src)[: args.sentences]
        self.src = work / "src.txt"
        self.src.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.lines = lines[: args.serve_sentences]
        self.prepared = work / "prepared"
        self.runs = 0
        self.start_lines: dict[str, str] = {}

    # -- the modes: each returns its throughput (higher is better) ------------------------------

    def translate(self, variant: Variant, cond: Condition) -> float:
        out = self.work / "out.txt"
        cmd = variant.mt("translate", self.ckpt, "--device", "cpu", "--beam", self.args.beam,
                         "--input", self.src, "--output", out)  # fmt: skip
        main, child = pty.openpty()  # stderr at a terminal: the start line is said
        said: list[bytes] = []
        reader = threading.Thread(target=drain, args=(main, said), daemon=True)
        reader.start()
        start = time.perf_counter()
        proc = subprocess.run(
            [*cond.prefix, *cmd],
            env=variant.env,
            cwd=variant.tree,
            stdin=subprocess.DEVNULL,
            stderr=child,
            preexec_fn=cond.preexec(),
            timeout=3600,
        )
        wall = time.perf_counter() - start
        os.close(child)
        reader.join(5)
        os.close(main)
        err = b"".join(said).decode("utf-8", "replace")
        if proc.returncode != 0:
            raise SystemExit(f"{variant.name} translate failed: {err[-500:]}")
        self.note(variant, cond, "translate", err)
        return self.args.sentences / wall

    def start_training(self, variant: Variant, name: str, cond: Condition | None = None, *extra):
        """`mt train CONFIG` on a copy of the prepared run directory, once it is in its loop."""
        self.runs += 1
        run = self.work / f"{name}-{self.runs}"
        shutil.copytree(self.prepared, run)
        log = open(self.work / f"{name}-{self.runs}.log", "wb")
        proc = subprocess.Popen(
            [*(cond.prefix if cond else []),
             *variant.mt("train", self.config, "--run-dir", run,
                         "--set", "train.max_steps=1000000", "--set", "train.eval_every=1000000",
                         *extra)],
            env=variant.env, cwd=variant.tree, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=cond.preexec() if cond else None,
        )  # fmt: skip
        proc.run_dir = run  # type: ignore[attr-defined]
        proc.log_path = Path(log.name)  # type: ignore[attr-defined]
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if b"mt train: " in proc.log_path.read_bytes():  # type: ignore[attr-defined]
                return proc
            time.sleep(0.5)
        stop(proc)
        raise SystemExit(f"{variant.name} mt train did not start: {proc.log_path.read_text()}")  # type: ignore[attr-defined]

    def train(self, variant: Variant, cond: Condition) -> float:
        proc = self.start_training(
            variant, "train", cond, "--set", "train.log_every=1", "--set", "train.eval_bleu=false"
        )
        time.sleep(self.args.train_seconds)
        stop(proc)
        text = proc.log_path.read_text(errors="replace")  # type: ignore[attr-defined]
        self.note(variant, cond, "train", text)
        metrics = proc.run_dir / "metrics.jsonl"  # type: ignore[attr-defined]
        text = metrics.read_text() if metrics.exists() else ""
        rows = [json.loads(x) for x in text.splitlines() if x.strip()]
        rows = [r for r in rows if "tgt_tokens_per_s" in r]  # a record per step
        if len(rows) < 2:
            return 0.0  # fewer than two steps in the time
        first, last = rows[0], rows[-1]  # the first step (warm-up) left out
        return (last["step"] - first["step"]) / max(last["elapsed"] - first["elapsed"], 1e-9)

    def serve(self, variant: Variant, cond: Condition) -> float:
        port = free_port()
        log = self.work / f"serve-{variant.name}-{cond.name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [*cond.prefix, *variant.mt("serve", self.ckpt, "--device", "cpu", "--port", port)],
                env=variant.env, cwd=variant.tree, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=cond.preexec(),
            )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise SystemExit(f"mt serve exited: {log.read_text()}")
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                time.sleep(0.3)
            seconds = asyncio.run(clients(url, self.lines, self.args.clients))
        finally:
            stop(proc)
        self.note(variant, cond, "serve", log.read_text(errors="replace"))
        return len(self.lines) / seconds

    def note(self, variant: Variant, cond: Condition, mode: str, err: str) -> None:
        """The start line of `mt MODE` as the new tree said it (the count it chose)."""
        for line in err.replace("\r", "").splitlines():
            if line.startswith(f"mt {mode}: ") and "thread" in line:
                self.start_lines[f"{variant.name} {mode} {cond.name}"] = line


def drain(fd: int, into: list[bytes]) -> None:
    with contextlib.suppress(OSError):
        while chunk := os.read(fd, 4096):
            into.append(chunk)


async def clients(url: str, lines: list[str], n: int) -> float:
    """Every line as its own request from `n` concurrent clients; the wall seconds."""
    todo = list(lines)

    async def client(http: httpx.AsyncClient) -> None:
        while todo:
            line = todo.pop()
            r = await http.post("/v1/translate", json={"items": [{"src": line}]})
            r.raise_for_status()

    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=600) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(n)))
        return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", type=Path, help="a trained model (configs/demo.yaml's run)")
    p.add_argument("--config", type=Path, default=REPO / "configs" / "demo.yaml")
    p.add_argument("--src", type=Path, required=True)
    p.add_argument("--base", default="", help="commit of the old default (default: merge-base)")
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--train-seconds", type=float, default=60.0)
    p.add_argument("--serve-sentences", type=int, default=400)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--conditions", default=",".join(CONDITIONS))
    p.add_argument(
        "--also", nargs="*", default=[], metavar="NAME:VAR=VALUE[,VAR=VALUE]",
        help="also time this tree with these environment variables, e.g. "
        "new-2:OMP_NUM_THREADS=2 or spin:GOMP_SPINCOUNT=30000",
    )  # fmt: skip
    args = p.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    conditions = [c for c in args.conditions.split(",") if c]
    if "quota" in conditions and not os.access(CGROUP_CPU, os.W_OK):
        print(f"quota: skipped ({CGROUP_CPU} cannot be written here)")
        conditions.remove("quota")
    base = args.base or git("merge-base", "HEAD", "main")

    with tempfile.TemporaryDirectory(prefix="mt-contention-") as tmp, worktree(base) as old_tree:
        work = Path(tmp)
        old, new = Variant("old", old_tree), Variant("new", REPO)
        one = Variant("omp1", old_tree, {"OMP_NUM_THREADS": "1"})
        extra = [also_variant(spec) for spec in args.also]
        bench = Bench(args, work)
        subprocess.run(
            new.mt("prepare", bench.config, "--run-dir", bench.prepared),
            env={**new.env, "OMP_NUM_THREADS": "1"}, cwd=REPO, check=True,
            capture_output=True,
        )  # fmt: skip
        print(f"base {base[:10]} (old) vs {REPO} (new); {describe_machine()}; "
              f"{args.sentences} sentences beam {args.beam}, training "
              f"{args.train_seconds:g} s, serve {len(bench.lines)} sentences from "
              f"{args.clients} clients; best of {args.rounds}", flush=True)  # fmt: skip
        results: dict[str, dict[str, dict[str, float]]] = {}
        loads: dict[str, str] = {}
        for name in conditions:
            cond = Condition(name, bench)
            variants = [old, new, one] if name in ONE_CPU else [old, new]
            variants += extra
            before = load()
            for mode in modes:
                best = results.setdefault(mode, {}).setdefault(name, {})
                for _ in range(args.rounds):
                    for v in variants:
                        with cond.around(v):
                            speed = getattr(bench, mode)(v, cond)
                        best[v.name] = max(best.get(v.name, 0.0), speed)
                shown = ", ".join(f"{k} {x:.3g}" for k, x in best.items())
                print(f"  {name:<14} {mode:<10} {shown}", flush=True)
            loads[name] = f"{before} -> {load()}"
            print(f"{name}: load average (1/5/15 min) {loads[name]}", flush=True)
        report(results, loads, bench.start_lines)


def also_variant(spec: str) -> Variant:
    """`NAME:VAR=VALUE[,VAR=VALUE]`: this tree under extra environment variables."""
    name, _, assigns = spec.partition(":")
    env = dict(a.split("=", 1) for a in assigns.split(",") if a)
    return Variant(name, REPO, env)


def report(results: dict, loads: dict[str, str], start_lines: dict[str, str]) -> None:
    """The table for docs/studies/busy-machines.md, the new tree's start lines, and everything as
    JSON."""
    header = ["mode", "condition", "load before -> after", "old", "new", "OMP_NUM_THREADS=1",
              "new / old", 'old / "free"', 'new / "free"']  # fmt: skip
    rows = []
    for mode, by_cond in results.items():
        free = by_cond.get("free", {})
        for cond, got in by_cond.items():
            old, new, one = got["old"], got["new"], got.get("omp1")
            rows.append([
                mode, cond, loads.get(cond, ""), f"{old:.3g}", f"{new:.3g}",
                f"{one:.3g}" if one else "-", f"{new / old:.2f}x" if old else "-",
                f"{old / free['old']:.2f}x" if free.get("old") else "-",
                f"{new / free['new']:.2f}x" if free.get("new") else "-",
            ])  # fmt: skip
    print("\nthroughput: translate and serve in sentences/s, train in steps/s\n")
    print(markdown_table(header, rows, "lll" + "r" * 6))
    print("\nstart lines of the new tree:")
    for key, line in sorted(start_lines.items()):
        if key.startswith("new "):
            print(f"  {key}: {line}")
    print(json.dumps({"results": results, "loads": loads, "start_lines": start_lines}))


if __name__ == "__main__":
    main()

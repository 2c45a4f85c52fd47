"""Data pipeline cost of `mt`: preparation speed and memory, store size, start-up, shared pages.

Multi30k is too small to show what a data pipeline costs, so the script first writes a synthetic
corpus of `--pairs` lines (each line two random Multi30k training pairs joined, the same two on
both sides), streamed to gzip so that 10M pairs need no more memory than 10k. Then, for the
working tree of this repository and (with `--baseline REV`) for an older commit checked out in a
temporary `git worktree`, it measures on the de-en recipe config:

- preparation: `mt prepare` in a fresh run directory (seconds, pairs/s, peak RSS). An old commit
  has no `mt prepare`; there it is a cold `mt train` up to its first logged step, which also
  starts torch, builds the model and takes a step. The current code is timed that way too (a
  second fresh run directory), and cold minus warm start compares the two on the same footing.
- the training store (`cache/train-*`): bytes per token and per pair.
- a warm start: seconds from launching `mt train` on the prepared run directory to its first
  logged step, then per-process RSS, PSS and anonymous memory read from /proc while it trains,
  split into the pages of the mapped store files (inside the run's `cache/`) and the rest; the
  same under `torchrun --nproc_per_node=4` (gloo on CPU), where the point of a memory-mapped
  store is that four processes hold one copy of it: their store PSS adds up to one store.

Every run directory gets the same `spm.model`, trained once beforehand (its time is reported on
its own line), so preparation times compare encoding and store writing, not tokenizer training.
Peak RSS comes from `os.wait4` on each measured child: the kernel's figure for that process and
the children it waited for, so no measurement inherits another's peak (as RUSAGE_CHILDREN of
one long-lived process would). Children run one at a time, each with a timeout, in their own
session, and a kill takes their whole process tree.

    python -m scripts.bench.data --pairs 50000 --baseline HEAD --json bench_data.json
    python -m scripts.bench.data --pairs 1000000 --baseline 2fb097a --skip-torchrun
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scripts.bench.data_report import derive, get, table
from scripts.bench.memory import MIB, process_memory, summarize
from scripts.common import REPO, git, machine, read_lines, say, worktree, write_text
from scripts.processes import Child, MeasureError, process_tree

CONFIG = "configs/multi30k_de_en.yaml"


# -- the synthetic corpus ----------------------------------------------------------------------


def make_corpus(multi30k: Path, work: Path, pairs: int, seed: int, chunk: int = 100_000) -> Path:
    """`{work}/corpus-{pairs}-seed{seed}` with train/val/test files, reused when complete.

    Lines are generated and compressed a chunk at a time, so memory is Multi30k plus one chunk
    whatever `pairs` is. The folder is written under a temporary name and renamed at the end:
    an interrupted run leaves no half corpus that a later run would trust.
    """
    folder = work / f"corpus-{pairs}-seed{seed}"
    if (folder / "corpus.json").is_file():
        say(f"corpus: reusing {folder}")
        return folder
    de = read_lines(multi30k / "train.de.gz")
    en = read_lines(multi30k / "train.en.gz")
    if len(de) != len(en):
        raise SystemExit(f"{multi30k}: train.de.gz and train.en.gz differ in length")
    work.mkdir(parents=True, exist_ok=True)
    tmp = work / f".{folder.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    say(f"corpus: writing {pairs:,} pairs from {len(de):,} Multi30k pairs -> {folder}")
    with (
        gzip.open(tmp / "train.de.gz", "wb", compresslevel=1) as f_de,
        gzip.open(tmp / "train.en.gz", "wb", compresslevel=1) as f_en,
    ):
        report = pairs // 10
        for done in range(0, pairs, chunk):
            n = min(chunk, pairs - done)
            i = rng.integers(0, len(de), n).tolist()
            j = rng.integers(0, len(de), n).tolist()
            f_de.write(("\n".join(de[a] + " " + de[b] for a, b in zip(i, j)) + "\n").encode())
            f_en.write(("\n".join(en[a] + " " + en[b] for a, b in zip(i, j)) + "\n").encode())
            if report <= done + n < pairs:
                say(f"corpus: {done + n:,} pairs written")
                report += pairs // 10
    for split in ("val", "test_2016_flickr"):
        for lang in ("de", "en"):
            src = multi30k / f"{split}.{lang}.gz"
            if src.is_file():
                shutil.copyfile(src, tmp / src.name)
    info = {"pairs": pairs, "seed": seed, "from": str(multi30k)}
    (tmp / "corpus.json").write_text(json.dumps(info) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    say(f"corpus: {pairs:,} pairs in {time.perf_counter() - start:.1f} s")
    return folder


# -- one checkout ------------------------------------------------------------------------------


@dataclass
class Checkout:
    """Code to measure: this working tree, or an older commit in a temporary worktree."""

    label: str
    root: Path
    revision: str
    legacy: bool  # no `mt prepare`: preparation is a cold `mt train` to its first step
    extra: list[str] = field(default_factory=list)  # --set overrides for this checkout only
    results: dict[str, Any] = field(default_factory=dict)

    def env(self, corpus: Path) -> dict[str, str]:
        env = dict(os.environ)
        # PYTHONPATH and the working directory both point at the checkout: `python -m mt` puts
        # the working directory first on sys.path, ahead of the editable install of the repo.
        env["PYTHONPATH"] = str(self.root)
        env["MT_DATA"] = str(corpus)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def mt(
        self, command: str, run_dir: Path, corpus: Path, sets: list[str], threads: int = 2
    ) -> list[str]:
        """`mt COMMAND` arguments on the de-en recipe with this corpus and thread count."""
        base = [command, str(self.root / CONFIG), "--run-dir", str(run_dir)]
        defaults = [f"data.root={corpus}", f"train.threads={threads}"]
        return base + [a for s in defaults + self.extra + sets for a in ("--set", s)]

    def child(self, args: list[str], corpus: Path, log: Path, torchrun: int = 0) -> Child:
        """`python -m mt ARGS`, or under `torchrun --standalone` with `torchrun` processes."""
        launch = [sys.executable, "-m", "mt", *args]
        if torchrun:
            run = ["torch.distributed.run", "--standalone", f"--nproc_per_node={torchrun}", "-m"]
            launch = [sys.executable, "-m", *run, "mt", *args]
        return Child(launch, self.root, self.env(corpus), log)

    def check_import(self, corpus: Path) -> None:
        """Fail early if `python -m mt` would import another checkout's code."""
        out = subprocess.run(
            [sys.executable, "-c", "import mt; print(mt.__file__)"],
            cwd=self.root,
            env=self.env(corpus),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.strip()
        if not Path(out).resolve().is_relative_to(self.root.resolve()):
            raise SystemExit(f"{self.label}: python -m mt imports {out}, not {self.root}")


def train_store(cache: Path) -> Path:
    found = [p for p in cache.glob("train-*") if p.is_dir()]
    if not found:
        raise MeasureError(f"{cache}: no train-* store")
    return max(found, key=lambda p: p.stat().st_mtime)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def reset_run_dir(run_dir: Path, keep: tuple[str, ...] = ("spm.model", "cache")) -> None:
    """Leave only the tokenizer and the caches: the state of a prepared, never-trained run."""
    for p in run_dir.iterdir():
        if p.name in keep:
            continue
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()


def training_pairs(log: Path) -> int | None:
    m = re.search(r"([\d,]+) training pairs", log.read_text(errors="replace"))
    return int(m.group(1).replace(",", "")) if m else None


def cold_train(c: Checkout, run_dir: Path, corpus: Path, threads: int, timeout: float) -> Child:
    """`mt train` from a run dir holding only spm.model, killed at its first logged step."""
    sets = ["train.max_steps=1", "train.log_every=1", "train.eval_every=1000000"]
    log = run_dir.parent / f"{run_dir.name}-logs" / "cold.log"
    child = c.child(c.mt("train", run_dir, corpus, sets, threads), corpus, log)
    try:
        child.first_step_s = child.wait_first_step(run_dir / "metrics.jsonl", timeout)
    finally:
        child.kill()
    return child


@dataclass
class Bench:
    """What every measurement needs besides the checkout."""

    work: Path
    corpus: Path
    spm_model: Path
    args: argparse.Namespace
    tokens_hint: int | None = None  # the current store's tokens, for the old Arrow cache

    def run_dir(self, c: Checkout) -> Path:
        return self.work / "runs" / c.label

    def log(self, c: Checkout, name: str) -> Path:
        return self.work / "runs" / f"{c.label}-logs" / name


def measure_prepare(c: Checkout, b: Bench) -> None:
    """Preparation from a run directory holding only the shared spm.model.

    The old code has no `mt prepare`: its preparation is the cold `mt train`. The current code
    gets both, the cold start in a second fresh run dir, so that cold minus warm start (start-up
    to the first step without preparing) compares the two on the same footing.
    """
    pairs, run_dir = b.args.pairs, b.run_dir(c)
    if c.legacy:
        child = cold_train(c, run_dir, b.corpus, b.args.threads, b.args.timeout)
        seconds, what, log = child.first_step_s, "cold `mt train` to step 1", b.log(c, "cold.log")
    else:
        log = b.log(c, "prepare.log")
        child = c.child(c.mt("prepare", run_dir, b.corpus, [], b.args.threads), b.corpus, log)
        child.wait(b.args.timeout)
        seconds, what = child.seconds, "`mt prepare`"
    built = re.search(
        r"train\S*: [\d,]+ pairs read.* in ([\d.]+) s \(", log.read_text(errors="replace")
    )
    c.results["prepare"] = {
        "what": what,
        "seconds": seconds,
        "pairs_per_s": pairs / seconds,
        "peak_rss_mib": child.maxrss_kib / 1024,
        "store_build_s_logged": float(built.group(1)) if built else None,
        "log": str(log),
    }
    say(
        f"{c.label}: {what}: {seconds:.1f} s, {pairs / seconds:,.0f} pairs/s, "
        f"peak RSS {child.maxrss_kib / 1024:,.0f} MiB"
    )
    if not c.legacy and not b.args.skip_cold:
        cold_dir = run_dir.with_name(f"{run_dir.name}-cold")
        shutil.rmtree(cold_dir, ignore_errors=True)
        cold_dir.mkdir()
        shutil.copyfile(b.spm_model, cold_dir / "spm.model")
        try:
            child = cold_train(c, cold_dir, b.corpus, b.args.threads, b.args.timeout)
        finally:
            shutil.rmtree(cold_dir, ignore_errors=True)  # a second copy of the store
        say(
            f"{c.label}: cold `mt train` to step 1: {child.first_step_s:.1f} s, peak RSS "
            f"{child.maxrss_kib / 1024:,.0f} MiB"
        )
    if c.legacy or not b.args.skip_cold:
        c.results["cold"] = {"seconds": child.first_step_s, "peak_rss_mib": child.maxrss_kib / 1024}


def measure_store(c: Checkout, b: Bench) -> None:
    """Size of the training store; tokens from its meta.json (the old Arrow cache has none,
    so there the current store's count is used: same tokenizer, data and filters)."""
    run_dir = b.run_dir(c)
    store = train_store(run_dir / "cache")
    size = folder_bytes(store)
    meta_path = store / "meta.json"
    tokens, pairs = b.tokens_hint, None
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        tokens, pairs = meta["tokens"]["src"] + meta["tokens"]["tgt"], meta["pairs"]
    if pairs is None:
        pairs = training_pairs(Path(c.results["prepare"]["log"]))
    c.results["store"] = {
        "folder": str(store),
        "bytes": size,
        "bytes_mib": size / MIB,
        "cache_bytes": folder_bytes(run_dir / "cache"),
        "tokens": tokens,
        "tokens_from": "meta.json" if meta_path.is_file() else "the current store",
        "pairs": pairs,
        "bytes_per_token": size / tokens if tokens else None,
        "bytes_per_pair": size / pairs if pairs else None,
    }
    say(
        f"{c.label}: train store {size / MIB:,.1f} MiB, {pairs or 0:,} pairs, "
        f"{tokens or 0:,} tokens -> {store}"
    )


def measure_training(c: Checkout, b: Bench, nproc: int) -> None:
    """Start-up to the first step on the prepared run dir, then memory per process."""
    run_dir = b.run_dir(c)
    reset_run_dir(run_dir)
    threads = b.args.threads if nproc == 1 else b.args.torchrun_threads
    sets = ["train.max_steps=1000000", "train.log_every=1", "train.eval_every=1000000"]
    args = c.mt("train", run_dir, b.corpus, sets, threads)
    child = c.child(
        args, b.corpus, b.log(c, f"train_{nproc}.log"), torchrun=nproc if nproc > 1 else 0
    )
    try:
        seconds = child.wait_first_step(run_dir / "metrics.jsonl", b.args.timeout)
        time.sleep(b.args.settle)  # a few steps on: the loader has filled its prefetch queue
        tree = process_tree()
        trainers = [child.pid] if nproc == 1 else sorted(tree.get(child.pid, []))
        if len(trainers) != nproc:
            raise MeasureError(f"found {len(trainers)} trainer processes, expected {nproc}")
        loaders = [w for t in trainers for w in sorted(tree.get(t, []))]
        cache = run_dir / "cache"
        t_mem = [process_memory(p, cache) for p in trainers]
        l_mem = [process_memory(p, cache) for p in loaders]
        if child.poll():
            raise MeasureError(f"ended while measured, exit {child.exit}: {child.describe()}")
    finally:
        child.kill()
    summary = summarize(t_mem, l_mem, c.results.get("store", {}).get("bytes", 0))
    c.results[f"warm_{nproc}"] = {
        "first_step_s": seconds,
        "threads_per_process": threads,
        "summary": summary,
        "trainers": t_mem,
        "loader_workers": l_mem,
    }
    say(
        f"{c.label}: {nproc} process(es): first step after {seconds:.1f} s; trainer RSS "
        f"{summary['trainer_rss_mib']:,.0f} MiB (store {summary['trainer_store_rss_mib']:,.1f}), "
        f"store PSS summed {summary['store_pss_all_mib']:,.1f} MiB, "
        f"total PSS {summary['total_pss_mib']:,.0f} MiB, {len(l_mem)} loader worker(s)"
    )


def measure(c: Checkout, b: Bench) -> None:
    """Every measurement for one checkout; a failure is recorded and the next one goes on."""
    run_dir = b.run_dir(c)
    for d in (run_dir, b.log(c, "")):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    shutil.copyfile(b.spm_model, run_dir / "spm.model")
    c.check_import(b.corpus)
    steps: list[tuple[str, Callable[[], None]]] = [
        ("prepare", lambda: measure_prepare(c, b)),
        ("store", lambda: measure_store(c, b)),
        ("warm_1", lambda: measure_training(c, b, 1)),
    ]
    if not b.args.skip_torchrun:
        steps.append((f"warm_{b.args.nproc}", lambda: measure_training(c, b, b.args.nproc)))
    for name, step in steps:
        try:
            step()
        except (MeasureError, OSError, subprocess.SubprocessError) as err:
            c.results[name] = {"error": str(err)}
            say(f"{c.label}: {name} failed: {err}")
            if name in ("prepare", "store"):
                return  # nothing to train on


# -- tokenizer, machine, revisions -------------------------------------------------------------


def tokenizer_once(
    current: Checkout, work: Path, corpus: Path, limit: int, timeout: float
) -> tuple[Path, dict[str, Any]]:
    """One spm.model for every run, from `mt prepare` on the first `limit` pairs; reused."""
    folder = work / f"tokenizer-{corpus.name}-{limit}"
    info_path = folder / "tokenizer.json"
    if info_path.is_file() and (folder / "spm.model").is_file():
        say(f"tokenizer: reusing {folder / 'spm.model'}")
        return folder / "spm.model", json.loads(info_path.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    log = folder / "prepare.log"
    args = current.mt("prepare", folder, corpus, [f"data.max_train_examples={limit}"])
    child = current.child(args, corpus, log)
    child.wait(timeout)
    m = re.search(
        r"trained on ([\d,]+) sampled pairs \(sampling ([\d.]+) s, training ([\d.]+) s",
        log.read_text(errors="replace"),
    )
    if not m:
        raise SystemExit(f"{log}: no tokenizer line found")
    info = {
        "pairs_sampled": int(m.group(1).replace(",", "")),
        "sampling_s": float(m.group(2)),
        "training_s": float(m.group(3)),
        "from_first_pairs": limit,
        "command_s": child.seconds,
    }
    shutil.rmtree(folder / "cache", ignore_errors=True)  # only the tokenizer is wanted
    info_path.write_text(json.dumps(info) + "\n")
    say(
        f"tokenizer: sampling {info['sampling_s']:.1f} s, training {info['training_s']:.1f} s "
        f"on {info['pairs_sampled']:,} pairs"
    )
    return folder / "spm.model", info


def current_revision() -> str:
    head = git("rev-parse", "--short=12", "HEAD")
    dirty = git("status", "--porcelain", "--", "mt")
    return f"{head} + uncommitted changes in mt/" if dirty else head


def has_prepare(root: Path) -> bool:
    """Whether a checkout's CLI has `mt prepare` (the data rewrite added it)."""
    files = [root / "mt" / "cli.py", *sorted((root / "mt" / "cli").glob("*.py"))]
    return any(f.is_file() and "def prepare(" in f.read_text() for f in files)


def default_multi30k() -> Path:
    if os.environ.get("MT_DATA"):
        return Path(os.environ["MT_DATA"])
    for folder in (REPO / "data" / "multi30k", REPO.parent / "shared" / "data" / "multi30k"):
        if (folder / "train.de.gz").is_file():
            return folder
    return REPO / "data" / "multi30k"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=1_000_000, help="synthetic corpus size")
    p.add_argument("--seed", type=int, default=1, help="seed of the synthetic corpus")
    p.add_argument("--work", type=Path, default=Path("/tmp/bench_data"))
    p.add_argument(
        "--multi30k",
        type=Path,
        default=default_multi30k(),
        help="folder with Multi30k's .gz files (default: $MT_DATA, else data/multi30k or "
        "../shared/data/multi30k beside the repository)",
    )
    p.add_argument("--baseline", metavar="REV", help="also measure this commit (git worktree)")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for the current code only, e.g. train.loader_workers=0",
    )
    p.add_argument(
        "--baseline-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for the baseline only",
    )
    p.add_argument("--skip-torchrun", action="store_true")
    p.add_argument("--skip-cold", action="store_true", help="no cold `mt train` of current code")
    p.add_argument("--nproc", type=int, default=4, help="processes under torchrun")
    p.add_argument("--threads", type=int, default=2, help="train.threads of one process")
    p.add_argument(
        "--torchrun-threads",
        type=int,
        default=1,
        help="train.threads per process under torchrun (4 x 2 threads on 2 cores only thrash)",
    )
    p.add_argument(
        "--tokenizer-pairs", type=int, default=200_000, help="pairs the tokenizer is trained from"
    )
    p.add_argument("--settle", type=float, default=3.0, help="seconds after step 1 to read /proc")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per measured command")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args()
    if args.pairs < 1 or args.nproc < 2:
        raise SystemExit("--pairs must be >= 1 and --nproc >= 2")
    if not (args.multi30k / "train.de.gz").is_file():
        raise SystemExit(f"{args.multi30k}: no train.de.gz (set --multi30k or MT_DATA)")

    info = machine()
    info["loadavg_start"] = info.pop("loadavg")
    say(f"machine: {info['cpu']}, {info['cpus']} cores; N = {args.pairs:,} pairs")
    work = args.work.resolve()
    corpus = make_corpus(args.multi30k, work, args.pairs, args.seed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup below
    current = Checkout("current", REPO, current_revision(), not has_prepare(REPO), args.sets)
    current.check_import(corpus)
    limit = min(args.tokenizer_pairs, args.pairs)
    spm_model, tok_info = tokenizer_once(current, work, corpus, limit, args.timeout)
    bench = Bench(work, corpus, spm_model, args)
    checkouts = [current]
    try:
        say(f"current: {current.revision}")
        measure(current, bench)
        if args.baseline:
            rev = git("rev-parse", "--verify", f"{args.baseline}^{{commit}}")
            with worktree(rev) as tree:
                legacy = not has_prepare(tree)
                base = Checkout("baseline", tree, rev[:12], legacy, args.baseline_set)
                checkouts.append(base)
                say(f"baseline: {rev[:12]} in {tree} (has mt prepare: {not base.legacy})")
                tokens = get(current.results, "store.tokens")
                bench.tokens_hint = int(tokens) if tokens is not None else None
                try:
                    measure(base, bench)
                finally:
                    for child in list(Child.live):  # before its tree goes
                        child.kill()
    finally:
        for child in list(Child.live):
            child.kill()
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]

    for c in checkouts:
        derive(c.results, args.pairs, args.nproc)
    text, ratios = table([c.results for c in checkouts], args.nproc)
    print(text)
    print(
        f"\nN = {args.pairs:,} synthetic pairs ({corpus}). Tokenizer trained once, outside the "
        f"timings: sampling {tok_info['sampling_s']:.1f} s + training "
        f"{tok_info['training_s']:.1f} s on {tok_info['pairs_sampled']:,} pairs; every run "
        "directory got that spm.model."
    )
    print(
        f"machine: {info['cpu']}, {info['cpus']} cores, {info['memory_gib']} GiB; load average "
        f"{info['loadavg_start'][0]} at start, {info['loadavg_end'][0]} at end"
    )
    for c in checkouts:
        what = c.results.get("prepare", {}).get("what")
        sets = f"; --set {' '.join(c.extra)}" if c.extra else ""
        print(f"{c.label}: {c.revision}; prepare = {what}{sets}")
        for key, value in c.results.items():
            if isinstance(value, dict) and "error" in value:
                print(f"  {key} failed: {value['error']}")
    print(
        f"1 proc: train.threads={args.threads}; {args.nproc} procs: torchrun --standalone, gloo, "
        f"train.threads={args.torchrun_threads}; memory read {args.settle:g} s after step 1. "
        "'trainer' rows: the training processes only; DataLoader workers (children of each "
        "trainer) are in the 'loader' and 'all procs' rows. 'store': mapped files under the "
        "run's cache/ (for the old code its Arrow cache, which it copies into Python lists)."
    )
    if args.json:
        out = {
            "machine": info,
            "pairs": args.pairs,
            "seed": args.seed,
            "corpus": str(corpus),
            "tokenizer": tok_info,
            "revisions": {c.label: c.revision for c in checkouts},
            "results": {c.label: c.results for c in checkouts},
            "ratios_current_over_baseline": ratios,
            "settings": {k: str(v) for k, v in vars(args).items()},
        }
        write_text(args.json, json.dumps(out, indent=1) + "\n")
        say(f"wrote {args.json}")


if __name__ == "__main__":
    main()

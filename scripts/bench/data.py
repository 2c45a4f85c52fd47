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
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scripts.bench.data_report import derive, get, table
from scripts.bench.data_setup import (
    Checkout,
    cold_train,
    current_revision,
    default_multi30k,
    folder_bytes,
    has_prepare,
    make_corpus,
    reset_run_dir,
    tokenizer_once,
    train_store,
    training_pairs,
)
from scripts.bench.memory import MIB, process_memory, summarize
from scripts.common import REPO, git, machine, say, worktree, write_text
from scripts.measure import Child, MeasureError
from tests.support.processes import process_tree


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

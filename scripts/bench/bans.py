"""What the span ban costs: protected decoding with this tree's `SpanRule` against no protection
(in the same process, taking turns over rounds) and against an earlier commit's (`--baseline`,
run from that commit's own worktree in a child process: the ban is a package whose parts change
together, so an older rule cannot be loaded beside this tree's).

Two workloads, each optional:

- `--injected CKPT`: a Multi30k model on test_2016_flickr sentences with spans injected as
  `bench_protect.py` does (seed 1): the model never writes span characters, so this is the
  cost every protected line pays (the fixed ban, the rows read as text).
- `--strings CKPT --strings-src FILE` (and `--strings-warm FILE`, other lines of the set to
  warm an index on): the software-strings model (docs/studies/decoding.md,
  `scripts/tools/software_strings.py`) on its test part, beam search: real strings whose `%s`,
  `<%s>` and tags the model writes itself, so rows hold open spans.
  With `--replay`, the steps of one protected run are replayed through each rule alone
  instead (the ban's CPU seconds without the model's, so little of the machine's noise; this
  tree's and the baseline's new index each in a child process).
  With `--fresh`, `mt translate` runs as a user runs it instead, a fresh process each time
  (interpreter, loading, the index built, every open text new: the span cache,
  `mt.spans.kept`, off), `--protect`, `--no-protect` and the baseline's `--protect` taking
  turns, each child's CPU seconds; with `--strings-warm`, also `--protect` starting from the
  span cache a run on those lines left.
- `--spanful CKPT`: a model that writes spans of its own (the tests' `spanful` model),
  sampled on its own source lines: the ban works at every step, which is where reading each
  row's open span and finding its completing pieces costs.

Every round builds each rule afresh, as each translator does. This tree's rule finds the
index of its vocabulary built (`mt.spans.index`: kept with the vocabulary, as a loaded model
in `mt serve`, `mt eval` or the trainer keeps it), so after the first round its first lookups
are lookups; "this tree, new index" builds the index in each round, as a fresh `mt translate`
process does, so the first lookups of each open text are in its time; "this tree, index
warmed" builds it in each round and first uses it, untimed, on `--strings-warm` lines: what a
loaded model pays on new lines of the same kind. The time spent in the
ban (building the rule and its masks) is reported beside the whole: the rest of a protected
run's extra time is the protection stage's own (finding the spans, `exact`) and decoding
that differs (a model that wants a span it may not complete may write longer; until 802658c
the lines with spans were searched in a round of their own, which cost decoder steps). One
thread each.

    python -m scripts.bench.bans --injected runs/demo/best.pt --spanful runs/spanful/best.pt \\
        --strings runs/strings/best.pt --strings-src data/strings/test.de --limit 610 \\
        --strings-warm data/strings/val.de --rounds 3
    python -m scripts.bench.bans --strings runs/strings/best.pt \\
        --strings-src data/strings/test.de --limit 1687 --fresh --baseline fc761e8 --rounds 6 \\
        --strings-warm data/strings/val.de
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import pickle
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from mt.spans.bans import Bans, SpanRule
from mt.spans.index import PieceIndex, piece_texts
from mt.spans.masks import RowMask
from mt.translation.requests import Plan
from mt.translation.translator import Translator, translate_stream
from scripts.common import (
    REPO,
    alternate,
    describe_machine,
    load_checkpoint,
    markdown_table,
    read_lines,
    worktree,
)
from tests.support.span_inputs import inject_text

# The ban replayed in a child process of another tree (`--baseline`): the recorded calls, one
# rule built fresh (its index too, as a fresh process builds it), its CPU seconds printed.
_CHILD_REPLAY = """
import inspect, pickle, sys, time, torch
from mt.checkpoint import load_model
try:
    from mt.spans.bans import SpanRule
except ImportError:  # an older commit: the module's earlier place
    from mt.decode.bans import SpanRule
calls = pickle.load(open(sys.argv[1], "rb"))
tok = load_model(sys.argv[2]).tokenizer
start = time.process_time()
rule = SpanRule(tok, torch.device("cpu"))
# The rows' parents as the search gave them, to a rule that takes them.
takes = hasattr(rule, "rows_mask") and "parents" in inspect.signature(rule.rows_mask).parameters
for call in calls:
    if hasattr(rule, "rows_mask"):
        rule.rows_mask(*call[: 4 if takes else 3])
    else:
        rule.mask(*call[:3])
print(time.process_time() - start)
"""


def run_child(cmd: list[str], tree: Path, env: dict[str, str]) -> str:
    """Run `cmd` in `tree`; its stdout. A failure stops the benchmark with the child's last
    line of stderr (an older commit cannot read the config of a newer checkpoint, say) and
    the commit's folder, rather than a traceback."""
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"bans: a child in {tree} exited {done.returncode}: {last}")
    return done.stdout


def child_replay(tree: Path, calls: Path, checkpoint: Path) -> float:
    """CPU seconds of the ban of `tree` replaying the pickled `calls`, in a child process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-c", _CHILD_REPLAY, str(calls), str(checkpoint)]
    return float(run_child(cmd, tree, env).split()[-1])


def new_index_rule(tokenizer, device: torch.device) -> SpanRule:
    """This tree's rule over an index built for it alone: what a fresh process pays."""
    return SpanRule(tokenizer, device, PieceIndex(piece_texts(tokenizer)))


class WarmedIndex:
    """This tree's rule over an index built for it in each round and used first, untimed, on
    other lines (`warm`): what a loaded model (`mt serve`) pays on lines it has not seen."""

    def __init__(self, warm: list[str]) -> None:
        self.warm = warm
        self.index: PieceIndex | None = None

    def prepare(self, loaded, cfg, dev: torch.device) -> None:
        self.index = PieceIndex(piece_texts(loaded.tokenizer))
        tr = Translator(loaded.model, loaded.tokenizer, cfg, dev)
        tr._bans = Bans(spans=SpanRule(loaded.tokenizer, dev, self.index))
        list(translate_stream(tr, self.warm, Plan(protect=True, recase=False, keep_numbers=False)))

    def __call__(self, tokenizer, device: torch.device) -> SpanRule:
        return SpanRule(tokenizer, device, self.index)


class Timed:
    """A span rule whose masks are timed: the ban's own share of a protected run. An earlier
    rule that has no `rows_mask` gives its dense `mask`, applied as it was."""

    def __init__(self, rule, seconds: list[float]) -> None:
        self.rule, self.seconds = rule, seconds
        # An earlier rule may not take the rows' parents from the search.
        own = getattr(rule, "rows_mask", None)
        self.takes = own is not None and "parents" in inspect.signature(own).parameters

    def rows_mask(self, history, sent, allowed, parents=None) -> RowMask:
        start = time.perf_counter()
        if self.takes:
            out = self.rule.rows_mask(history, sent, allowed, parents)
        elif hasattr(self.rule, "rows_mask"):
            out = self.rule.rows_mask(history, sent, allowed)
        else:
            out = RowMask.of(self.rule.mask(history, sent, allowed))
        self.seconds.append(time.perf_counter() - start)
        return out


def runner(
    loaded, lines: list[str], rule: type | None, sample: bool, in_ban: list[float], cpu: list[float]
):
    """A call that translates `lines` with protection by a fresh `rule` (None: unprotected);
    each call appends the seconds spent in the ban to `in_ban`, and the process's CPU seconds
    to `cpu` (on a loaded machine the steadier figure: time waiting for a core is not in it)."""
    cfg = dataclasses.replace(loaded.cfg.decode, sample=sample, seed=3) if sample else None
    cfg = cfg or loaded.cfg.decode
    dev = torch.device("cpu")

    def run() -> list[str]:
        if hasattr(rule, "prepare"):
            rule.prepare(loaded, cfg, dev)
        tr = Translator(loaded.model, loaded.tokenizer, cfg, dev)
        seconds: list[float] = []
        cpu_start = time.process_time()
        if rule is not None:
            start = time.perf_counter()
            built = rule(loaded.tokenizer, dev)
            seconds.append(time.perf_counter() - start)
            tr._bans = Bans(spans=Timed(built, seconds))  # type: ignore[arg-type]
        plan = Plan(protect=rule is not None, recase=False, keep_numbers=False)
        out = [t.text for t in translate_stream(tr, lines, plan)]
        in_ban.append(sum(seconds))
        cpu.append(time.process_time() - cpu_start)
        return out

    return run


class Recorder:
    """A span rule that keeps every call it answers: the steps of one protected run."""

    def __init__(self, rule: SpanRule) -> None:
        self.rule, self.calls = rule, []

    def rows_mask(self, history, sent, allowed, parents=None) -> RowMask:
        given = parents.clone() if parents is not None else None
        self.calls.append((history.clone(), sent.clone(), allowed, given))
        return self.rule.rows_mask(history, sent, allowed, parents)


def replay(loaded, checkpoint: Path, lines: list[str], baseline: Path, rounds: int) -> str:
    """The ban alone: the steps of one protected run of `lines` replayed through each rule,
    taking turns, in CPU seconds (no model runs, so the figures hold the ban's own work and
    little of the machine's noise), beside an unprotected run's CPU seconds. A new index is
    what a fresh process pays (its patterns compiled too): this tree's and the `baseline`
    tree's are each replayed in a child process."""
    dev = torch.device("cpu")
    tok = loaded.tokenizer
    tr = Translator(loaded.model, tok, loaded.cfg.decode, dev)
    recorder = Recorder(new_index_rule(tok, dev))
    tr._bans = Bans(spans=recorder)  # type: ignore[arg-type]
    list(translate_stream(tr, lines, Plan(protect=True, recase=False, keep_numbers=False)))
    start = time.process_time()
    tr = Translator(loaded.model, tok, loaded.cfg.decode, dev)
    list(translate_stream(tr, lines, Plan(protect=False, recase=False, keep_numbers=False)))
    unprotected = time.process_time() - start
    kept = PieceIndex(piece_texts(tok))  # built in the first round, kept for the others
    secs: dict[str, list[float]] = {
        "this tree, index kept": [], "this tree, new index": [], "baseline, new index": []
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        calls = Path(tmp) / "calls.pkl"
        calls.write_bytes(pickle.dumps(recorder.calls))
        for _ in range(rounds):
            start = time.process_time()
            rule = SpanRule(tok, dev, kept)
            for call in recorder.calls:
                rule.rows_mask(*call)
            secs["this tree, index kept"].append(time.process_time() - start)
            secs["this tree, new index"].append(child_replay(REPO, calls, checkpoint))
            secs["baseline, new index"].append(child_replay(baseline, calls, checkpoint))
    rows = [[k, f"{min(v):.3f}", f"{statistics.median(v):.3f}", f"{min(v) / unprotected:.1%}",
             " ".join(f"{x:.3f}" for x in v)] for k, v in secs.items()]  # fmt: skip
    header = ("rule", "best CPU s", "median CPU s", "best / unprotected run", "rounds")
    return (f"### the ban replayed: {len(recorder.calls)} steps of {len(lines)} lines; "
            f"unprotected run {unprotected:.2f} s CPU\n\n" + markdown_table(header, rows)
            )  # fmt: skip


def fresh(checkpoint: Path, lines: list[str], rounds: int, baseline: Path,
          warm: list[str] | None = None) -> str:  # fmt: skip
    """`mt translate` of `lines` in a fresh process per run, protected and not, and protected by
    the `baseline` tree, taking turns, one thread each: CPU seconds of each child (user +
    system), and whether the protected runs wrote the same output. This tree's protected run
    starts with no span cache (`mt.spans.kept`); with `warm` lines, also from the cache a run on
    them left (the same copy each time, so no run finds what an earlier one learned of
    `lines`)."""
    runs = {"--protect": (REPO, "--protect", "off"), "--no-protect": (REPO, "--no-protect", "off"),
            "--protect, baseline": (baseline, "--protect", "off")}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        out, src = Path(tmp) / "out.txt", Path(tmp) / "src.txt"
        src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        kept = Path(tmp) / "warmed"
        if warm:
            other = Path(tmp) / "warm.txt"
            other.write_text("".join(line + "\n" for line in warm), encoding="utf-8")
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO),
                   "MT_SPAN_CACHE": str(kept)}  # fmt: skip
            cmd = [sys.executable, "-m", "mt", "translate", str(checkpoint.resolve()),
                   "--protect", "-i", str(other), "-o", str(out)]  # fmt: skip
            run_child(cmd, REPO, env)
            runs[f"--protect, span cache from {len(warm)} other lines"] = (
                REPO, "--protect", str(Path(tmp) / "cache"))  # fmt: skip
        secs: dict[str, list[float]] = {k: [] for k in runs}
        outs: dict[str, set[bytes]] = {k: set() for k in runs}
        for _ in range(rounds):
            for k, (tree, flag, cache) in runs.items():
                if cache != "off":  # the warmed copy, as it was
                    shutil.rmtree(cache, ignore_errors=True)
                    shutil.copytree(kept, cache)
                env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tree),
                       "MT_SPAN_CACHE": cache}  # fmt: skip
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                cmd = [sys.executable, "-m", "mt", "translate", str(checkpoint.resolve()), flag,
                       "-i", str(src), "-o", str(out)]  # fmt: skip
                run_child(cmd, tree, env)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                secs[k].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                outs[k].add(out.read_bytes())
    base, base_median = min(secs["--no-protect"]), statistics.median(secs["--no-protect"])
    rows = [[k, f"{min(v):.2f}", f"{statistics.median(v):.2f}", f"{min(v) / base:.3f}x",
             f"{statistics.median(v) / base_median:.3f}x", " ".join(f"{x:.2f}" for x in v)]
            for k, v in secs.items()]  # fmt: skip
    header = ("mt translate", "best CPU s", "median CPU s", "best / best", "median / median",
              "rounds (CPU s)")  # fmt: skip
    protected = set().union(*(v for k, v in outs.items() if k != "--no-protect"))
    return (f"### a fresh `mt translate` per run: {len(lines)} lines, {rounds} rounds\n\n"
            + markdown_table(header, rows)
            + "\n\nevery protected run, this tree's and the baseline's, wrote the same output: "
            + ("yes" if len(protected) == 1 else "no")
            )  # fmt: skip


def workload(name: str, loaded, lines: list[str], rules: dict, rounds: int, sample: bool) -> str:
    in_ban: dict[str, list[float]] = {k: [] for k in rules}
    cpu: dict[str, list[float]] = {k: [] for k in rules}
    runs = {k: runner(loaded, lines, r, sample, in_ban[k], cpu[k]) for k, r in rules.items()}
    outs, secs = alternate(rounds, runs)
    best = {k: min(v) for k, v in secs.items()}
    base, base_cpu = best["no protection"], min(cpu["no protection"])
    rows = [[k, f"{best[k]:.2f}", f"{best[k] / base:.2f}x",
             f"{in_ban[k][secs[k].index(best[k])]:.2f}", " ".join(f"{s:.2f}" for s in secs[k]),
             f"{min(cpu[k]):.2f}", f"{min(cpu[k]) / base_cpu:.2f}x",
             f"{statistics.median(cpu[k]) / statistics.median(cpu['no protection']):.2f}x"]
            for k in runs]  # fmt: skip
    same = outs["this tree"] == outs["this tree, new index"]
    header = ("rule", "best s", "vs unprotected", "in the ban (s)", "rounds (s)", "best CPU s",
              "CPU vs unprotected", "median CPU vs unprotected")  # fmt: skip
    return (f"### {name}: {len(lines)} lines\n\n" + markdown_table(header, rows)
            + f"\n\nprotected outputs identical, index kept or new: {'yes' if same else 'no'}"
            )  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--injected", type=Path, help="a Multi30k checkpoint (de->en)")
    p.add_argument("--strings", type=Path, help="a software-strings checkpoint")
    p.add_argument("--strings-src", type=Path, help="its test sources (test.de)")
    p.add_argument("--strings-warm", type=Path, help="other sources (val.de): an index warmed")
    p.add_argument("--spanful", type=Path, help="a checkpoint that writes spans of its own")
    p.add_argument("--spanful-src", type=Path, help="its source lines (default: its val.src)")
    data = Path(os.environ.get("MT_DATA", "data/multi30k"))
    p.add_argument("--src", type=Path, default=data / "test_2016_flickr.de.gz")
    p.add_argument("--limit", type=int, default=300)
    p.add_argument(
        "--baseline", default="fc6a7e2", help="the commit to compare (--fresh, --replay)"
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--replay", action="store_true", help="the strings workload: the ban alone")
    p.add_argument("--fresh", action="store_true", help="the strings workload: mt translate")
    args = p.parse_args()
    for name in ("injected", "strings", "spanful"):  # the baseline's children run in its tree
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).resolve())
    # Every rule here starts from what it learns in the run, not from a span cache an earlier
    # `mt translate` left (`mt.spans.kept`); `fresh` sets its children's cache itself.
    os.environ["MT_SPAN_CACHE"] = "off"
    rules = {"this tree": SpanRule, "this tree, new index": new_index_rule, "no protection": None}
    print(f"machine: {describe_machine()}; torch threads 1; baseline {args.baseline}\n")
    if args.injected:
        loaded = load_checkpoint(args.injected, 1)
        rng = random.Random(1)
        src = read_lines(args.src)[: args.limit]
        lines = [inject_text(s, k, rng)[0] for k, s in enumerate(src)]
        print(workload("injected spans, beam", loaded, lines, rules, args.rounds, False), "\n")
    if args.strings:
        loaded = load_checkpoint(args.strings, 1)
        lines = read_lines(args.strings_src)[: args.limit]
        both = dict(rules)
        if args.strings_warm:
            both["this tree, index warmed"] = WarmedIndex(read_lines(args.strings_warm))
        if args.fresh or args.replay:
            with worktree(args.baseline) as tree:
                if args.fresh:
                    warm = read_lines(args.strings_warm) if args.strings_warm else None
                    print(fresh(args.strings, lines, args.rounds, tree, warm), "\n")
                else:
                    print(replay(loaded, args.strings, lines, tree, args.rounds), "\n")
        else:
            print(workload("software strings, beam", loaded, lines, both, args.rounds, False), "\n")
    if args.spanful:
        loaded = load_checkpoint(args.spanful, 1)
        path = args.spanful_src or args.spanful.parent.parent / "val.src"
        lines = read_lines(path)[: args.limit]
        print(workload("spanful model, sampling", loaded, lines, rules, args.rounds, True))
    print(f"\nmachine after: {describe_machine()}")


if __name__ == "__main__":
    main()

"""Do two commits of mt give the same outputs, at the same speed? A refactoring's check.

Each commit is checked out into a temporary git worktree and run as a user runs it
(`python -m mt ...` with that worktree first on PYTHONPATH), on the same checkpoint(s) and the
same input file, for every decoding setting: greedy, beam 5, n-best, alignment, target prefixes,
constraints, sampling with a seed, int8, an ensemble, `mt score --json` and `mt eval`. It prints
one row per setting: whether stdout is byte-identical, and the wall time of each commit
(alternating the two commits over `--rounds` rounds, the best kept: the machine is noisy).
With `--bench-train` it also runs scripts/bench/train.py (needs the `[bench]` extra) from each
commit, alternating, and prints mt's training target tokens/s for each.

    python -m scripts.tools.compare_commits BASE NEW --checkpoint A.pt --checkpoint2 B.pt \\
        --src $MT_DATA/test_2016_flickr.de.gz --ref $MT_DATA/test_2016_flickr.en.gz

Exit status 1 when any output differs.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.common import read_lines, worktree

REPO = Path(__file__).resolve().parents[2]


def jsonl_inputs(src: list[str], ref: list[str]) -> tuple[str, str]:
    """Two request files: each source with its reference's first two words as a prefix, and
    with the reference's longest word as a constraint (every third line left plain)."""
    prefixed, constrained = [], []
    for i, (s, r) in enumerate(zip(src, ref)):
        words = r.split()
        plain = i % 3 == 2 or not words
        prefixed.append({"src": s} if plain else {"src": s, "prefix": " ".join(words[:2])})
        longest = max(words, key=len).strip(".,;:!?\"'") if words else ""
        constrained.append(
            {"src": s} if plain or not longest else {"src": s, "constraints": [longest]}
        )

    def dump(rows: list[dict]) -> str:
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)

    return dump(prefixed), dump(constrained)


def settings(a: Path, b: Path | None, files: dict[str, Path]) -> dict[str, list[str]]:
    """Setting name -> `mt` arguments."""
    t = ["translate", str(a), "--device", "cpu", "--input"]
    src, jp, jc = str(files["src"]), str(files["prefix"]), str(files["constraints"])
    out = {
        "greedy": [*t, src, "--greedy"],
        "beam 5": [*t, src, "--beam", "5"],
        "n-best 3": [*t, src, "--beam", "5", "--nbest", "3"],
        "alignment": [*t, src, "--beam", "5", "--alignment"],
        "prefixes": [*t, jp, "--input-format", "jsonl", "--output-format", "jsonl"],
        "constraints": [*t, jc, "--input-format", "jsonl", "--output-format", "jsonl"],
        "sampling": [*t, src, "--sample", "--topp", "0.9", "--seed", "7"],
        "int8": [*t, src, "--int8"],
        "score --json": ["score", str(a), "--src", src, "--tgt", str(files["ref"]), "--json"],
        "eval": ["eval", str(a), "--src", src, "--ref", str(files["ref"]), "--json"],
    }
    if b is not None:
        out["ensemble"] = ["translate", str(a), str(b), "--device", "cpu", "--input", src]
    return out


def run_mt(tree: Path, args: list[str], threads: int) -> tuple[bytes, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mt", *args], capture_output=True, env=env, cwd=tree, timeout=3600
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise SystemExit(f"{tree.name}: mt {' '.join(args[:2])} failed: {err[-1] if err else ''}")
    return proc.stdout, seconds


def bench_train(tree: Path, threads: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # scripts/ became a package run with `python -m`; older commits have the flat script.
    flat = tree / "scripts" / "bench_train.py"
    run = [str(flat)] if flat.is_file() else ["-m", "scripts.bench.train"]
    proc = subprocess.run(
        [sys.executable, *run, "--rounds", "1", "--threads", str(threads)],
        capture_output=True,
        env=env,
        cwd=tree,
        timeout=3600,
        text=True,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            if "mt_tgt_tok_s" in row:  # the first batch set: synthetic, fp32
                return float(row["mt_tgt_tok_s"])
    raise SystemExit(f"{tree.name}: bench_train printed no mt row:\n{proc.stdout}{proc.stderr}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("base")
    p.add_argument("new")
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--checkpoint2", type=Path, help="a second member for the ensemble row")
    p.add_argument("--src", type=Path, required=True)
    p.add_argument("--ref", type=Path, required=True)
    p.add_argument("--limit", type=int, default=0, help="first N lines only (0: all)")
    p.add_argument("--rounds", type=int, default=2, help="alternating timed runs per commit")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", help="comma-separated settings to run")
    p.add_argument("--bench-train", action="store_true", help="also bench_train.py per commit")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="mt-compare-") as tmp:
        root = Path(tmp)
        src, ref = read_lines(args.src), read_lines(args.ref)
        if args.limit:
            src, ref = src[: args.limit], ref[: args.limit]
        files = {"src": root / "src.txt", "ref": root / "ref.txt"}
        files["src"].write_text("\n".join(src) + "\n", encoding="utf-8")
        files["ref"].write_text("\n".join(ref) + "\n", encoding="utf-8")
        prefixed, constrained = jsonl_inputs(src, ref)
        files["prefix"] = root / "prefix.jsonl"
        files["constraints"] = root / "constraints.jsonl"
        files["prefix"].write_text(prefixed, encoding="utf-8")
        files["constraints"].write_text(constrained, encoding="utf-8")

        with contextlib.ExitStack() as stack:
            trees = {
                label: stack.enter_context(worktree(commit))
                for label, commit in (("base", args.base), ("new", args.new))
            }
            table = settings(args.checkpoint.resolve(), args.checkpoint2, files)
            if args.only:
                keep = {s.strip() for s in args.only.split(",")}
                table = {k: v for k, v in table.items() if k in keep}
            print(f"{len(src):,} lines; base {args.base}, new {args.new}; {args.threads} threads")
            print(f"{'setting':<14} {'identical':<10} {'base s':>8} {'new s':>8}  sha256 (new)")
            differ = 0
            for name, mt_args in table.items():
                best = {"base": float("inf"), "new": float("inf")}
                outs = {}
                for _ in range(args.rounds):
                    for label in ("base", "new"):
                        out, seconds = run_mt(trees[label], mt_args, args.threads)
                        outs[label] = out
                        best[label] = min(best[label], seconds)
                same = outs["base"] == outs["new"]
                differ += not same
                digest = hashlib.sha256(outs["new"]).hexdigest()[:12]
                print(
                    f"{name:<14} {'yes' if same else 'NO':<10} {best['base']:8.2f} "
                    f"{best['new']:8.2f}  {digest}",
                    flush=True,
                )
            if args.bench_train:
                speed = {"base": 0.0, "new": 0.0}
                for _ in range(args.rounds):
                    for label in ("base", "new"):
                        speed[label] = max(speed[label], bench_train(trees[label], args.threads))
                print(
                    f"bench_train (mt, tgt tok/s, best of {args.rounds}): base "
                    f"{speed['base']:,.0f}, new {speed['new']:,.0f} "
                    f"(new/base {speed['new'] / speed['base']:.3f})"
                )
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()

"""Sharded translation on one machine: `mt translate` as one process with one thread (the
reference), one process with two threads, and torchrun with two processes of one thread each,
greedy and beam 5; the sharded output must equal the reference byte for byte.

    python -m scripts.bench.shards runs/multi30k_de_en/best.pt --work /tmp/shards \
        [--src $MT_DATA/train.de.gz] [--lines 10000]

Times are wall clock of the whole command (model load and torchrun start included); run it
alone under the machine's timed-run lock (`flock LOCK python -m scripts.bench.shards ...`); the
load average is printed before and after. Prints one JSON object per search. That the sharded
output equals one process is also a test (tests/cli/test_shards.py), on a few lines.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from scripts.common import REPO
from tests.support.processes import ELASTIC_ENV, free_port, torchrun

DATA = os.environ.get("MT_DATA") or str(REPO.parent / "shared" / "data" / "multi30k")


def timed(cmd: list[str], threads: int, log: Path) -> float:
    """Seconds `cmd` took with `threads` OMP threads, its output appended to `log`."""
    env = {**os.environ, **ELASTIC_ENV, "OMP_NUM_THREADS": str(threads)}
    tick = time.perf_counter()
    with log.open("ab") as out:
        subprocess.run(cmd, check=True, env=env, stdout=out, stderr=out, timeout=1800)
    return time.perf_counter() - tick


def shards(work: Path, ckpt: Path, src_gz: Path, n: int) -> list[dict]:
    """The greedy and beam-5 rows: sentences/s of each layout and whether each output equals
    the reference."""
    src = work / "input.de"
    src.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(src_gz, "rt", encoding="utf-8") as f:
        src.write_text("".join(next(f) for _ in range(n)), encoding="utf-8")
    log = work / "runs.log"
    out = []
    for name, search, rounds in (("greedy", ["--greedy"], 2), ("beam 5", ["--beam", "5"], 1)):
        base = [str(ckpt), "--input", str(src), "--device", "cpu", "--buffer-lines", "500"]
        base += search
        tag = name.replace(" ", "")
        ref = work / f"ref-{tag}.txt"
        one = [sys.executable, "-m", "mt", "translate", *base, "--output", str(ref)]
        t_ref = timed(one, 1, log)
        times: dict[str, list[float]] = {"1x2": [], "2x1": []}
        identical = {"1x2": True, "2x1": True}
        for r in range(rounds):
            order = ["1x2", "2x1"] if r % 2 == 0 else ["2x1", "1x2"]
            for kind in order:
                target = work / f"{kind}-{tag}-{r}.txt"
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


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__repr__()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--work", type=Path, required=True, help="folder for inputs and outputs")
    ap.add_argument("--src", type=Path, default=Path(DATA) / "train.de.gz")
    ap.add_argument("--lines", type=int, default=10_000)
    args = ap.parse_args()
    print(json.dumps({"load_before_timed": loadavg()}), flush=True)
    rows = shards(args.work, args.checkpoint, args.src, args.lines)
    for row in rows:
        print(json.dumps(row), flush=True)
    print(json.dumps({"load_after": loadavg(), "all_ok": all(r["ok"] for r in rows)}))


if __name__ == "__main__":
    main()

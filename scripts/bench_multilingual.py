"""What the target-language guard costs: one direction of a multilingual checkpoint decoded
with the guard (the default) and without it (`--no-target-vocab`), alternating over rounds in
one process, one thread.

The guard is the whole per-step difference between a multilingual and a bilingual model of
the same size (the language token replaces BOS at no cost): a masked fill of the logits and a
-inf where a piece is not the language's own.

    OMP_NUM_THREADS=1 python scripts/bench_multilingual.py runs/multi30k_multi/best.pt \
        --src $MT_DATA/test_2016_flickr.de.gz --to en --lines 300 --rounds 3
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from common import alternate, describe_machine, markdown_table

from mt.data.corpus import read_lines
from mt.decode.session import DecodeOptions, Session


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint")
    p.add_argument("--src", required=True)
    p.add_argument("--to", required=True)
    p.add_argument("--lines", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--beam", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    lines = read_lines(Path(args.src))[: args.lines]
    session = Session([args.checkpoint], "cpu")
    options = DecodeOptions(beam=args.beam)
    runs = {}
    for name, guard in (("guard", True), ("no guard", False)):
        tr = session.translator(options, targets=session.targets(args.to, None, guard))
        runs[name] = lambda tr=tr: [t.text for t in tr.translate_lines(lines)]
    outputs, seconds = alternate(args.rounds, runs)
    same = sum(a == b for a, b in zip(outputs["guard"], outputs["no guard"]))
    best = {k: min(v) for k, v in seconds.items()}
    rows = [
        [k, f"{best[k]:.2f}", " / ".join(f"{s:.2f}" for s in seconds[k]),
         f"{best[k] / best['no guard']:.3f}x"]
        for k in runs
    ]  # fmt: skip
    print(f"{describe_machine()}; load average {os.getloadavg()[0]:.2f} at the end")
    print(f"{len(lines)} lines, beam {args.beam}, into {args.to}, 1 thread, best of {args.rounds}")
    print(markdown_table(["decode", "best s", "rounds", "vs no guard"], rows))
    print(f"identical outputs: {same} of {len(lines)}")


if __name__ == "__main__":
    main()

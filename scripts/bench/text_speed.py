"""What sentence splitting and the doubt flags cost on normal lines (issue 42's speed target).

The first N sentences of test_2016_flickr de-en through the translator, plain and with
`--split-sentences`, alternating over many rounds (a shared machine: a burst of load falls on
both alike); each round's ratio split/plain is reported, with their median, beside the flags
of all lines timed alone (they run on every translation, so no plain run is without them) and
the splitting step's own work timed alone (cutting the lines into sentences and joining their
translations back), which is what splitting adds when every line is one sentence.

    OMP_NUM_THREADS=1 python -m scripts.bench.text_speed CHECKPOINT [--lines 150] [--rounds 12]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

from scripts import common


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--data", type=Path, default=common.multi30k_dir())
    parser.add_argument("--lines", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    from mt.translation.doubt import flags
    from mt.translation.requests import Plan, Request
    from mt.translation.sentences import expand, gather, source_size
    from mt.translation.session import Session
    from mt.translation.translator import translate_stream

    src = [x.strip() for x in common.read_lines(args.data / "test_2016_flickr.de.gz")]
    src = src[: args.lines]
    translator = Session([args.checkpoint], "cpu").translator()

    def run(split: bool) -> list:
        plan = dataclasses.replace(Plan(keep_numbers=False), split="de" if split else None)
        return list(translate_stream(translator, [Request(x, plan=plan) for x in src]))

    run(False)  # warm-up: the first call loads the segmenter's rules and fills caches
    run(True)
    outputs, seconds = common.alternate(
        args.rounds, {"plain": lambda: run(False), "split": lambda: run(True)}
    )
    ratios = [s / p for s, p in zip(seconds["split"], seconds["plain"])]
    texts = [t.text for t in outputs["plain"]]
    bounds = translator.length_bounds(Request(""))
    best_flags = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for s, t in zip(src, texts):
            flags(s, t, bounds)
        best_flags = min(best_flags, time.perf_counter() - start)
    size, limit = source_size(translator.tokenizer, translator.max_src)
    split_requests = [
        Request(x, plan=dataclasses.replace(Plan(keep_numbers=False), split="de")) for x in src
    ]
    best_split = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        splits, _flat = expand(split_requests, size, limit)
        gather(split_requests, splits, outputs["split"], translator.length_bounds)
        best_split = min(best_split, time.perf_counter() - start)
    plain = statistics.median(seconds["plain"])
    report = (
        f"Model: {args.checkpoint} (beam {translator.cfg.beam}), {len(src)} lines, "
        f"{args.rounds} rounds alternating.\n\n"
        f"- plain: median {plain:.2f} s (min {min(seconds['plain']):.2f}, max "
        f"{max(seconds['plain']):.2f}); split: median {statistics.median(seconds['split']):.2f} s"
        f" (min {min(seconds['split']):.2f}, max {max(seconds['split']):.2f})\n"
        f"- split / plain per round: median {statistics.median(ratios):.3f}, "
        f"range {min(ratios):.3f}-{max(ratios):.3f}\n"
        f"- the flags of all lines, alone (best of 5): {1000 * best_flags:.1f} ms, "
        f"{100 * best_flags / plain:.2f}% of plain's median\n"
        f"- the splitting step alone (cut and join, best of 5): {1000 * best_split:.1f} ms, "
        f"{100 * best_split / plain:.2f}% of plain's median\n\n{common.describe_machine()}\n"
    )
    print(report)
    if args.out is not None:
        common.write_text(args.out, report)


if __name__ == "__main__":
    main()

"""What keeping numbers by default costs: test_2016_flickr through the translator with the
number guard on (the default) and off (`--no-keep-numbers`), alternating over rounds.

The guard checks every translation for the source's numbers and translates again, with the
numbers as placeholders, only the lines that lost one. The report gives the per-round ratio
guard/plain (median and range), how many lines hold digits, how many lost a number without the
guard (and so were searched again), and the share of lines with digits whose numbers all came
through, with and without the guard.

    OMP_NUM_THREADS=1 python -m scripts.bench.numbers_cost CHECKPOINT [--lines 1000] [--rounds 6]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from scripts import common


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--data", type=Path, default=common.multi30k_dir())
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    from mt.translation.number_guard import NUMBER, kept_rate, missing
    from mt.translation.requests import Plan, Request
    from mt.translation.session import Session
    from mt.translation.translator import translate_stream

    src = [x.strip() for x in common.read_lines(args.data / "test_2016_flickr.de.gz")]
    src = src[: args.lines]
    translator = Session([args.checkpoint], "cpu").translator()

    def run(guard: bool) -> list[str]:
        plan = Plan(keep_numbers=guard)
        return [t.text for t in translate_stream(translator, [Request(x, plan=plan) for x in src])]

    run(False)  # warm-up: caches and oneDNN's kernels for the shapes met
    outputs, seconds = common.alternate(
        args.rounds, {"plain": lambda: run(False), "guard": lambda: run(True)}
    )
    ratios = [g / p for g, p in zip(seconds["guard"], seconds["plain"])]
    with_digits = sum(bool(NUMBER.search(x)) for x in src)
    lost = sum(bool(missing(s, t)) for s, t in zip(src, outputs["plain"]))
    changed = sum(a != b for a, b in zip(outputs["plain"], outputs["guard"]))
    report = (
        f"Model: {args.checkpoint} (beam {translator.cfg.beam}, {translator.precision.name}), "
        f"{len(src)} lines, {args.rounds} rounds alternating.\n\n"
        f"- plain: median {statistics.median(seconds['plain']):.2f} s; guard: median "
        f"{statistics.median(seconds['guard']):.2f} s\n"
        f"- guard / plain per round: median {statistics.median(ratios):.3f}, "
        f"range {min(ratios):.3f}-{max(ratios):.3f}\n"
        f"- lines with digits: {with_digits}; of them lost a number without the guard (searched "
        f"again): {lost}; lines the guard changed: {changed}\n"
        f"- numbers kept: {kept_rate(src, outputs['plain'])['kept']}% without the guard, "
        f"{kept_rate(src, outputs['guard'])['kept']}% with it\n\n"
        f"{common.describe_machine()}\n"
    )
    print(report)
    if args.out is not None:
        common.write_text(args.out, report)


if __name__ == "__main__":
    main()

"""The doubt flags' length bounds per direction (mt.textstats) against the fixed ones.

For the twelve directions between de, en, fr and cs of Multi30k: the bounds counted on the
training pairs as `mt prepare` counts them, then on the val and test references (a human
translation: flags there are false alarms) the share flagged by any flag, fixed bounds and per
direction, and the share of references cut to half their words that `short` catches.

    python -m scripts.bench.flag_bounds [--data DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from scripts import common

LANGS = ("de", "en", "fr", "cs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=common.multi30k_dir())
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    from mt.textstats import LONG, SHORT, count_stats
    from mt.translation.doubt import flags

    def lines(split: str, lang: str) -> list[str]:
        name = "test_2016_flickr" if split == "test" else split
        return [x.strip() for x in common.read_lines(args.data / f"{name}.{lang}.gz")]

    common.say("counting the training pairs")
    train = {lang: lines("train", lang) for lang in LANGS}
    pairs = list(itertools.permutations(LANGS, 2))
    stats = count_stats((a, b, [(train[a], train[b])]) for a, b in pairs)
    rows = []
    worst = {"fixed": 0.0, "per direction": 0.0}
    for a, b in pairs:
        bounds = stats.bounds(a, b)
        row = [f"{a}-{b}", f"{bounds[0]:.3f} / {bounds[1]:.3f}"]
        cut_rates = []
        for split in ("val", "test"):
            src, ref = lines(split, a), lines(split, b)
            for name, bd in (("fixed", (SHORT, LONG)), ("per direction", bounds)):
                rate = 100 * sum(bool(flags(s, r, bd)) for s, r in zip(src, ref)) / len(src)
                worst[name] = max(worst[name], rate)
                row.append(f"{rate:.2f}")
        src, ref = lines("val", a), lines("val", b)
        half = [" ".join(r.split()[: len(r.split()) // 2]) for r in ref]
        for bd in ((SHORT, LONG), bounds):
            caught = sum("short" in flags(s, h, bd) for s, h in zip(src, half))
            cut_rates.append(f"{100 * caught / len(src):.1f}")
        rows.append(row + cut_rates)
    table = common.markdown_table(
        [
            "direction",
            "bounds (train 0.5% / 99.5%)",
            "val flagged %, fixed",
            "val, per direction",
            "test flagged %, fixed",
            "test, per direction",
            "half-cut val `short` %, fixed",
            "half-cut, per direction",
        ],
        rows,
        "llrrrrrr",
    )
    report = (
        f"{table}\n\nWorst direction: fixed {worst['fixed']:.2f}%, per direction "
        f"{worst['per direction']:.2f}% of references flagged.\n\n{common.describe_machine()}\n"
    )
    print(report)
    if args.out is not None:
        common.write_text(args.out, report)


if __name__ == "__main__":
    main()

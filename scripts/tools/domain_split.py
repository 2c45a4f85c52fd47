"""Cut a topic out of Multi30k: an out-of-domain corpus and in-domain fine-tune/dev/test sets.

Fine-tuning is only worth showing on a domain the base model never saw. This script takes every
training pair whose English side matches a topic pattern (default: animals, 2,711 of the 29,000
de-en pairs) out of the training data, so a base model trained on the rest has never seen the
topic; the held-out pairs are shuffled (fixed seed) into an in-domain test set, an in-domain
dev set and the in-domain fine-tuning set. The validation set loses its topic pairs too, so the
base model's checkpoint choice sees no topic either. Plain text files, one sentence a line:

    OUT/ood_train.{de,en}   training pairs without the topic (the base model's corpus)
    OUT/ood_dev.{de,en}     validation pairs without the topic (the base model's dev set)
    OUT/in_train.{de,en}    the topic's pairs for fine-tuning
    OUT/in_dev.{de,en}      --dev topic pairs (the fine-tuning run's dev set)
    OUT/in_test.{de,en}     --test topic pairs, seen by neither model

    python -m scripts.tools.domain_split --count                 # how many pairs each topic has
    python -m scripts.tools.domain_split --out /tmp/animals      # then data.root=/tmp/animals
    python -m scripts.tools.domain_split --topic dogs --out /tmp/dogs

The folder is the user's (e.g. outside the repository): nothing here is meant to be committed.
"""

from __future__ import annotations

import argparse
import os
import random
import re
from pathlib import Path

from scripts.common import read_lines, write_text

# Whole-word, case-insensitive patterns on the English side. Each has a few thousand pairs in
# Multi30k train (see --count); `animals` includes `dogs`.
TOPICS = {
    "animals": r"dogs?|pupp(y|ies)|cats?|kittens?|horses?|ponys?|ponies|cows?|cattle|bulls?|"
    r"sheep|goats?|birds?|animals?|camels?|elephants?|ducks?|pigeons?|chickens?|pigs?|"
    r"donkeys?|fish|calf",
    "dogs": r"dogs?|pupp(y|ies)",
    "sports": r"soccer|football|basketball|baseball|tennis|hockey|volleyball|rugby|players?|"
    r"teams?|athletes?|ball|racket|goalie|referee|pitcher|batter|jerseys?|game|match|"
    r"race|racing|runners?|marathon|wrestl(ing|ers?)|box(ing|ers?)|skateboard(er|ing)?|"
    r"surf(er|ing|board)|snowboard(er)?|ski(ing|er)?",
    "water": r"water|beach|ocean|lake|river|pool|swim(s|ming|mer)?|waves?|sea|boats?|"
    r"surf(er|ing|board)?|kayak|canoe|fountain|shore|sand",
}


def write_lines(path: Path, lines: list[str]) -> None:
    write_text(path, "".join(line + "\n" for line in lines), "corpus")


def split(src: list[str], tgt: list[str], pattern: re.Pattern[str]) -> tuple[list[int], list[int]]:
    """Indices of the pairs whose target side matches `pattern`, and of the others."""
    inside = [i for i, t in enumerate(tgt) if pattern.search(t)]
    chosen = set(inside)
    return inside, [i for i in range(len(src)) if i not in chosen]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("MT_DATA", "")))
    parser.add_argument("--out", type=Path, help="folder for the text files")
    parser.add_argument("--topic", choices=sorted(TOPICS), default="animals")
    parser.add_argument("--src", default="de")
    parser.add_argument("--tgt", default="en", help="the side the topic pattern is matched on")
    parser.add_argument("--test", type=int, default=500, help="in-domain test pairs")
    parser.add_argument("--dev", type=int, default=200, help="in-domain dev pairs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", action="store_true", help="print each topic's size and exit")
    args = parser.parse_args()

    src = read_lines(args.data / f"train.{args.src}.gz")
    tgt = read_lines(args.data / f"train.{args.tgt}.gz")
    if len(src) != len(tgt):
        raise SystemExit(f"domain_split: {args.data}/train.*.gz differ in line count")
    if args.count:
        for name, text in TOPICS.items():
            inside, _ = split(src, tgt, re.compile(rf"\b({text})\b", re.I))
            print(f"{name}: {len(inside):,} of {len(src):,} training pairs")
        return
    if args.out is None:
        raise SystemExit("domain_split: --out FOLDER is required")
    pattern = re.compile(rf"\b({TOPICS[args.topic]})\b", re.I)
    inside, outside = split(src, tgt, pattern)
    if len(inside) <= args.test + args.dev:
        raise SystemExit(
            f"domain_split: {args.topic} has {len(inside):,} pairs, not more than "
            f"--test {args.test} + --dev {args.dev}"
        )
    random.Random(args.seed).shuffle(inside)
    parts = {
        "in_test": inside[: args.test],
        "in_dev": inside[args.test : args.test + args.dev],
        "in_train": sorted(inside[args.test + args.dev :]),
        "ood_train": outside,
    }
    val_src = read_lines(args.data / f"val.{args.src}.gz")
    val_tgt = read_lines(args.data / f"val.{args.tgt}.gz")
    _, val_outside = split(val_src, val_tgt, pattern)

    args.out.mkdir(parents=True, exist_ok=True)
    for name, idx in parts.items():
        write_lines(args.out / f"{name}.{args.src}", [src[i] for i in idx])
        write_lines(args.out / f"{name}.{args.tgt}", [tgt[i] for i in idx])
        print(f"{args.out}/{name}.{{{args.src},{args.tgt}}}: {len(idx):,} pairs")
    write_lines(args.out / f"ood_dev.{args.src}", [val_src[i] for i in val_outside])
    write_lines(args.out / f"ood_dev.{args.tgt}", [val_tgt[i] for i in val_outside])
    print(f"{args.out}/ood_dev.{{{args.src},{args.tgt}}}: {len(val_outside):,} pairs")


if __name__ == "__main__":
    main()

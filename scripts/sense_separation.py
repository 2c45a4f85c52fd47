"""How far apart two meanings of a word are at each depth, from `mt vectors --json`.

    mt vectors CKPT --word Decke --input docs/seeing/decke.de --json > decke.json
    python scripts/sense_separation.py decke.json --first 3

The first `--first` occurrences are one meaning, the rest the other. For each depth it prints
the mean cosine similarity of pairs within a meaning and across the two, and the separation:
the distance between the two meanings' centroids divided by the mean distance of a vector to its
own meaning's centroid (in the model's d_model space, not the PCA plane). A separation that
grows with depth is the picture's claim in numbers.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json_file", type=Path)
    parser.add_argument("--first", type=int, required=True, help="occurrences of meaning A")
    args = parser.parse_args()
    data = json.loads(args.json_file.read_text(encoding="utf-8"))
    vectors = np.array([o["vectors"] for o in data["occurrences"]])  # (N, depths, D)
    a, b = vectors[: args.first], vectors[args.first :]
    if len(a) < 2 or len(b) < 2:
        raise SystemExit("need at least two occurrences of each meaning")
    print(f"{'depth':<10} {'cos within':>10} {'cos across':>10} {'separation':>10}")
    for d, name in enumerate(data["depths"]):
        within = [cosine(x[d], y[d]) for g in (a, b) for x, y in itertools.combinations(g, 2)]
        across = [cosine(x[d], y[d]) for x in a for y in b]
        ca, cb = a[:, d].mean(0), b[:, d].mean(0)
        spread = np.mean(
            [np.linalg.norm(x[d] - ca) for x in a] + [np.linalg.norm(y[d] - cb) for y in b]
        )
        sep = np.linalg.norm(ca - cb) / spread
        print(f"{name:<10} {np.mean(within):>10.3f} {np.mean(across):>10.3f} {sep:>10.2f}")


if __name__ == "__main__":
    main()

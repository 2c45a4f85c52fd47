"""How far apart two meanings of a word are at each depth, from `mt vectors --json`.

    mt vectors CKPT --word Decke --input docs/studies/seeing-inside/decke.de --json > decke.json
    python -m scripts.studies.sense_separation decke.json --first 3

The first `--first` occurrences are one meaning, the rest the other. For each depth it prints
the mean cosine similarity of pairs within a meaning and across the two, and the separation:
the distance between the two meanings' centroids divided by the mean distance of a vector to its
own meaning's centroid (in the model's d_model space, not the PCA plane). A separation that
grows with depth is the picture's claim in numbers. As a control, `other splits` is the mean
separation over every other split of the same occurrences into groups of those sizes: a split
by meaning should separate more than an arbitrary one.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np

from scripts.common import markdown_table


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def separation(a: np.ndarray, b: np.ndarray) -> float:
    """Distance between the groups' centroids over the mean distance to one's own centroid."""
    ca, cb = a.mean(0), b.mean(0)
    spread = np.mean([np.linalg.norm(x - ca) for x in a] + [np.linalg.norm(y - cb) for y in b])
    return float(np.linalg.norm(ca - cb) / spread) if spread > 0 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json_file", type=Path)
    parser.add_argument("--first", type=int, required=True, help="occurrences of meaning A")
    args = parser.parse_args()
    data = json.loads(args.json_file.read_text(encoding="utf-8"))
    vectors = np.array([o["vectors"] for o in data["occurrences"]])  # (N, depths, D)
    n, k = len(vectors), args.first
    if k < 2 or n - k < 2:
        raise SystemExit("need at least two occurrences of each meaning")
    meaning, rest = tuple(range(k)), tuple(range(k, n))
    others = [c for c in itertools.combinations(range(n), k) if c not in (meaning, rest)]
    header = ("depth", "cos within", "cos across", "separation", "other splits")
    rows = []
    for d, name in enumerate(data["depths"]):
        a, b = vectors[:k, d], vectors[k:, d]
        within = [cosine(x, y) for g in (a, b) for x, y in itertools.combinations(g, 2)]
        across = [cosine(x, y) for x in a for y in b]
        control = [
            separation(vectors[list(c), d], vectors[[i for i in range(n) if i not in c], d])
            for c in others
        ]
        sep, other = separation(a, b), float(np.mean(control))
        rows.append(
            (name, f"{np.mean(within):.3f}", f"{np.mean(across):.3f}", _num(sep), _num(other))
        )
    print(markdown_table(header, rows))


def _num(x: float) -> str:
    """Two decimals; '-' where every vector is the same point (one position, the embedding)."""
    return "-" if np.isnan(x) else f"{x:.2f}"


if __name__ == "__main__":
    main()

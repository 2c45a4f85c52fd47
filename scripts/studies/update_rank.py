"""How low-rank is what fine-tuning changed? The spectrum of each weight matrix's update.

    python -m scripts.studies.update_rank BASE.pt TUNED.pt [--ranks 8,16]

For every weight matrix the two checkpoints share (a whole model each: a plain fine-tune of
BASE), the update D = tuned - base is split by its singular values, and the share of its
energy (the sum of squared singular values, D's squared Frobenius norm) held by the top r
directions is printed per matrix and summarised (the median and the range over the
projections; the tables apart). A rank-r LoRA adapter can express at most that share of a
projection's update, so a low share at the adapter's rank says the adapter cannot follow
plain fine-tuning however it is trained: docs/fine-tuning.md's adapter measurements cite it.
Also printed: each tensor's relative change |D| / |base|, vectors (biases, norms) included.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from mt.checkpoint import load


def shares(update: torch.Tensor, ranks: list[int]) -> list[float]:
    """The share of `update`'s squared Frobenius norm in its top-r singular directions."""
    energy = torch.linalg.svdvals(update.double()) ** 2
    return [float(energy[:r].sum() / energy.sum()) for r in ranks]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base")
    p.add_argument("tuned")
    p.add_argument("--ranks", default="8,16", help="the ranks whose shares are printed")
    args = p.parse_args()
    ranks = [int(r) for r in args.ranks.split(",")]
    base, tuned = load(args.base)["model"], load(args.tuned)["model"]
    head = " | ".join(f"top {r}" for r in ranks)
    print(f"| tensor | shape | relative change | {head} |")
    print("|---|---|---:|" + "---:|" * len(ranks))
    projections: list[list[float]] = []
    seen: set[int] = set()  # a tied table is one tensor under several names: printed once
    for name, before in base.items():
        after = tuned.get(name)
        if after is None or after.shape != before.shape or after.data_ptr() in seen:
            continue
        seen.add(after.data_ptr())
        update = after.float() - before.float()
        rel = float(update.norm() / before.float().norm())
        cells = ""
        if update.dim() == 2 and update.abs().sum() > 0:
            s = shares(update, ranks)
            cells = " | ".join(f"{x:.2f}" for x in s)
            if "embed" not in name and name != "output.weight":
                projections.append(s)
        else:
            cells = " | ".join("" for _ in ranks)
        print(f"| {name} | {tuple(before.shape)} | {rel:.3f} | {cells} |")
    for i, r in enumerate(ranks):
        col = [s[i] for s in projections]
        print(
            f"top {r} directions of the {len(col)} projections' updates: median "
            f"{statistics.median(col):.2f}, {min(col):.2f}-{max(col):.2f}"
        )


if __name__ == "__main__":
    main()

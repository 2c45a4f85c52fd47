"""How low-rank is what fine-tuning changed? The spectrum of each weight matrix's update.

    python -m scripts.studies.update_rank BASE.pt TUNED.pt [--ranks 8,16]
        [--score STRINGS_DIR --out DIR --cut 8,16,32 --sparse 0.05,0.01]

For every weight matrix the two checkpoints share (a whole model each: a plain fine-tune of
BASE), the update D = tuned - base is split by its singular values, and the share of its
energy (the sum of squared singular values, D's squared Frobenius norm) held by the top r
directions is printed per matrix and summarised (the median and the range over the
projections; the tables apart). A rank-r LoRA adapter can express at most that share of a
projection's update. Also printed: each tensor's relative change |D| / |base|, vectors
(biases, norms) included.

A share of the energy is not a share of the gain, and an adapter need not follow plain
fine-tuning's update to gain as much: `--score` measures what rank r of that update is worth.
For each rank of `--cut`, every matrix's update (each output of a fused projection apart, as
the adapter wraps them; the tables too) is cut to its top r singular directions and added to
BASE, the vectors left at the base's as an adapter leaves them; the model is written to
OUT/cut{r}.pt and scored greedily (lowercased BLEU) on STRINGS_DIR/test.{de,en} and Multi30k's
test_2016_flickr ($MT_DATA), beside BASE and TUNED themselves. docs/fine-tuning.md compares it
with a trained adapter of the same rank.

`--sparse 0.05,0.01` scores the other way to keep a few percent of the update: each matrix's
update cut to that share of its entries, the largest in size (a sparse fine-tuning's budget,
e.g. Ansell et al. 2022, which keeps the entries plain fine-tuning moved most), written to
OUT/sparse{share}.pt.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from mt.checkpoint import load, save
from scripts.common import (
    STRINGS_GREEDY,
    eval_json,
    markdown_table,
    multi30k_dir,
    say,
    write_text,
)


def shares(update: torch.Tensor, ranks: list[int]) -> list[float]:
    """The share of `update`'s squared Frobenius norm in its top-r singular directions."""
    energy = torch.linalg.svdvals(update.double()) ** 2
    return [float(energy[:r].sum() / energy.sum()) for r in ranks]


def top(update: torch.Tensor, rank: int) -> torch.Tensor:
    """`update` cut to its top `rank` singular directions (the best rank-r approximation)."""
    u, s, vh = torch.linalg.svd(update.double(), full_matrices=False)
    return (u[:, :rank] * s[:rank]) @ vh[:rank]


def outputs(name: str) -> int:
    """How many projections a weight holds side by side: 3 for self-attention's fused qkv, 2
    for cross-attention's kv (an adapter wraps each apart)."""
    return 3 if ".qkv." in name else 2 if name.endswith(".kv.weight") else 1


def cut(base: dict, tuned: dict, rank: int) -> dict:
    """BASE plus every matrix's update cut to `rank`; vectors stay the base's."""
    out = {}
    for name, before in base.items():
        after = tuned[name]
        if before.dim() != 2:
            out[name] = before.clone()
            continue
        update = after.double() - before.double()
        parts = [top(p, rank) for p in update.chunk(outputs(name))]
        out[name] = (before.double() + torch.cat(parts)).to(before.dtype)
    return out


def sparse_cut(base: dict, tuned: dict, share: float) -> dict:
    """BASE plus, in every matrix, the `share` of its update's entries largest in size (at
    least one; ties at the threshold kept); vectors stay the base's."""
    out = {}
    for name, before in base.items():
        if before.dim() != 2:
            out[name] = before.clone()
            continue
        update = tuned[name].double() - before.double()
        keep = max(1, int(share * update.numel()))
        threshold = update.abs().flatten().kthvalue(update.numel() - keep + 1).values
        out[name] = (before.double() + update * (update.abs() >= threshold)).to(before.dtype)
    return out


def score(args: argparse.Namespace) -> None:
    """Each cut of `--cut` and `--sparse` scored beside BASE and TUNED; a table on stdout."""
    args.out.mkdir(parents=True, exist_ok=True)
    base, tuned = load(args.base), load(args.tuned)
    models = [("the base", Path(args.base)), ("plain fine-tuning", Path(args.tuned))]
    for rank in (int(r) for r in args.cut.split(",") if r):
        path = args.out / f"cut{rank}.pt"
        if not path.is_file():
            save({**tuned, "model": cut(base["model"], tuned["model"], rank)}, path)
        models.append((f"its update cut to rank {rank}", path))
    for share in (float(x) for x in args.sparse.split(",") if x):
        path = args.out / f"sparse{share:g}.pt"
        if not path.is_file():
            save({**tuned, "model": sparse_cut(base["model"], tuned["model"], share)}, path)
        models.append((f"its largest {share:.1%} of each matrix's update", path))
    general = multi30k_dir()
    sets = {
        "strings": (args.score / "test.de", args.score / "test.en"),
        "multi30k": (general / "test_2016_flickr.de.gz", general / "test_2016_flickr.en.gz"),
    }
    results = []
    for i, (label, path) in enumerate(models):
        got = {}
        for key, (src, ref) in sets.items():
            raw = eval_json(path, src, ref, STRINGS_GREEDY, args.out / f"eval{i}_{key}.log")
            got[key] = round(raw["bleu_lc"], 2)
        say(f"{label}: {got}")
        results.append((label, got))
    write_text(args.out / "scores.json", json.dumps(results, indent=1) + "\n")
    start, end = results[0][1]["strings"], results[1][1]["strings"]
    rows = [
        [label, f"{g['strings']:.2f}", f"{g['strings'] - start:+.2f}",
         f"{(g['strings'] - start) / (end - start):.0%}" if end != start else "",
         f"{g['multi30k']:.2f}"]
        for label, g in results
    ]  # fmt: skip
    header = ["model", "strings BLEU", "gain", "of plain's gain", "Multi30k BLEU"]
    print(markdown_table(header, rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base")
    p.add_argument("tuned")
    p.add_argument("--ranks", default="8,16", help="the ranks whose shares are printed")
    p.add_argument("--score", type=Path, help="a strings folder: score the cuts of --cut on it")
    p.add_argument("--out", type=Path, default=Path("update_rank"), help="where cuts go")
    p.add_argument("--cut", default="8,16,32", help="the ranks --score cuts the update to")
    p.add_argument("--sparse", default="", help="shares of entries --score keeps, e.g. 0.05")
    args = p.parse_args()
    if args.score:
        score(args)
        return
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

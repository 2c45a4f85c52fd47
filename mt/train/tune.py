"""Decode settings chosen on the dev set at the end of a run (`train.tune_beam`,
`train.tune_alpha`), stored in `best.pt`.

The beam size and length penalty that score best depend on the model (a model trained longer
often wants a different length penalty), so they are chosen on the dev set for the weights in
`best.pt` and written into its `decode` section. `mt translate`, `mt eval` and `mt serve` read a
checkpoint's decode settings, so the chosen ones are used unless a flag (`--beam`, `--alpha`)
overrides them. The grid and its scores are kept in the checkpoint (`tuned_decode`) and logged
to `metrics.jsonl`. With `train.tune_within` the fastest setting near the best is stored
instead: a distilled student's greedy search is a few tenths below its beam search and several
times as fast, which is what a student is for.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from mt import checkpoint
from mt.adapt.lora import load_weights
from mt.config import DecodeConfig, TrainConfig
from mt.train.evaluation import Evaluator
from mt.translation.session import DecodeOptions


def grid(t: TrainConfig, d: DecodeConfig) -> list[tuple[int, float]]:
    """(beam, alpha) pairs to try: each beam of `train.tune_beam` with each length penalty of
    `train.tune_alpha`, an empty list standing for the decode section's value."""
    return [(b, a) for b in t.tune_beam or [d.beam] for a in t.tune_alpha or [d.alpha]]


def choose(tried: list[dict[str, Any]], within: float) -> dict[str, Any]:
    """The pair to store: among those whose dev BLEU is within `within` points of the best, the
    smallest beam (the fastest search), then its best BLEU, then the first alpha given. With
    `within` 0 that is the best pair, ties going to the smaller beam."""
    top = max(r["dev_bleu"] for r in tried)
    near = [r for r in tried if r["dev_bleu"] >= top - within]
    return max(near, key=lambda r: (-r["beam"], r["dev_bleu"]))


def tune_decode(
    t: TrainConfig, d: DecodeConfig, best: Path, evaluate: Evaluator, step: int
) -> dict[str, Any]:
    """Score each (beam, alpha) of the grid on the dev set with `best`'s weights, store the pair
    `choose` picks in its decode section and return the record for the metrics log. The
    evaluator's model holds `best`'s weights after."""
    data = checkpoint.load(best)
    with torch.no_grad():
        load_weights(evaluate.model, data["model"])
    tried = []
    for beam, alpha in grid(t, d):
        options = DecodeOptions(beam=beam, alpha=alpha, nbest=1, greedy=False, sample=False)
        tried.append({"beam": beam, "alpha": alpha, "dev_bleu": round(evaluate.bleu(options), 4)})
    chosen = choose(tried, t.tune_within)
    stored = data["config"]["decode"]  # beam search with the pair, whatever the config said
    nbest = min(stored["nbest"], chosen["beam"])
    stored.update(beam=chosen["beam"], alpha=chosen["alpha"], nbest=nbest, greedy=False)
    stored["sample"] = False
    data["tuned_decode"] = tried
    checkpoint.save(data, best)
    top = max(r["dev_bleu"] for r in tried)
    rule = ""
    if chosen["dev_bleu"] < top:  # train.tune_within traded BLEU for a smaller beam
        rule = f", the smallest beam within {t.tune_within:g} of the best, {top:.2f}"
    tqdm.write(
        f"decode settings chosen on dev for {best}: beam {chosen['beam']}, alpha "
        f"{chosen['alpha']} (dev BLEU {chosen['dev_bleu']:.2f}{rule}; {len(tried)} tried)",
        file=sys.stderr,
    )
    return {
        "step": step,
        "tuned_beam": chosen["beam"],
        "tuned_alpha": chosen["alpha"],
        "tuned_dev_bleu": chosen["dev_bleu"],
        "tuned_grid": tried,
        "tuned_within": t.tune_within,
    }

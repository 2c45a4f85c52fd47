"""What one direction of a multilingual checkpoint costs: decoded with the target-language guard
(the default) and without it (`--no-target-vocab`), and, with `--bilingual CKPT`, beside a
bilingual checkpoint of the same size; alternating over rounds in one process, one thread.

The guard is the whole per-step difference between a multilingual and a bilingual model of
the same size (the language token replaces BOS at no cost): a masked fill of the logits and a
-inf where a piece is not the language's own. The issue's target: one direction of a
multilingual checkpoint decodes within 5% of the speed of a bilingual checkpoint of the same
size (same d_model, layers, heads, d_ff and vocabulary size; refused otherwise). The two
models write different outputs, so output tokens per second is printed beside the seconds.

    OMP_NUM_THREADS=1 python -m scripts.bench.multilingual runs/multi30k_multi/best.pt \
        --src $MT_DATA/test_2016_flickr.de.gz --to en --lines 300 --rounds 3 \
        [--bilingual runs/multi30k_de_en/best.pt]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

from mt.data.corpus import read_lines
from mt.translation.requests import Plan, Request
from mt.translation.session import DecodeOptions, Session
from scripts.common import alternate, describe_machine, markdown_table

PLAN = Plan(recase=False, keep_numbers=False)  # search and protection, as before the plans

SIZE = ("d_model", "n_heads", "d_ff", "encoder_layers", "decoder_layers", "norm")


def size_difference(multi: Session, bi: Session) -> str | None:
    """Why two models cannot be compared (a comparison of two shapes would time the shape),
    or None."""
    a, b = multi.loaded[0], bi.loaded[0]
    if a.tokenizer.languages is None:
        return "the checkpoint is bilingual; name a multilingual one"
    if b.tokenizer.languages is not None:
        return "--bilingual names a multilingual checkpoint"
    for key in SIZE:
        x, y = getattr(a.cfg.model, key), getattr(b.cfg.model, key)
        if x != y:
            return f"--bilingual: model.{key} is {y}, the multilingual model's {x}"
    for side in ("src_vocab_size", "tgt_vocab_size"):
        x, y = getattr(a.tokenizer, side), getattr(b.tokenizer, side)
        if x != y:
            return f"--bilingual: {side} is {y}, the multilingual model's {x}"
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint")
    p.add_argument("--src", required=True)
    p.add_argument("--to", required=True)
    p.add_argument("--bilingual", help="a bilingual checkpoint of the same size, timed beside")
    p.add_argument("--lines", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--beam", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    lines = read_lines(Path(args.src))[: args.lines]
    session = Session([args.checkpoint], "cpu")
    options = DecodeOptions(beam=args.beam)
    translators = {
        name: session.translator(options, targets=session.targets(args.to, None, guard))
        for name, guard in (("guard", True), ("no guard", False))
    }
    if args.bilingual:
        bi = Session([args.bilingual], "cpu")
        if (why := size_difference(session, bi)) is not None:
            p.error(why)
        translators["bilingual"] = bi.translator(options)
    base = "bilingual" if args.bilingual else "no guard"
    runs = {
        k: (lambda tr=tr: tr.translate([Request(x, plan=PLAN) for x in lines]))
        for k, tr in translators.items()
    }
    outputs, seconds = alternate(args.rounds, runs)
    best = {k: min(v) for k, v in seconds.items()}
    tokens = {k: sum(len(t.hypotheses[0].tokens) for t in out if t.hypotheses) or 1
              for k, out in outputs.items()}  # fmt: skip
    per_token = {k: best[k] / tokens[k] for k in runs}  # seconds per output token
    rows = [
        [k, f"{best[k]:.2f}", " / ".join(f"{s:.2f}" for s in seconds[k]),
         f"{best[k] / best[base]:.3f}x", f"{tokens[k] / best[k]:.0f}",
         f"{per_token[k] / per_token[base]:.3f}x"]
        for k in runs
    ]  # fmt: skip
    same = sum(a.text == b.text for a, b in zip(outputs["guard"], outputs["no guard"]))
    print(f"{describe_machine()}; load average {os.getloadavg()[0]:.2f} at the end")
    print(f"{len(lines)} lines, beam {args.beam}, into {args.to}, 1 thread, best of {args.rounds}")
    print(
        markdown_table(
            ["decode", "best s", "rounds", f"s vs {base}", "out tok/s", f"s/tok vs {base}"], rows
        )
    )
    print(f"guard and no guard: identical outputs on {same} of {len(lines)} lines")


if __name__ == "__main__":
    main()

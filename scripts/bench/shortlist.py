"""The lexical shortlist (`mt shortlist`, `--shortlist K`): decoding speed with and without it on
an OPUS-MT-base-shaped import, and the BLEU it costs on a trained Multi30k model.

1. The base-shape Marian folder of `scripts.bench.importing` (6+6 layers, d_model 512, a
   58,101-piece vocabulary, random weights: they write until the length limit, so both
   settings decode about the same tokens and the speeds compare per-token cost), imported,
   its shortlist counted from Multi30k's training pairs in its own pieces, exported to
   CTranslate2 with the shortlist as `vmap.txt`. mt with and without `--shortlist K`, and
   CTranslate2 with and without `use_vmap`, decode test_2016_flickr lines greedily and with
   beam 4, taking turns over rounds, one thread each.
2. With `--trained CKPT` (a model trained on Multi30k de-en, e.g. `mt train configs/demo.yaml`),
   its shortlist from the same training pairs; test_2016_flickr decoded with its own beam,
   with and without the shortlist at each K of `--ks`: BLEU, and the speed of each in turns.

    pip install -e '.[bench]'
    OMP_NUM_THREADS=1 python -m scripts.bench.shortlist --data $MT_DATA --lines 100 \\
        --rounds 3 --trained runs/demo/best.pt
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from scripts.bench.importing import MAX_LENGTH
from scripts.bench.importing import build as build_marian
from scripts.common import alternate, machine, print_report, read_lines, say

PLAN_ARGS = dict(protect=False, recase=False, keep_numbers=False)  # the search alone


def mt(*args: object) -> None:
    """`python -m mt ARGS` in a child process; its failure ends the benchmark."""
    result = subprocess.run(
        [sys.executable, "-m", "mt", *map(str, args)], capture_output=True, text=True
    )
    if result.returncode:
        raise SystemExit(f"mt {args[0]} failed: {result.stderr.strip()}")


def with_shortlist(checkpoint: Path, data: Path, out: Path, k: int, frequent: int) -> Path:
    """`checkpoint` with a shortlist of Multi30k's de-en training pairs."""
    src, tgt = data / "train.de.gz", data / "train.en.gz"
    mt("shortlist", checkpoint, "--source", src, "--target", tgt, "-o", out, "--k", k,
       "--frequent", frequent)  # fmt: skip
    return out


def mt_runs(checkpoint: Path, lines: list[str], beam: int, ks: list[int]) -> dict:
    """A decode of `lines` for each setting (without the shortlist, and with each K) as a
    callable returning its translations."""
    from mt.translation.requests import Plan, Request
    from mt.translation.session import DecodeOptions, Session

    plan = Plan(**PLAN_ARGS)
    session = Session([checkpoint], "cpu")
    runs = {}
    for k in [0, *ks]:
        options = DecodeOptions(greedy=beam == 1, beam=beam, shortlist=k)
        translator = session.translator(options)

        def run(t=translator) -> list:
            return t.translate([Request(x, plan=plan) for x in lines])

        runs["mt" if k == 0 else f"mt-shortlist{k}"] = run
    return runs


def candidate_sizes(checkpoint: Path, lines: list[str], k: int, max_tokens: int) -> dict:
    """How many output rows a batch computes with the shortlist: the candidates of the
    batches the translator forms (token budget `max_tokens`), mean and range."""
    from mt.batching import token_batches
    from mt.translation.session import Session

    session = Session([checkpoint], "cpu")
    ids = session.tokenizer.encode_src(lines)
    sizes = []
    for batch in token_batches([len(x) for x in ids], max_tokens):
        src = torch.nn.utils.rnn.pad_sequence([torch.tensor(ids[i]) for i in batch], True)
        sizes.append(len(session.shortlist.candidates(src, k)))
    return {
        "batches": len(sizes),
        "mean": round(sum(sizes) / len(sizes)),
        "min": min(sizes),
        "max": max(sizes),
        "vocabulary": session.tokenizer.tgt_vocab_size,
    }


def written(out: list) -> int:
    """Target tokens of the best hypotheses: mt's `Translation`s or CTranslate2's results."""
    best = [t.hypotheses[0] for t in out]
    return sum(len(h.tokens) if hasattr(h, "tokens") else len(h) for h in best)


def timings(seconds: dict[str, list[float]], n: int) -> dict:
    return {
        name: {
            "best_s": round(min(s), 2),
            "sentences_per_s": round(n / min(s), 2),
            "rounds": [round(x, 2) for x in s],
        }
        for name, s in seconds.items()
    }


def output_layer_costs(candidates: int, rounds: int, vocab: int = 58_101) -> dict:
    """Milliseconds of one step's output layer on (rows x 512) decoder states, three ways:
    the full layer; the candidates' rows scattered back into a full-width row of -inf (what a
    search that knows nothing of shortlists would then read); the candidates alone (mt's way).
    Each: the product, the log-softmax and the top 8, best of `rounds` x 5 calls."""
    import time

    from mt.search.steps import log_softmax_, row_topk

    torch.manual_seed(0)
    weight = torch.randn(vocab, 512) / 512**0.5
    ids = torch.randperm(vocab)[:candidates].sort().values
    narrow = weight[ids].contiguous()
    out: dict = {}
    for rows in (8, 32, 128):
        h = torch.randn(rows, 512)

        def full(h: torch.Tensor = h) -> None:
            row_topk(log_softmax_(torch.nn.functional.linear(h, weight)), 8)

        def scattered(h: torch.Tensor = h) -> None:
            wide = torch.full((len(h), vocab), float("-inf"))
            wide.index_copy_(1, ids, torch.nn.functional.linear(h, narrow))
            row_topk(log_softmax_(wide), 8)

        def cands(h: torch.Tensor = h) -> None:
            row_topk(log_softmax_(torch.nn.functional.linear(h, narrow)), 8)

        for name, fn in (("full", full), ("scattered", scattered), ("candidates", cands)):
            best = float("inf")
            for _ in range(rounds * 5):
                start = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - start)
            out.setdefault(f"rows{rows}", {})[name] = round(best * 1000, 2)
    return out


def imported_speed(args: argparse.Namespace, tmp: Path) -> dict:
    import ctranslate2
    import sentencepiece as spm

    folder, plain = tmp / "opus-base", tmp / "opus-base.pt"
    say("building the base-shape Marian folder and importing it")
    build_marian(folder, args.data)
    mt("import", folder, "-o", plain)
    say("counting its shortlist")
    short = with_shortlist(plain, args.data, tmp / "opus-short.pt", args.k, args.frequent)
    ct2_dir = tmp / "opus-ct2"
    mt("export", short, ct2_dir, "--to", "ctranslate2")
    lines = read_lines(args.data / "test_2016_flickr.de.gz")[: args.lines]
    report: dict = {"candidates": candidate_sizes(short, lines, args.k, 4096)}
    say(f"candidates per batch: {report['candidates']}")
    report["output_layer_ms"] = output_layer_costs(report["candidates"]["mean"], args.rounds)
    say(f"output layer, ms: {report['output_layer_ms']}")
    sp = spm.SentencePieceProcessor(model_file=str(folder / "source.spm"))
    pieces = [sp.encode(x, out_type=str) for x in lines]
    ct2 = ctranslate2.Translator(str(ct2_dir), device="cpu", intra_threads=1)
    for beam in args.beams:
        runs = mt_runs(short, lines, beam, [args.k])
        for vmap in (False, True):

            def run_ct2(v=vmap, b=beam) -> list:
                return ct2.translate_batch(
                    pieces, beam_size=b, max_batch_size=32, use_vmap=v,
                    max_decoding_length=MAX_LENGTH - 1,
                )  # fmt: skip

            runs["ct2-vmap" if vmap else "ct2"] = run_ct2
        outputs, seconds = alternate(args.rounds, runs)
        tokens = {name: written(out) for name, out in outputs.items()}
        report[f"beam{beam}"] = {"timings": timings(seconds, len(lines)), "tokens": tokens}
        say(f"beam {beam}: {report[f'beam{beam}']}")
    return report


def trained_quality(args: argparse.Namespace, tmp: Path) -> dict:
    from mt.checkpoint import load
    from mt.metrics import bleu

    cfg = load(args.trained)["config"]["decode"]
    beam = cfg["beam"]
    say(f"counting the trained model's shortlist (beam {beam})")
    short = with_shortlist(args.trained, args.data, tmp / "trained-short.pt", max(args.ks), 100)
    lines = read_lines(args.data / "test_2016_flickr.de.gz")[: args.test_lines]
    refs = read_lines(args.data / "test_2016_flickr.en.gz")[: args.test_lines]
    report: dict = {"beam": beam, "lines": len(lines)}
    report["candidates"] = {k: candidate_sizes(short, lines, k, cfg["max_tokens"]) for k in args.ks}
    runs = mt_runs(short, lines, beam, args.ks)
    outputs, seconds = alternate(args.trained_rounds, runs)
    scores = {name: round(bleu([t.text for t in out], refs), 2) for name, out in outputs.items()}
    same = {
        name: sum(a.text == b.text for a, b in zip(outputs["mt"], out))
        for name, out in outputs.items()
    }
    report.update(bleu=scores, same_as_free=same, timings=timings(seconds, len(lines)))
    say(f"trained: {report}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("MT_DATA", "")))
    parser.add_argument("--lines", type=int, default=100, help="lines the import decodes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--k", type=int, default=50, help="the import's --shortlist K")
    parser.add_argument("--frequent", type=int, default=100)
    parser.add_argument("--trained", type=Path, default=None, help="a Multi30k de-en model")
    parser.add_argument("--ks", type=int, nargs="+", default=[10, 50])
    parser.add_argument("--test-lines", type=int, default=1000)
    parser.add_argument("--trained-rounds", type=int, default=2)
    parser.add_argument("--skip-import", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    report: dict = {"machine": machine()}
    with tempfile.TemporaryDirectory() as tmp:
        if args.trained is not None:
            report["trained"] = trained_quality(args, Path(tmp))
        if not args.skip_import:
            report["import"] = imported_speed(args, Path(tmp))
    print_report(report, args.json)


if __name__ == "__main__":
    main()

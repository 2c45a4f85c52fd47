"""Decoding speed of `mt` against HF `generate` and CTranslate2 running the same weights.

The mt checkpoint is exported twice with `mt.export` (what `mt export` runs): to a
`MarianMTModel` (same architecture; the model
dimensions are permuted so that mt's interleaved sin/cos positions land where Marian puts its
concatenated ones, which leaves the function unchanged), and to a CTranslate2 Transformer
through CTranslate2's spec API (a converter of our own: mt's weights map onto its spec
directly). Each engine then translates the same sentences (default: the 1,000 of Multi30k
test_2016_flickr) greedily and with beam 5, in a fresh process so that its peak memory is its own.
Greedy outputs must agree across the three; the script prints how many do.

Beam search stops differently in the peers: HF (`early_stopping=True`) and mt by default end a
sentence once it has beam-size finished hypotheses; CTranslate2 ends it as soon as its best
candidate ends, which takes fewer steps. `mt-early` is mt with that rule (`--stop-early`), so
`mt / hf` and `mt-early / ct2` each compare the same search.

On a shared machine one run of an engine can be 30% off the next, so the engines take turns:
`--rounds` rounds, each running every engine once, and each engine is reported by its best
round (with its slowest beside it); the ratios printed at the end compare best rounds.

    pip install -e '.[bench]'
    python -m scripts.bench.decode runs/multi30k_de_en/best.pt --src $MT_DATA/test_2016_flickr.de.gz

`--baseline OLD.pt` decodes a second mt checkpoint (e.g. the previous recipe's model) in the
same rounds as `mt-baseline`, so a new model shape's speed is compared with the old one's on
the same machine at the same moment (`mt / mt-baseline`).

On a GPU: `--device cuda --dtype fp16` runs every engine there in that precision (mt through
decode.dtype, HF with its weights cast, CTranslate2 with that compute type); `--engines mt,hf`
leaves out CTranslate2 where its CUDA libraries are missing.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from mt.export import to_ctranslate2, to_marian
from mt.tokenizer import PAD
from scripts.common import load_checkpoint, machine, read_lines

ENGINES = ("mt", "hf", "ct2")
CT2_TYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def run_engine(args: argparse.Namespace) -> dict:
    """Translate in this process with one engine; returns timing, output and peak memory."""
    loaded = load_checkpoint(args.checkpoint, args.threads)
    device = torch.device(args.device)
    tok = loaded.tokenizer
    lines = read_lines(Path(args.src))[: args.limit or None]
    a, b = loaded.cfg.decode.max_len_a, loaded.cfg.decode.max_len_b
    beam = args.beam
    out: list[str] = []
    if args.engine == "mt":
        from mt.translation.requests import Plan, Request
        from mt.translation.session import DecodeOptions, Session

        PLAN = Plan(recase=False, keep_numbers=False)  # noqa: N806 - search and protection, as before the plans

        options = DecodeOptions(
            beam=beam,
            nbest=1,
            max_tokens=args.max_tokens,
            stop_early=args.stop_early,
            int8=args.int8,
            dtype=args.dtype,
        )
        tr = Session([args.checkpoint], args.device).translator(options)
        tr.translate(
            [Request(x, plan=PLAN) for x in lines[:16]]
        )  # warm-up, untimed, as for every engine
        start = time.perf_counter()
        out = [t.text for t in tr.translate([Request(x, plan=PLAN) for x in lines])]
    elif args.engine == "hf":
        hf = to_marian(loaded).to(device)
        if device.type == "cuda" and args.dtype != "fp32":
            hf = hf.to(torch.bfloat16 if args.dtype == "bf16" else torch.float16)
        ids = tok.encode_src(lines)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        res: dict[int, str] = {}
        with torch.inference_mode():  # warm-up, untimed
            warm = torch.tensor([ids[order[0]]], device=device)
            hf.generate(input_ids=warm, num_beams=beam, do_sample=False, max_new_tokens=8)
        start = time.perf_counter()
        with torch.inference_mode():
            for k in range(0, len(order), args.batch):
                rows = order[k : k + args.batch]
                width = max(len(ids[i]) for i in rows)
                src = torch.tensor(
                    [ids[i] + [PAD] * (width - len(ids[i])) for i in rows], device=device
                )
                gen = hf.generate(
                    input_ids=src,
                    attention_mask=src.ne(PAD),
                    num_beams=beam,
                    do_sample=False,
                    max_new_tokens=int(a * width + b) + 1,
                    length_penalty=1.0,
                    early_stopping=True,
                )
                for i, g in zip(rows, gen.tolist()):
                    res[i] = tok.decode_tgt(g)
        out = [res[i] for i in range(len(lines))]
    else:
        import ctranslate2

        model_dir = Path(args.ct2_dir)
        translator = ctranslate2.Translator(
            str(model_dir),
            device=device.type,
            inter_threads=1,
            intra_threads=args.threads,
            compute_type="int8" if args.int8 else CT2_TYPES[args.dtype],
        )
        pieces = [tok.src.encode(x, out_type=str) for x in lines]  # the model adds </s>
        translator.translate_batch(pieces[:16], beam_size=beam)  # warm-up, untimed
        start = time.perf_counter()
        results = translator.translate_batch(
            pieces,
            beam_size=beam,
            max_batch_size=args.max_tokens,
            batch_type="tokens",
            # mt's limit for the batch's longest source (+1 for </s>); EOS is not counted
            max_decoding_length=int(a * (max(len(p) for p in pieces) + 1) + b),
        )
        out = [tok.tgt.decode_pieces(r.hypotheses[0]) for r in results]
    seconds = time.perf_counter() - start
    ntok = sum(len(tok.encode_tgt([x])[0]) for x in out)
    return {
        "engine": args.name
        or args.engine + ("-int8" if args.int8 else "") + ("-early" if args.stop_early else ""),
        "beam": beam,
        "sentences": len(lines),
        "seconds": round(seconds, 2),
        "sent_per_s": round(len(lines) / seconds, 1),
        "tok_per_s": round(ntok / seconds, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "output": out,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint")
    p.add_argument("--src", required=True)
    p.add_argument("--ref")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--batch", type=int, default=64, help="HF sentences per batch")
    p.add_argument("--max-tokens", type=int, default=4096, help="mt / CT2 tokens per batch")
    p.add_argument("--beams", default="1,5")
    p.add_argument("--int8", action="store_true", help="also int8 (mt dynamic, CT2 int8)")
    p.add_argument("--rounds", type=int, default=3, help="turns per engine; the best is kept")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="fp32", choices=list(CT2_TYPES), help="CUDA precision")
    p.add_argument("--engines", default=",".join(ENGINES), help="comma-separated subset")
    p.add_argument("--baseline", help="another mt checkpoint decoded in the same rounds")
    p.add_argument("--name", help=argparse.SUPPRESS)
    p.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    p.add_argument("--beam", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--ct2-dir", help=argparse.SUPPRESS)
    p.add_argument("--stop-early", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.engine:  # child mode: one engine, one JSON line
        print(json.dumps(run_engine(args)))
        return
    from mt.metrics import bleu

    engines = [e for e in ENGINES if e in args.engines.split(",")]
    loaded = load_checkpoint(args.checkpoint, 0)
    refs = read_lines(Path(args.ref))[: args.limit or None] if args.ref else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ct2_dirs = {}
        for q in ([None] + (["int8"] if args.int8 else [])) if "ct2" in engines else []:
            ct2_dirs[q] = Path(tmp) / f"ct2-{q or 'fp32'}"
            to_ctranslate2(loaded, ct2_dirs[q], q)
        broken: set[tuple[str, bool]] = set()  # (engine, int8) whose child failed
        for beam in [int(x) for x in args.beams.split(",")]:
            variants = [(e, False, False) for e in engines]  # (engine, int8, stop early)
            if args.baseline:
                variants.append(("mt-baseline", False, False))
            if beam > 1:
                variants.append(("mt", False, True))
            if args.int8:
                variants += [("mt", True, False)] + [("ct2", True, False)] * ("ct2" in engines)
                if beam > 1:
                    variants.append(("mt", True, True))
            outputs = {}
            runs: dict[str, list[dict]] = {}
            for _ in range(args.rounds):
                for engine, int8, early in variants:
                    if (engine, int8) in broken:
                        continue
                    ct2_dir = ct2_dirs.get("int8" if int8 else None, Path(tmp))
                    try:
                        res = run_child(args, engine, beam, int8, ct2_dir, early)
                    except subprocess.CalledProcessError as err:
                        # A peer that cannot run here (a missing CUDA library, say) is left
                        # out of the rest of the run; the others' numbers still count.
                        broken.add((engine, int8))
                        why = (err.stderr or "").strip().splitlines() or [f"exit {err.returncode}"]
                        print(json.dumps({"engine": engine, "int8": int8, "failed": why[-1]}))
                        continue
                    outputs[res["engine"]] = res.pop("output")
                    runs.setdefault(res["engine"], []).append(res)
                    print(json.dumps(res), flush=True)
            for name, results in runs.items():
                best = max(results, key=lambda r: r["sent_per_s"])
                row = {**best, "slowest_sent_per_s": min(r["sent_per_s"] for r in results)}
                row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in results)
                if refs:
                    row["bleu"] = round(bleu(outputs[name], refs), 2)
                rows.append(row)
            if beam == 1 and "mt" in outputs:
                n = len(outputs["mt"])
                same = {
                    e: f"{sum(x == y for x, y in zip(outputs['mt'], outputs[e]))}/{n}"
                    for e in engines
                    if e != "mt" and e in outputs
                }
                print(json.dumps({"greedy_identical_to_mt": same}))
    info = machine()
    print()
    print(
        f"{'engine':14} {'beam':>4} {'sent/s':>8} {'slowest':>8} {'tok/s':>8} {'peak MB':>8} "
        f"{'BLEU':>6}"
    )
    for r in rows:
        print(
            f"{r['engine']:14} {r['beam']:4d} {r['sent_per_s']:8.1f} "
            f"{r['slowest_sent_per_s']:8.1f} {r['tok_per_s']:8.1f} {r['peak_rss_mb']:8.0f} "
            f"{r.get('bleu', float('nan')):6.2f}"
        )
    speed = {(r["engine"], r["beam"]): r["sent_per_s"] for r in rows}
    print()
    pairs = [("mt", "hf"), ("mt", "ct2"), ("mt-early", "ct2"), ("mt", "mt-baseline")]
    for ours, peer in pairs + [("mt-int8", "ct2-int8"), ("mt-int8-early", "ct2-int8")]:
        for beam in sorted({r["beam"] for r in rows}):
            if (ours, beam) in speed and (peer, beam) in speed:
                ratio = speed[(ours, beam)] / speed[(peer, beam)]
                print(f"{ours} / {peer}, beam {beam}: {ratio:.2f}x")
    print(
        f"machine: {info['cpu']}, {args.threads} threads, avx512f {info['avx512f']}, "
        f"amx {info['amx_bf16']}; device {args.device} {args.dtype}; best of {args.rounds} rounds"
    )


def run_child(
    args: argparse.Namespace, engine: str, beam: int, int8: bool, ct2: Path, early: bool
) -> dict:
    """One engine in a fresh process (its own peak memory); its JSON result line."""
    checkpoint, name = args.checkpoint, []
    if engine == "mt-baseline":  # mt on the --baseline checkpoint
        checkpoint, engine, name = args.baseline, "mt", ["--name", "mt-baseline"]
    cmd = [
        sys.executable,
        "-m",
        __spec__.name,
        checkpoint,
        "--src",
        args.src,
        "--engine",
        engine,
        *name,
    ]
    cmd += ["--beam", str(beam), "--threads", str(args.threads), "--limit", str(args.limit)]
    cmd += ["--batch", str(args.batch), "--max-tokens", str(args.max_tokens), "--ct2-dir", str(ct2)]
    cmd += ["--device", args.device, "--dtype", args.dtype]
    if int8:
        cmd.append("--int8")
    if early:
        cmd.append("--stop-early")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


if __name__ == "__main__":
    main()

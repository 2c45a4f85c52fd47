"""Decoding speed of `mt` against HF `generate` and CTranslate2 running the same weights.

The mt checkpoint is exported twice: to a `MarianMTModel` (same architecture; the model
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
    python scripts/bench_decode.py runs/multi30k_de_en/best.pt --src $MT_DATA/test_2016_flickr.de.gz
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

from mt.data.corpus import read_lines
from mt.tokenizer import BOS, EOS, PAD, UNK
from mt.train.checkpoint import Loaded, load_model

ENGINES = ("mt", "hf", "ct2")


def permutation(d: int) -> torch.Tensor:
    """Marian dim j <- mt dim P[j]: sines (mt's even dims) first, then cosines (odd dims)."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def to_marian(loaded: Loaded):
    """A MarianMTModel computing the same function as the mt model (post-norm, tied)."""
    from peer_marian import marian_config
    from transformers import MarianMTModel

    m = loaded.cfg.model
    if m.norm != "post" or not m.tie_embeddings:
        raise SystemExit("the Marian export needs a post-norm model with tied embeddings")
    d = m.d_model
    config = marian_config(loaded.cfg, loaded.tokenizer)  # the shape the peer trains with
    hf = MarianMTModel(config).eval()
    P = permutation(d)
    w = loaded.model.state_dict()
    sd = {"model.shared.weight": w["src_embed.weight"][:, P]}

    def lin(prefix: str, weight: torch.Tensor, bias: torch.Tensor, rows=None, cols=None) -> None:
        if cols is not None:
            weight = weight[:, cols]
        if rows is not None:
            weight, bias = weight[rows], bias[rows]
        sd[f"{prefix}.weight"], sd[f"{prefix}.bias"] = weight, bias

    def norm(prefix: str, src: str) -> None:
        sd[f"{prefix}.weight"], sd[f"{prefix}.bias"] = w[f"{src}.weight"][P], w[f"{src}.bias"][P]

    def self_attn(prefix: str, src: str) -> None:
        W, b = w[f"{src}.qkv.weight"], w[f"{src}.qkv.bias"]
        for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
            lin(f"{prefix}.{name}", W[i * d : (i + 1) * d], b[i * d : (i + 1) * d], cols=P)
        lin(f"{prefix}.out_proj", w[f"{src}.out.weight"], w[f"{src}.out.bias"], rows=P)

    def ffn(prefix: str, src: str) -> None:
        lin(f"{prefix}.fc1", w[f"{src}.fc1.weight"], w[f"{src}.fc1.bias"], cols=P)
        lin(f"{prefix}.fc2", w[f"{src}.fc2.weight"], w[f"{src}.fc2.bias"], rows=P)

    for i in range(m.encoder_layers):
        p, s = f"model.encoder.layers.{i}", f"encoder.{i}"
        self_attn(f"{p}.self_attn", f"{s}.attn")
        norm(f"{p}.self_attn_layer_norm", f"{s}.norm1")
        ffn(p, f"{s}.ffn")
        norm(f"{p}.final_layer_norm", f"{s}.norm2")
    for i in range(m.decoder_layers):
        p, s = f"model.decoder.layers.{i}", f"decoder.{i}"
        self_attn(f"{p}.self_attn", f"{s}.self_attn")
        norm(f"{p}.self_attn_layer_norm", f"{s}.norm1")
        c = f"{s}.cross_attn"
        lin(f"{p}.encoder_attn.q_proj", w[f"{c}.q.weight"], w[f"{c}.q.bias"], cols=P)
        kv, kvb = w[f"{c}.kv.weight"], w[f"{c}.kv.bias"]
        lin(f"{p}.encoder_attn.k_proj", kv[:d], kvb[:d], cols=P)
        lin(f"{p}.encoder_attn.v_proj", kv[d:], kvb[d:], cols=P)
        lin(f"{p}.encoder_attn.out_proj", w[f"{c}.out.weight"], w[f"{c}.out.bias"], rows=P)
        norm(f"{p}.encoder_attn_layer_norm", f"{s}.norm2")
        ffn(p, f"{s}.ffn")
        norm(f"{p}.final_layer_norm", f"{s}.norm3")
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    left = [
        k
        for k in missing
        if "embed_positions" not in k
        and "embed_tokens" not in k
        and k not in ("lm_head.weight", "final_logits_bias")
    ]
    if left or unexpected:
        raise SystemExit(f"Marian export: missing {left}, unexpected {unexpected}")
    hf.tie_weights()
    return hf


def to_ctranslate2(loaded: Loaded, out_dir: Path, quantization: str | None) -> None:
    """Write a CTranslate2 model of the mt checkpoint (our own converter, via the spec API)."""
    import ctranslate2
    from ctranslate2.specs import common_spec, transformer_spec

    m, tok = loaded.cfg.model, loaded.tokenizer
    w = {k: v.float().numpy() for k, v in loaded.model.state_dict().items()}
    w["positions"] = loaded.model.positions.numpy()
    spec = transformer_spec.TransformerSpec.from_config(
        (m.encoder_layers, m.decoder_layers),
        m.n_heads,
        pre_norm=m.norm == "pre",
        activation=common_spec.Activation.RELU,
    )

    def lin(s, prefix: str) -> None:
        s.weight, s.bias = w[f"{prefix}.weight"], w[f"{prefix}.bias"]

    def ln(s, prefix: str) -> None:
        s.gamma, s.beta = w[f"{prefix}.weight"], w[f"{prefix}.bias"]

    for side, emb in ((spec.encoder, "src_embed"), (spec.decoder, "tgt_embed")):
        side.scale_embeddings = True
        side.position_encodings.encodings = w["positions"]
        table = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
        table.weight = w[f"{emb}.weight"]
        if m.norm == "pre":
            ln(side.layer_norm, "encoder_norm" if side is spec.encoder else "decoder_norm")
    for i, ls in enumerate(spec.encoder.layer):
        lin(ls.self_attention.linear[0], f"encoder.{i}.attn.qkv")
        lin(ls.self_attention.linear[1], f"encoder.{i}.attn.out")
        ln(ls.self_attention.layer_norm, f"encoder.{i}.norm1")
        lin(ls.ffn.linear_0, f"encoder.{i}.ffn.fc1")
        lin(ls.ffn.linear_1, f"encoder.{i}.ffn.fc2")
        ln(ls.ffn.layer_norm, f"encoder.{i}.norm2")
    for i, ls in enumerate(spec.decoder.layer):
        lin(ls.self_attention.linear[0], f"decoder.{i}.self_attn.qkv")
        lin(ls.self_attention.linear[1], f"decoder.{i}.self_attn.out")
        ln(ls.self_attention.layer_norm, f"decoder.{i}.norm1")
        lin(ls.attention.linear[0], f"decoder.{i}.cross_attn.q")
        lin(ls.attention.linear[1], f"decoder.{i}.cross_attn.kv")
        lin(ls.attention.linear[2], f"decoder.{i}.cross_attn.out")
        ln(ls.attention.layer_norm, f"decoder.{i}.norm2")
        lin(ls.ffn.linear_0, f"decoder.{i}.ffn.fc1")
        lin(ls.ffn.linear_1, f"decoder.{i}.ffn.fc2")
        ln(ls.ffn.layer_norm, f"decoder.{i}.norm3")
    spec.decoder.projection.weight = w["output.weight"]
    src_vocab = [tok.src.id_to_piece(i) for i in range(tok.src_vocab_size)]
    tgt_vocab = [tok.tgt.id_to_piece(i) for i in range(tok.tgt_vocab_size)]
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    spec.config.bos_token, spec.config.eos_token = tgt_vocab[BOS], tgt_vocab[EOS]
    spec.config.unk_token, spec.config.decoder_start_token = tgt_vocab[UNK], tgt_vocab[BOS]
    spec.validate()
    spec.optimize(quantization=quantization)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))
    del ctranslate2


def run_engine(args: argparse.Namespace) -> dict:
    """Translate in this process with one engine; returns timing, output and peak memory."""
    torch.set_num_threads(args.threads)
    loaded = load_model(args.checkpoint, "cpu")
    tok = loaded.tokenizer
    lines = read_lines(Path(args.src))[: args.limit or None]
    a, b = loaded.cfg.decode.max_len_a, loaded.cfg.decode.max_len_b
    beam = args.beam
    out: list[str] = []
    if args.engine == "mt":
        from mt.decode.translator import Translator

        dcfg = loaded.cfg.decode
        dcfg.beam, dcfg.nbest, dcfg.max_tokens = beam, 1, args.max_tokens
        dcfg.stop_early, dcfg.int8 = args.stop_early, args.int8
        tr = Translator(loaded.model, tok, dcfg, torch.device("cpu"), greedy=beam == 1)
        tr.translate_lines(lines[:16])  # warm-up, untimed, as for every engine
        start = time.perf_counter()
        out = [t.text for t in tr.translate_lines(lines)]
    elif args.engine == "hf":
        hf = to_marian(loaded)
        ids = tok.encode_src(lines)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        res: dict[int, str] = {}
        with torch.inference_mode():  # warm-up, untimed
            warm = torch.tensor([ids[order[0]]])
            hf.generate(input_ids=warm, num_beams=beam, do_sample=False, max_new_tokens=8)
        start = time.perf_counter()
        with torch.inference_mode():
            for k in range(0, len(order), args.batch):
                rows = order[k : k + args.batch]
                width = max(len(ids[i]) for i in rows)
                src = torch.tensor([ids[i] + [PAD] * (width - len(ids[i])) for i in rows])
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
            device="cpu",
            inter_threads=1,
            intra_threads=args.threads,
            compute_type="int8" if args.int8 else "float32",
        )
        pieces = [tok.src_pieces(x) for x in lines]
        translator.translate_batch(pieces[:16], beam_size=beam)  # warm-up, untimed
        start = time.perf_counter()
        results = translator.translate_batch(
            pieces,
            beam_size=beam,
            max_batch_size=args.max_tokens,
            batch_type="tokens",
            max_decoding_length=int(a * max(len(p) for p in pieces) + b) + 1,
        )
        out = [tok.tgt.decode_pieces(r.hypotheses[0]) for r in results]
    seconds = time.perf_counter() - start
    ntok = sum(len(tok.encode_tgt([x])[0]) for x in out)
    return {
        "engine": args.engine
        + ("-int8" if args.int8 else "")
        + ("-early" if args.stop_early else ""),
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
    p.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    p.add_argument("--beam", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--ct2-dir", help=argparse.SUPPRESS)
    p.add_argument("--stop-early", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.engine:  # child mode: one engine, one JSON line
        print(json.dumps(run_engine(args)))
        return
    from peer_marian import machine_info

    from mt.metrics import bleu

    loaded = load_model(args.checkpoint, "cpu")
    refs = read_lines(Path(args.ref))[: args.limit or None] if args.ref else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ct2_dirs = {}
        for q in [None] + (["int8"] if args.int8 else []):
            ct2_dirs[q] = Path(tmp) / f"ct2-{q or 'fp32'}"
            to_ctranslate2(loaded, ct2_dirs[q], q)
        for beam in [int(x) for x in args.beams.split(",")]:
            variants = [(e, False, False) for e in ENGINES]  # (engine, int8, stop early)
            if beam > 1:
                variants.append(("mt", False, True))
            if args.int8:
                variants += [("mt", True, False), ("ct2", True, False)]
                if beam > 1:
                    variants.append(("mt", True, True))
            outputs = {}
            runs: dict[str, list[dict]] = {}
            for _ in range(args.rounds):
                for engine, int8, early in variants:
                    ct2_dir = ct2_dirs["int8" if int8 else None]
                    res = run_child(args, engine, beam, int8, ct2_dir, early)
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
            if beam == 1:
                n = len(outputs["mt"])
                same_hf = sum(x == y for x, y in zip(outputs["mt"], outputs["hf"]))
                same_ct2 = sum(x == y for x, y in zip(outputs["mt"], outputs["ct2"]))
                print(
                    json.dumps(
                        {
                            "greedy_identical_to_mt": {
                                "hf": f"{same_hf}/{n}",
                                "ct2": f"{same_ct2}/{n}",
                            }
                        }
                    )
                )
    info = machine_info()
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
    pairs = [("mt", "hf"), ("mt", "ct2"), ("mt-early", "ct2")]
    for ours, peer in pairs + [("mt-int8", "ct2-int8"), ("mt-int8-early", "ct2-int8")]:
        for beam in sorted({r["beam"] for r in rows}):
            if (ours, beam) in speed and (peer, beam) in speed:
                ratio = speed[(ours, beam)] / speed[(peer, beam)]
                print(f"{ours} / {peer}, beam {beam}: {ratio:.2f}x")
    print(
        f"machine: {info['cpu']}, {args.threads} threads, avx512f {info['avx512f']}, "
        f"amx {info['amx_bf16']}; best of {args.rounds} rounds"
    )


def run_child(
    args: argparse.Namespace, engine: str, beam: int, int8: bool, ct2: Path, early: bool
) -> dict:
    """One engine in a fresh process (its own peak memory); its JSON result line."""
    cmd = [sys.executable, __file__, args.checkpoint, "--src", args.src, "--engine", engine]
    cmd += ["--beam", str(beam), "--threads", str(args.threads), "--limit", str(args.limit)]
    cmd += ["--batch", str(args.batch), "--max-tokens", str(args.max_tokens), "--ct2-dir", str(ct2)]
    if int8:
        cmd.append("--int8")
    if early:
        cmd.append("--stop-early")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()

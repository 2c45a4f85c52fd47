"""Training-step throughput of mt against HF transformers' MarianMT, same shape, same batches.

Both models get the base shape of the issue (d_model 512, 6+6 layers, 8 heads, FFN 2048, vocab
8000, tied embeddings), the same batches, the same Adam settings and label-smoothed loss, on
the same device and precision, in one process. The script prints target tokens/s (and source +
target tokens/s) for each, their ratio, and mt's model FLOPs utilisation against the matmul
peak it measures on the same device (torch.mm of large square matrices).

    pip install -e '.[bench]'
    python scripts/bench_train.py                      # synthetic 64 x 16-token batches
    python scripts/bench_train.py --run-dir runs/multi30k_de_en   # + real token-budget batches
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_marian import logits as marian_logits  # noqa: E402
from peer_marian import machine_info, marian_config  # noqa: E402

from mt.batching import Batch, collate, token_batches  # noqa: E402
from mt.config import Config, ModelConfig, load_config  # noqa: E402
from mt.data import load_corpus  # noqa: E402
from mt.model import Transformer  # noqa: E402
from mt.tokenizer import PAD, Tokenizer  # noqa: E402
from mt.train.loss import label_smoothed_loss  # noqa: E402
from mt.train.trainer import autocast, has_amx  # noqa: E402

BASE = ModelConfig(d_model=512, n_heads=8, d_ff=2048, encoder_layers=6, decoder_layers=6)


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int = 2048, reps: int = 10) -> float:
    """Best-of-3 GFLOP/s of torch.mm on n x n matrices: the device's practical peak."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = 0.0
    for _ in range(3):
        a @ b
        sync(device)
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync(device)
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t) / 1e9)
    return best


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def step_flops(cfg: ModelConfig, vocab: int, b: Batch) -> float:
    """Forward + backward FLOPs (3x forward) of one step over the padded batch."""
    d, ff = cfg.d_model, cfg.d_ff
    B, S = b.src.shape
    T = b.tgt_in.size(1)
    enc = B * S * cfg.encoder_layers * (2 * (4 * d * d + 2 * d * ff) + 4 * S * d)
    dec_tok = 2 * (4 * d * d + 2 * d * d + 2 * d * ff) + 4 * T * d + 4 * S * d
    dec = B * T * cfg.decoder_layers * dec_tok + B * S * cfg.decoder_layers * 2 * (2 * d * d)
    out = B * T * 2 * d * vocab
    return 3.0 * (enc + dec + out)


def synthetic_batches(n: int, batch: int, length: int, vocab: int, seed: int) -> list[Batch]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        src = torch.randint(4, vocab, (batch, length - 1), generator=g).tolist()
        tgt = torch.randint(4, vocab, (batch, length - 1), generator=g).tolist()
        out.append(collate(src, tgt))
    return out


def real_batches(run_dir: Path, n: int, max_tokens: int) -> tuple[list[Batch], int]:
    cfg: Config = load_config(run_dir / "config.yaml")
    tok = Tokenizer.load(run_dir)
    if tok is None:
        raise SystemExit(f"{run_dir}: no spm.model")
    corpus = load_corpus(cfg.data, cfg.data.train, tok, run_dir / "cache", True)
    sizes = [max(len(s), len(t) + 1) for s, t in zip(corpus.src, corpus.tgt)]
    idx = token_batches(sizes, max_tokens, seed=1, epoch=0)[:n]
    return [collate([corpus.src[i] for i in b], [corpus.tgt[i] for i in b]) for b in idx], (
        tok.src_vocab_size
    )


def time_training(
    name: str,
    model: torch.nn.Module,
    forward,
    batches: list[Batch],
    device: torch.device,
    precision: str,
    warmup: int,
) -> float:
    """Seconds for the timed batches (after `warmup` untimed ones) of fwd + bwd + Adam."""
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    if name == "mt":  # mt trains with the fused Adam kernel; Marian with torch's default
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    start = 0.0
    for i, b in enumerate(batches):
        if i == warmup:
            sync(device)
            start = time.perf_counter()
        b = b.to(device)
        with autocast(device, precision):
            out = forward(model, b)
        loss, _ = label_smoothed_loss(out, b.tgt_out, 0.1, PAD)
        (loss / b.tgt_tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync(device)
    return time.perf_counter() - start


def compare(batches: list[Batch], vocab: int, device, precision, warmup, label) -> dict:
    from transformers import MarianMTModel

    torch.manual_seed(0)
    mt_model = Transformer(BASE, vocab, vocab).to(device)
    cfg = Config(model=BASE)

    class _Tok:  # marian_config only needs the vocabulary sizes and jointness
        src_vocab_size = tgt_vocab_size = vocab
        joint = True

    marian = MarianMTModel(marian_config(cfg, _Tok())).to(device)
    timed = batches[warmup:]
    tgt = sum(b.tgt_tokens for b in timed)
    src = sum(b.src_tokens for b in timed)
    flops = sum(step_flops(BASE, vocab, b) for b in timed)
    row = {"batches": label, "precision": precision}
    # Alternate the two so that drift on a shared machine hits both alike.
    secs = {"mt": 0.0, "marian": 0.0}
    for _ in range(2):
        secs["mt"] += time_training(
            "mt", mt_model, lambda m, b: m(b.src, b.tgt_in), batches, device, precision, warmup
        )
        secs["marian"] += time_training(
            "marian", marian, marian_logits, batches, device, precision, warmup
        )
    for k, s in secs.items():
        row[f"{k}_tgt_tok_s"] = round(2 * tgt / s, 1)
        row[f"{k}_all_tok_s"] = round(2 * (tgt + src) / s, 1)
    row["ratio_mt_over_marian"] = round(secs["marian"] / secs["mt"], 3)
    row["mt_model_gflops"] = round(2 * flops / secs["mt"] / 1e9, 1)
    row["marian_model_gflops"] = round(2 * flops / secs["marian"] / 1e9, 1)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--steps", type=int, default=6, help="timed steps per model and round")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--length", type=int, default=16)
    p.add_argument("--run-dir", type=Path, help="an mt run: adds its real token batches")
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--bf16", action="store_true", help="also bf16 (default where it is fast)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    precisions = ["fp32"]
    if args.bf16 or device.type == "cuda" or has_amx():
        precisions.append("bf16")
    info = {**machine_info(), "threads": torch.get_num_threads(), "device": str(device)}
    peaks = {
        p_: matmul_peak(device, torch.float32 if p_ == "fp32" else torch.bfloat16)
        for p_ in precisions
    }
    print(
        json.dumps(
            {"machine": info, "matmul_peak_gflops": {k: round(v, 1) for k, v in peaks.items()}}
        )
    )
    n = args.warmup + args.steps
    rows = []
    sets = [
        (
            synthetic_batches(n, args.batch, args.length, 8000, 0),
            8000,
            f"synthetic {args.batch}x{args.length}",
        )
    ]
    if args.run_dir:
        real, vocab = real_batches(args.run_dir, n, args.max_tokens)
        sets.append((real, vocab, f"Multi30k max_tokens {args.max_tokens}"))
    for precision in precisions:
        for batches, vocab, label in sets:
            row = compare(batches, vocab, device, precision, args.warmup, label)
            row["mt_mfu"] = round(row["mt_model_gflops"] / peaks[precision], 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    print(
        f"{'batches':32} {'prec':5} {'mt tgt tok/s':>13} {'HF tgt tok/s':>13} "
        f"{'ratio':>6} {'mt MFU':>7}"
    )
    for r in rows:
        print(
            f"{r['batches']:32} {r['precision']:5} {r['mt_tgt_tok_s']:13.0f} "
            f"{r['marian_tgt_tok_s']:13.0f} {r['ratio_mt_over_marian']:6.2f} "
            f"{r['mt_mfu']:7.1%}"
        )
    print(
        f"machine: {info['cpu']}, {info['threads']} threads, device {device}; matmul peak "
        + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items())
    )


if __name__ == "__main__":
    main()

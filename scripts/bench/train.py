"""Training-step throughput of mt against HF transformers' MarianMT, same shape, same batches.

Both models get the base shape of the issue (d_model 512, 6+6 layers, 8 heads, FFN 2048, vocab
8000, tied embeddings), the same batches, the same Adam settings and label-smoothed loss, on
the same device and precision, in one process. The script prints target tokens/s (and source +
target tokens/s) for each, their ratio, and mt's model FLOPs utilisation against the matmul
peak it measures on the same device (torch.mm of large square matrices).

With `--run-dir` two more rows use the run's real corpus: both engines on mt's token-budget
batches (a kernel-for-kernel comparison), and each engine on its own default pipeline, mt's
token-budget batches against the fixed-size random batches HF's Seq2SeqTrainer builds unless
told to group by length; target tokens/s there counts real (non-pad) tokens only.

    pip install -e '.[bench]'
    python -m scripts.bench.train                      # synthetic 64 x 16-token batches
    python -m scripts.bench.train --run-dir runs/multi30k_de_en   # + real token-budget batches
    python -m scripts.bench.train --device cuda --compile         # + rows with torch.compile
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from mt.batching import Batch, collate, token_batches
from mt.config import Config, ModelConfig
from mt.config_file import load_config
from mt.data.loader import TrainingSet
from mt.data.prepare import prepare
from mt.device import autocast, cpu_flags, native_bf16, planless_attention
from mt.memory import keep_freed_memory
from mt.model import Transformer
from mt.tokenizer import PAD, Tokenizer
from mt.train.loss import label_smoothed_loss
from scripts.bench.peer_marian import logits as marian_logits
from scripts.bench.peer_marian import marian_config
from scripts.common import machine

BASE = ModelConfig(d_model=512, n_heads=8, d_ff=2048, encoder_layers=6, decoder_layers=6)


def matmul_peak(
    device: torch.device, dtype: torch.dtype, sizes: tuple[int, ...] = (1024, 2048, 4096)
) -> float:
    """Best GFLOP/s of torch.mm on n x n matrices over a few sizes and 5 tries each: the
    device's practical peak. The best, not the mean, so a noisy machine does not flatter MFU."""
    best = 0.0
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        reps = max(2, int(2e10 / (2 * n**3)))
        for _ in range(5):
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


def real_batches(
    run_dir: Path, n: int, max_tokens: int, hf_sentences: int
) -> tuple[list[Batch], list[Batch], int]:
    """The run's corpus in two pipelines: mt's token-budget batches (length-bucketed, little
    padding) and the batches HF's Seq2SeqTrainer makes by default (a fixed number of random
    sentences padded to the longest, `group_by_length=False`). `hf_sentences` 0 means the mean
    sentence count of the mt batches, so both see as many sentences per step."""
    cfg: Config = load_config(run_dir / "config.yaml")
    tok = Tokenizer.load(run_dir)
    if tok is None:
        raise SystemExit(f"{run_dir}: no spm.model")
    prepared = prepare(cfg.data, cfg.tokenizer, cfg.train.seed, run_dir)
    corpus = TrainingSet(prepared.train, prepared.weights)
    idx = token_batches(corpus.sizes, max_tokens, seed=1, epoch=0)[:n]
    hf_sentences = hf_sentences or round(sum(len(b) for b in idx) / len(idx))
    order = torch.randperm(len(corpus), generator=torch.Generator().manual_seed(1)).numpy()
    rand = [order[i * hf_sentences : (i + 1) * hf_sentences] for i in range(n)]

    def make(groups: list[np.ndarray]) -> list[Batch]:
        return [corpus[b] for b in groups]

    return make(idx), make(rand), tok.src_vocab_size


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


def compare(
    mt_batches: list[Batch],
    hf_batches: list[Batch],
    vocab: int,
    device: torch.device,
    precision: str,
    warmup: int,
    rounds: int,
    label: str,
    compile_: bool = False,
) -> dict:
    """Both engines' training speed, each on its own list of batches (usually the same list);
    with `compile_`, both models wrapped in `torch.compile` as `train.compile` wraps mt's."""
    from transformers import MarianMTModel

    torch.manual_seed(0)
    mt_model = Transformer(BASE, vocab, vocab).to(device)
    cfg = Config(model=BASE)

    class _Tok:  # marian_config only needs the vocabulary sizes and jointness
        src_vocab_size = tgt_vocab_size = vocab
        joint = True

    marian = MarianMTModel(marian_config(cfg, _Tok())).to(device)
    if compile_:  # the untimed pass below compiles, and recompiles once shapes change
        mt_model, marian = torch.compile(mt_model), torch.compile(marian)
    engines = {
        "mt": (mt_model, lambda m, b: m(b.src, b.tgt_in), mt_batches),
        "marian": (marian, marian_logits, hf_batches),
    }
    row: dict = {"batches": label, "precision": precision, "compile": compile_}
    # One untimed pass over every batch first: each new batch shape has a one-time set-up
    # (kernel choice, cuDNN attention plans, oneDNN primitives) that a long run pays once. Real
    # batches are all different shapes, and on an H100 in bf16, the first pass over them ran at
    # a tenth of the speed of the second (docs/studies/on-a-gpu.md).
    for k, (model, forward, batches) in engines.items():
        time_training(k, model, forward, batches, device, precision, len(batches))
    # Alternate the two, round by round, so that drift on a shared machine hits both alike.
    secs = {k: 0.0 for k in engines}
    for _ in range(rounds):
        for k, (model, forward, batches) in engines.items():
            secs[k] += time_training(k, model, forward, batches, device, precision, warmup)
    for k, (_, _, batches) in engines.items():
        timed = batches[warmup:]
        tgt = sum(b.tgt_tokens for b in timed)
        src = sum(b.src_tokens for b in timed)
        flops = sum(step_flops(BASE, vocab, b) for b in timed)
        row[f"{k}_tgt_tok_s"] = round(rounds * tgt / secs[k], 1)
        row[f"{k}_all_tok_s"] = round(rounds * (tgt + src) / secs[k], 1)
        row[f"{k}_model_gflops"] = round(rounds * flops / secs[k] / 1e9, 1)
        row[f"{k}_pad_share"] = round(
            1 - sum(b.tgt_tokens for b in timed) / sum(b.tgt_out.numel() for b in timed), 3
        )
    row["ratio_mt_over_marian"] = round(row["mt_tgt_tok_s"] / row["marian_tgt_tok_s"], 3)
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
    p.add_argument(
        "--hf-sentences", type=int, default=0, help="HF's own batches: sentences per batch"
    )
    p.add_argument("--rounds", type=int, default=3, help="alternating timed rounds per engine")
    p.add_argument("--bf16", action="store_true", help="also bf16 (default where it is native)")
    p.add_argument(
        "--compile", action="store_true", help="also every row with both models torch.compile'd"
    )
    p.add_argument("--compile-only", action="store_true", help="only the compiled rows")
    p.add_argument(
        "--precisions",
        help="comma-separated, e.g. bf16 (default: fp32, and bf16 "
        "on CUDA or a CPU with native bf16)",
    )
    p.add_argument("--no-synthetic", action="store_true", help="real batches only (--run-dir)")
    args = p.parse_args()
    keep_freed_memory()  # as `mt train` does; both engines share the process and the allocator
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    planless_attention(device)  # as `mt train` does, for both engines alike
    precisions = ["fp32"]
    if args.bf16 or device.type == "cuda" or native_bf16(cpu_flags()):
        precisions.append("bf16")
    if args.precisions:
        precisions = args.precisions.split(",")
    info = {**machine(), "threads": torch.get_num_threads(), "device": str(device)}
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
    synthetic = synthetic_batches(n, args.batch, args.length, 8000, 0)
    sets = [(synthetic, synthetic, 8000, f"synthetic {args.batch}x{args.length}")]
    if args.no_synthetic and args.run_dir:
        sets = []
    if args.run_dir:
        mt_real, hf_real, vocab = real_batches(args.run_dir, n, args.max_tokens, args.hf_sentences)
        sets.append((mt_real, mt_real, vocab, f"Multi30k max_tokens {args.max_tokens}"))
        hf_n = hf_real[0].src.size(0)
        sets.append((mt_real, hf_real, vocab, f"Multi30k own: mt tokens, HF {hf_n} random"))
    # Eager rows first: compiling takes minutes, and a run cut short keeps what it measured.
    modes = [True] if args.compile_only else [False, True] if args.compile else [False]
    for compile_ in modes:
        for precision in precisions:
            for mt_b, hf_b, vocab, label in sets:
                row = compare(
                    mt_b, hf_b, vocab, device, precision, args.warmup, args.rounds, label, compile_
                )
                row["mt_mfu"] = round(row["mt_model_gflops"] / peaks[precision], 3)
                rows.append(row)
                print(json.dumps(row), flush=True)
    print()
    print(
        f"{'batches':40} {'prec':5} {'mt tgt tok/s':>13} {'HF tgt tok/s':>13} "
        f"{'ratio':>6} {'mt MFU':>7} {'mt pad':>7} {'HF pad':>7}"
    )
    for r in rows:
        name = r["batches"] + (", compiled" if r["compile"] else "")
        print(
            f"{name:40} {r['precision']:5} {r['mt_tgt_tok_s']:13.0f} "
            f"{r['marian_tgt_tok_s']:13.0f} {r['ratio_mt_over_marian']:6.2f} "
            f"{r['mt_mfu']:7.1%} {r['mt_pad_share']:7.1%} {r['marian_pad_share']:7.1%}"
        )
    print(
        f"machine: {info['cpu']}, {info['threads']} threads, device {device}; matmul peak "
        + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items())
    )


if __name__ == "__main__":
    main()

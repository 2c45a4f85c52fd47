"""How near a run's own training step is to what the CPU's matrix multiplies allow.

`scripts/bench/train.py` compares mt with HF on the paper's base shape; this takes a run's
own model shape and corpus (a recipe run: `runs/multi30k_de_en`) and asks the question a
time-budgeted recipe depends on: could a step get faster, or must more updates come from
fewer FLOPs? It prints, on the run's real token-budget batches (fp32, the threads given):

- target tokens/s, seconds a step, model GFLOP/s, and that as a share of the `torch.mm` peak
  measured in the same process (MFU);
- where a step's CPU time goes (torch.profiler, grouped: matrix multiplies, attention,
  log-softmax, layer norm, the rest);
- each GEMM shape of the model's step at the batch's row count, through torch's `F.linear`
  (MKL's GEMM on x86) and through oneDNN's (`torch.ops.mkldnn._linear_pointwise`, which
  `decode.gemm` uses for the output layer because it is faster there on AMD CPUs).

    python -m scripts.bench.step_ceiling runs/multi30k_de_en --threads 2
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from mt.config_file import load_config
from mt.memory import keep_freed_memory
from mt.model import Transformer
from mt.runtime.onednn import available as onednn_available
from mt.tokenizer import PAD
from mt.train.loss import label_smoothed_loss
from scripts.bench.train import matmul_peak, real_batches, step_flops
from scripts.common import describe_machine

GROUPS = {  # profiler op name -> the group it is reported under
    "aten::mm": "matrix multiplies",
    "aten::addmm": "matrix multiplies",
    "aten::bmm": "matrix multiplies",
    "attention": "attention",
    "log_softmax": "log-softmax",
    "layer_norm": "layer norm",
}


def group(name: str) -> str:
    for key, label in GROUPS.items():
        if key in name:
            return label
    return "the rest"


def best_seconds(fn, reps: int = 20, tries: int = 3) -> float:
    """Best mean seconds of `fn` over `tries` runs of `reps` calls, after two warm-up calls."""
    fn()
    fn()
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - start) / reps)
    return best


def gemm_table(rows: int, d: int, ff: int, vocab: int) -> list[tuple[str, float, float]]:
    """(shape, GFLOP/s through F.linear, through oneDNN) for the Linear layers of a step:
    forward (rows x in -> out) and the weight gradient's (out x rows -> in) shapes."""
    shapes = [(rows, d, d), (rows, d, ff), (rows, ff, d), (rows, d, vocab), (rows, vocab, d)]
    shapes += [(d, rows, ff), (ff, rows, d), (d, rows, vocab), (vocab, rows, d)]
    out = []
    for m, k, n in shapes:
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.zeros(n)
        flops = 2 * m * k * n
        torch_s = best_seconds(lambda x=x, w=w, b=b: F.linear(x, w, b))
        dnn_s = best_seconds(
            lambda x=x, w=w, b=b: torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")
        )
        out.append((f"{m} x {k} -> {n}", flops / torch_s / 1e9, flops / dnn_s / 1e9))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, help="a training run (config.yaml, spm.model)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--profile-steps", type=int, default=10)
    args = p.parse_args()
    keep_freed_memory()  # as `mt train` does
    torch.set_num_threads(args.threads)
    cfg = load_config(args.run_dir / "config.yaml")
    n = args.warmup + args.steps + args.profile_steps
    batches, _, vocab = real_batches(args.run_dir, n, cfg.train.max_tokens, 0)
    torch.manual_seed(0)
    model = Transformer(cfg.model, vocab, vocab).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)

    def step(b) -> None:
        loss, _ = label_smoothed_loss(model(b.src, b.tgt_in), b.tgt_out, 0.1, PAD)
        (loss / b.tgt_tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for b in batches[: args.warmup]:
        step(b)
    timed = batches[args.warmup : args.warmup + args.steps]
    start = time.perf_counter()
    for b in timed:
        step(b)
    secs = time.perf_counter() - start
    tokens = sum(b.tgt_tokens for b in timed)
    gflops = sum(step_flops(cfg.model, vocab, b) for b in timed) / secs / 1e9
    peak = matmul_peak(torch.device("cpu"), torch.float32, (1024, 2048))
    print(f"machine: {describe_machine()}, {torch.get_num_threads()} threads")
    print(
        f"{len(timed)} steps: {tokens / secs:,.0f} target tokens/s, {secs / len(timed):.3f} s a "
        f"step ({tokens / len(timed):,.0f} target tokens), {gflops:.1f} model GFLOP/s, "
        f"matmul peak {peak:.1f} GFLOP/s, MFU {gflops / peak:.1%}"
    )
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for b in batches[args.warmup + args.steps :]:
            step(b)
    shares: dict[str, float] = defaultdict(float)
    for e in prof.key_averages():
        shares[group(e.key)] += e.self_cpu_time_total
    total = sum(shares.values())
    print("CPU time of a step: " + ", ".join(
        f"{k} {v / total:.1%}" for k, v in sorted(shares.items(), key=lambda kv: -kv[1])
    ))  # fmt: skip
    if not onednn_available():
        print("oneDNN's linear op is missing from this torch: no GEMM comparison")
        return
    rows = round(tokens / len(timed))
    print(f"{'GEMM (rows x in -> out)':28} {'F.linear GFLOP/s':>17} {'oneDNN GFLOP/s':>15}")
    for shape, torch_g, dnn_g in gemm_table(rows, cfg.model.d_model, cfg.model.d_ff, vocab):
        print(f"{shape:28} {torch_g:17.1f} {dnn_g:15.1f}")


if __name__ == "__main__":
    main()

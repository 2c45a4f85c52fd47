"""The first pass over new shapes on a GPU, with and without cuDNN's attention kernels.

On an H200 a 1-round `scripts/bench/decode.py` ran mt at 40 sent/s while a warm second pass
over the same 300 lines ran at 927 (`scripts/bench/decode_profile.py`), and the first 1,000
steps of the GPU recipe ran at ~60% of the speed of later ones. In bf16 and fp16, PyTorch's SDPA
prefers cuDNN's fused attention, and cuDNN builds an execution plan for every new input shape:
a decode meets a new key length every step, and a training run a new batch shape for many steps.
This script measures that cost where users pay it, in a fresh process each, with cuDNN's
attention allowed (PyTorch's default) and with it switched off (flash and memory-efficient
kernels only, which need no per-shape plan): the first and the second pass of a decode
(greedy, beam 5) and of training steps on real token batches.

    python -m scripts.bench.cuda_attention CHECKPOINT --run-dir RUN [--limit 500] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def child_decode(args: argparse.Namespace) -> dict:

    from mt.translation.requests import Plan, Request
    from mt.translation.session import DecodeOptions, Session
    from scripts.common import read_lines

    lines = read_lines(args.src)[: args.limit]
    row: dict = {}
    for beam in (1, 5):
        options = DecodeOptions(beam=beam, nbest=1, greedy=beam == 1 or None, dtype=args.dtype)
        tr = Session([args.checkpoint], args.device).translator(options)
        requests = [Request(x, plan=Plan(recase=False, keep_numbers=False)) for x in lines]
        for n in (1, 2):
            sync()
            t = time.perf_counter()
            out = tr.translate(requests)
            sync()
            row[f"beam{beam}_pass{n}_sent_s"] = round(len(lines) / (time.perf_counter() - t), 1)
        row[f"beam{beam}_first_line"] = str(out[0])[:80]
    return row


def child_train(args: argparse.Namespace) -> dict:
    import torch

    from mt.model import Transformer
    from scripts.bench.train import BASE, real_batches, time_training

    batches, _, vocab = real_batches(args.run_dir, args.batches, args.max_tokens, 0)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = Transformer(BASE, vocab, vocab).to(device)
    tokens = sum(b.tgt_tokens for b in batches)
    row: dict = {"batches": len(batches)}
    for n in (1, 2):  # every batch timed: the first pass meets each shape for the first time
        secs = time_training(
            "mt", model, lambda m, b: m(b.src, b.tgt_in), batches, device, args.dtype, 0
        )
        row[f"pass{n}_tgt_tok_s"] = round(tokens / secs)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--run-dir", type=Path, help="a run with config.yaml and spm.model: training")
    p.add_argument("--src", type=Path, default=Path("data/multi30k/test_2016_flickr.de.gz"))
    p.add_argument("--limit", type=int, default=500)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--max-tokens", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--device", default="cuda", help="cpu: rehearse the plumbing")
    p.add_argument("--child", choices=["decode", "train"])
    p.add_argument("--cudnn", choices=["on", "off"])
    args = p.parse_args()
    if args.child:
        import torch

        torch.backends.cuda.enable_cudnn_sdp(args.cudnn == "on")
        row = child_decode(args) if args.child == "decode" else child_train(args)
        print(json.dumps({"job": args.child, "cudnn": args.cudnn, **row}), flush=True)
        return
    jobs = ["decode"] + (["train"] if args.run_dir else [])
    for r in range(args.rounds):
        for job in jobs:
            order = ["on", "off"] if r % 2 == 0 else ["off", "on"]
            for flag in order:  # alternating which goes first, round by round
                cmd = [sys.executable, "-m", "scripts.bench.cuda_attention", str(args.checkpoint)]
                cmd += ["--child", job, "--cudnn", flag, "--src", str(args.src)]
                cmd += ["--limit", str(args.limit), "--dtype", args.dtype, "--device", args.device]
                cmd += ["--batches", str(args.batches), "--max-tokens", str(args.max_tokens)]
                if args.run_dir:
                    cmd += ["--run-dir", str(args.run_dir)]
                res = subprocess.run(cmd, capture_output=True, text=True)
                lines = [x for x in res.stdout.splitlines() if x.startswith("{")]
                failed = {"job": job, "cudnn": flag, "rc": res.returncode, "err": res.stderr[-600:]}
                print(lines[-1] if lines else json.dumps(failed), flush=True)


if __name__ == "__main__":
    main()

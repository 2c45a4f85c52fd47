"""Where a decode's time goes: one `mt translate`-like call (a Session's translator on test
lines) under cProfile, then under torch.profiler, and on CUDA the host syncs it makes.

On a GPU, mt's decoding ran at 0.05-0.13x CTranslate2 while its CPU path on the same host was
4-5x faster than its GPU path (docs/studies/on-a-gpu.md): the time is on the host, between
kernels. cProfile names the Python functions that hold it; torch.profiler's table the ops
(self CPU time, and self CUDA time on a GPU); the sync count shows how often the host waits
for the device (`torch.cuda.set_sync_debug_mode`). Prints plain text, for a log.

    python -m scripts.bench.decode_profile runs/multi30k_de_en/best.pt --device cuda --dtype fp16
    python -m scripts.bench.decode_profile CKPT --limit 100 --beam 1     # CPU, greedy
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import os
import pstats
import time
import warnings
from pathlib import Path

from scripts.common import machine, read_lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--src", type=Path, help="default: $MT_DATA's test_2016_flickr.de.gz")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--beam", type=int, default=1, help="1: greedy")
    p.add_argument("--limit", type=int, default=300, help="lines translated per pass")
    p.add_argument("--rows", type=int, default=30, help="rows of each table")
    args = p.parse_args()

    import torch

    from mt.translation.requests import Plan, Request
    from mt.translation.session import DecodeOptions, Session

    src = args.src or Path(os.environ.get("MT_DATA", "data/multi30k")) / "test_2016_flickr.de.gz"
    lines = read_lines(src)[: args.limit]
    options = DecodeOptions(
        beam=args.beam, nbest=1, greedy=args.beam == 1 or None, dtype=args.dtype
    )
    tr = Session([args.checkpoint], args.device).translator(options)
    requests = [
        Request(x, plan=Plan(recase=False, keep_numbers=False)) for x in lines
    ]  # as scripts/bench/decode.py
    cuda = tr.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def once() -> float:
        sync()
        t = time.perf_counter()
        tr.translate(requests)
        sync()
        return time.perf_counter() - t

    once()  # warm-up: kernels, caches, allocator
    plain = min(once() for _ in range(2))
    print(f"machine: {machine()}")
    print(
        f"{len(lines)} lines, beam {args.beam}, {args.device} {args.dtype}: {plain:.3f} s "
        f"({len(lines) / plain:.1f} sent/s, best of 2)"
    )

    prof = cProfile.Profile()
    prof.enable()
    once()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(args.rows)
    print("\n== cProfile, by own time (tottime)")
    print(text.getvalue().strip())

    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as tp:
        once()
    averages = tp.key_averages()
    print("\n== torch.profiler, by self CPU time")
    print(averages.table(sort_by="self_cpu_time_total", row_limit=args.rows))
    if cuda:
        print("\n== torch.profiler, by self CUDA time")
        print(averages.table(sort_by="self_cuda_time_total", row_limit=args.rows))
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            once()
        torch.cuda.set_sync_debug_mode(0)
        where = collections.Counter(
            f"{Path(w.filename).name}:{w.lineno}" for w in caught if "synchroniz" in str(w.message)
        )
        print(f"\n== host syncs in one pass: {sum(where.values())}")
        for place, n in where.most_common(args.rows):
            print(f"{n:8d}  {place}")


if __name__ == "__main__":
    main()

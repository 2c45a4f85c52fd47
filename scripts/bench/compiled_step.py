"""Would a compiled decoder step close the gap to CTranslate2? Search with the model's own
eager step against the same step through `torch.compile` (inductor, dynamic shapes: rows
leave as sentences finish and the caches grow every step), in one process, taking turns.

CTranslate2 runs a decoding step as one C++ loop; mt dispatches a few hundred torch ops per
step from Python (docs/studies/bf16-and-threads.md, "Workers, and CTranslate2's replicas"). If
dispatch were the cost, inductor, which traces the step into one graph and fuses its small ops
into generated C++, would show it. Each engine is a decoding copy as `mt translate` makes it
(`mt.runtime.dtype.decode_model`: fp32, bf16 with oneDNN's packed products, or int8), its step
compiled in place; search is the toolkit's (greedy or beam), on token batches of the test
lines as `mt translate` cuts them. Reports the compile time (the first pass), sentences/s of
the best round, and whether both wrote the same tokens.

    python -m scripts.bench.compiled_step runs/multi30k_de_en/best.pt --dtypes fp32,bf16 --beams 1,5
"""

from __future__ import annotations

import argparse
import copy
import time
from functools import partial
from pathlib import Path

from scripts.common import (
    alternate,
    describe_machine,
    load_checkpoint,
    multi30k_dir,
    read_lines,
)


def batches(tokenizer, lines: list[str], max_tokens: int, longest: int):  # noqa: ANN001, ANN201
    """(B, S) source tensors of the lines (EOS included, at most `longest` ids), cut into
    batches as `mt translate` cuts them."""
    from mt.batching import pad, token_batches
    from mt.tokenizer import EOS

    ids = [tokenizer.src.encode(x)[: longest - 1] + [EOS] for x in lines]
    cuts = token_batches([len(x) for x in ids], max_tokens)
    return [pad([ids[i] for i in rows]) for rows in cuts]


def search(model, srcs: list, cfg) -> list[list[int]]:  # noqa: ANN001
    """The toolkit's greedy (beam 1) or beam search over the batches: each line's tokens."""
    from mt.search.beam import beam_search, greedy_search

    if cfg.beam == 1:
        return [h.tokens for s in srcs for h in greedy_search(model, s, cfg, with_scores=False)]
    return [hs[0].tokens for s in srcs for hs in beam_search(model, s, cfg)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--src", type=Path, help="default: the test part's source side in $MT_DATA")
    p.add_argument("--dtypes", default="fp32", help="comma-separated: fp32, bf16, int8")
    p.add_argument("--beams", default="1", help="comma-separated beam sizes (1: greedy)")
    p.add_argument("--limit", type=int, default=0, help="lines (0: all)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()

    import dataclasses

    import torch
    import torch._dynamo

    from mt.device import Precision
    from mt.runtime.dtype import decode_model

    loaded = load_checkpoint(args.checkpoint, args.threads)
    data = loaded.cfg.data
    src = args.src or multi30k_dir() / f"{data.test}.{data.src_lang}.gz"
    lines = read_lines(src)[: args.limit or None]
    srcs = batches(
        loaded.tokenizer, lines, loaded.cfg.decode.max_tokens, loaded.model.cfg.max_positions
    )
    torch._dynamo.config.cache_size_limit = 64  # guards on the caches' growth, not on rows
    print(f"{describe_machine()}, torch {torch.__version__}, {args.threads} thread(s), "
          f"{len(lines)} lines")  # fmt: skip

    for dtype in args.dtypes.split(","):
        int8 = dtype == "int8"
        precision = Precision("fp32" if int8 else dtype, "asked")
        cpu = torch.device("cpu")
        eager = decode_model(loaded.model, precision, cpu, int8, "auto")  # a copy, or the model
        compiled = decode_model(copy.deepcopy(loaded.model), precision, cpu, int8, "auto")
        compiled.step_hidden = torch.compile(compiled.step_hidden, dynamic=True)
        for beam in (int(b) for b in args.beams.split(",")):
            cfg = dataclasses.replace(loaded.cfg.decode, beam=beam, nbest=1)

            start = time.perf_counter()
            try:
                search(compiled, srcs, cfg)  # compiles: the cost a fresh process would pay
            except Exception as e:  # noqa: BLE001 - a report line, not a crash
                print(f"{dtype} beam {beam}: compiled step failed: {str(e).splitlines()[0]}")
                continue
            first = time.perf_counter() - start
            search(eager, srcs, cfg)
            runs = {"eager": partial(search, eager, srcs, cfg)}
            runs["compiled"] = partial(search, compiled, srcs, cfg)
            outs, seconds = alternate(args.rounds, runs)
            rate = {k: len(lines) / min(v) for k, v in seconds.items()}
            print(
                f"{dtype} beam {beam}: eager {rate['eager']:.1f}, compiled {rate['compiled']:.1f}"
                f" sentences/s ({rate['compiled'] / rate['eager']:.2f}x), first compiled pass "
                f"{first:.1f} s, same tokens: {outs['eager'] == outs['compiled']}"
            )


if __name__ == "__main__":
    main()

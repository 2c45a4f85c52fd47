"""CTranslate2's default thread count against one thread per core, on an `mt export` folder.

CTranslate2 starts 4 intra-op threads unless told otherwise; on a 2-core machine that
oversubscribes the cores. This times `translate_batch` on the same lines with the default and
with `intra_threads` = the cores, alternating over rounds (the best of each kept), and checks
that both give the same output as `mt translate --beam B --stop-early` when `--mt-output` names
that file.

    mt export best.pt --to ctranslate2 ct2_de_en
    python -m scripts.bench.ct2_threads ct2_de_en --src test.de --limit 100
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from scripts.common import alternate, read_lines


def main() -> None:
    import ctranslate2
    import sentencepiece

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model_dir", type=Path)
    p.add_argument("--src", type=Path, required=True)
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--mt-output", type=Path, help="mt translate's output of the same lines")
    args = p.parse_args()

    cores = len(os.sched_getaffinity(0))
    sp = sentencepiece.SentencePieceProcessor(model_file=str(args.model_dir / "spm.model"))
    lines = read_lines(args.src)[: args.limit]
    pieces = [sp.encode(line, out_type=str) for line in lines]
    limit = int(1.2 * (max(map(len, pieces)) + 1) + 10)
    engines = {
        "default threads": ctranslate2.Translator(str(args.model_dir), device="cpu"),
        f"intra_threads={cores}": ctranslate2.Translator(
            str(args.model_dir), device="cpu", intra_threads=cores
        ),
    }

    def run(translator) -> list[str]:
        results = translator.translate_batch(pieces, beam_size=args.beam, max_decoding_length=limit)
        return [sp.decode(r.hypotheses[0]) for r in results]

    runs = {name: (lambda t=translator: run(t)) for name, translator in engines.items()}
    outputs, times = alternate(args.rounds, runs)
    best = {name: min(seconds) for name, seconds in times.items()}
    reference = read_lines(args.mt_output)[: args.limit] if args.mt_output else None
    print(f"{len(lines)} lines, beam {args.beam}, {cores} cores, best of {args.rounds} rounds")
    for name, seconds in best.items():
        agree = ""
        if reference is not None:
            same = sum(a == b for a, b in zip(outputs[name], reference))
            agree = f", {same}/{len(reference)} equal to mt translate --stop-early"
        print(f"{name:18} {seconds:8.2f} s{agree}")


if __name__ == "__main__":
    main()

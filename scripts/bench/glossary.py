"""Glossaries on Multi30k: term accuracy, BLEU and speed without a glossary, with the guard
(the default: constrain only the lines that miss a term) and hard (every term constrained);
for a model trained with terms (`data.terms`), whose searches read the terms written into the
source, also soft (the annotation alone: one search, no constraint). The guard and soft run
at the checkpoint's `decode.glossary_boost` (mt.glossary.boost: the terms' pieces raised in
the first search; soft needs it or the annotation); `--boosts B,...` adds both at each B.

The glossary is a term test set (scripts/tools/term_testset.py: entries the model does not
write unaided, used by the references). The three runs take turns for `--rounds` rounds on the
same lines with the same translator; each is timed by its best round (wall time, or with
`--cpu-time` the process's CPU seconds: one thread, steadier on a shared virtual machine). Lines
without a term must come out byte-identical to the run without a glossary: the report counts
those that do not.

    python -m scripts.tools.term_testset runs/demo/best.pt -o terms.tsv
    python -m scripts.bench.glossary runs/demo/best.pt terms.tsv --threads 1
    python -m scripts.bench.glossary runs/demo_terms/best.pt terms.tsv --threads 1
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from mt.glossary.accuracy import term_accuracy
from mt.glossary.files import read_glossary
from mt.glossary.inline import takes_terms
from mt.metrics import bleu
from mt.translation.options import DecodeOptions
from mt.translation.requests import Plan, Request
from mt.translation.session import Session
from mt.translation.translator import translate_stream
from scripts.common import (
    alternate,
    describe_machine,
    markdown_table,
    multi30k_dir,
    read_lines,
    say,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("glossary", type=Path)
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--boosts", default="", help="glossary_boost values, comma-separated")
    parser.add_argument(
        "--cpu-time", action="store_true", help="time by the process's CPU seconds (one thread)"
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    session = Session([args.checkpoint], "cpu")
    sl, tl = session.source_language(), session.cfg.data.tgt_lang
    glossary = read_glossary(args.glossary, sl, tl)
    data = multi30k_dir()
    src = [x.strip() for x in read_lines(data / f"{args.split}.{sl}.gz")[: args.lines]]
    ref = [x.strip() for x in read_lines(data / f"{args.split}.{tl}.gz")[: args.lines]]
    translator = session.translator()

    def run(plan: Plan | None, boost: float | None = None):  # noqa: ANN202
        reqs = [Request(x, plan=plan or Plan(), glossary=glossary if plan else None) for x in src]
        t = translator if boost is None else session.translator(DecodeOptions(glossary_boost=boost))
        return lambda: [x.text for x in translate_stream(t, reqs)]

    say(f"{len(src)} lines, {len(glossary)} entries, {args.rounds} rounds")
    runs = {"none": run(None), "guard": run(Plan()), "hard": run(Plan(glossary_hard=True))}
    if takes_terms(session.tokenizer) or translator.cfg.glossary_boost:
        runs["soft"] = run(Plan(glossary_soft=True))
    for b in [float(x) for x in args.boosts.split(",") if x]:
        runs[f"guard, boost {b:g}"] = run(Plan(), b)
        if b or takes_terms(session.tokenizer):
            runs[f"soft, boost {b:g}"] = run(Plan(glossary_soft=True), b)
    if args.cpu_time and args.threads != 1:
        parser.error("--cpu-time counts one thread's seconds: give --threads 1")
    clock = time.process_time if args.cpu_time else time.perf_counter
    outs, seconds = alternate(args.rounds, runs, clock)
    has = [bool(glossary.find(x)) for x in src]
    rows = []
    for name, hyp in outs.items():
        acc = term_accuracy(glossary, src, hyp, ref)
        changed = sum(h != p for h, p, t in zip(hyp, outs["none"], has) if not t)
        best = min(seconds[name])
        rows.append(
            [
                name,
                f"{acc.lemma:.1f}",
                f"{acc.exact:.1f}",
                f"{bleu(hyp, ref):.2f}",
                f"{acc.bleu_terms:.2f}" if acc.bleu_terms is not None else "-",
                f"{acc.bleu_rest:.2f}" if acc.bleu_rest is not None else "-",
                changed,
                f"{len(src) / best:.1f}",
                f"{min(seconds['none']) / best:.2f}",
            ]
        )
    trained = "trained with terms" if takes_terms(session.tokenizer) else "trained without terms"
    boost = f"glossary_boost {translator.cfg.glossary_boost:g}"
    timing = "CPU time" if args.cpu_time else "wall time"
    print(
        f"{describe_machine()}; {args.threads} thread(s), {timing}, best of {args.rounds}; "
        f"{args.checkpoint} ({trained}, {boost})"
    )
    print(
        f"{sum(has)} of {len(src)} lines hold a term ({acc.terms} terms), {len(glossary)} entries"
    )
    header = ["glossary", "terms lemma %", "exact %", "BLEU", "BLEU, lines with terms",
              "BLEU, other lines", "other lines changed", "lines/s", "speed vs none"]  # fmt: skip
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()

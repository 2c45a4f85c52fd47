"""What the guard's choice among a beam's outputs saves: the glossary guard with and without it.

    python -m scripts.studies.guard_choice CHECKPOINT TERMS.tsv [--rounds 4]

The guard (mt.translation.terms) translates a line with terms and, where the best output
misses one, takes the best other output of the beam that writes it
(mt.translation.terms.preferred); only the lines none of them holds are translated again under
constraints. This study runs, in turns, the lines without a glossary, the guard with that
choice turned off (the best output alone, as the guard had it before) and the guard as it is,
on the same translator, and reports for each the CPU seconds of the process (one thread: the
machine's other jobs and a virtual machine's stolen time move wall time more than CPU time),
the rows the constrained search was given and its seconds; the best round of each is kept.
Term accuracy and BLEU of both guards are printed too (python -m scripts.bench.glossary is the
full table).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import mt.search.dispatch as dispatch
import mt.translation.translator as translator_module
from mt.glossary.accuracy import term_accuracy
from mt.glossary.files import read_glossary
from mt.metrics import bleu
from mt.translation.requests import Plan, Request
from mt.translation.session import Session
from mt.translation.translator import translate_stream
from scripts.common import describe_machine, markdown_table, multi30k_dir, read_lines, say


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", type=Path)
    p.add_argument("glossary", type=Path)
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args()
    torch.set_num_threads(1)
    session = Session([args.checkpoint], "cpu")
    sl, tl = session.source_language(), session.cfg.data.tgt_lang
    glossary = read_glossary(args.glossary, sl, tl)
    src = [x.strip() for x in read_lines(multi30k_dir() / f"{args.split}.{sl}.gz")]
    ref = [x.strip() for x in read_lines(multi30k_dir() / f"{args.split}.{tl}.gz")]
    translator = session.translator()

    counted = {"rows": 0, "seconds": 0.0}
    constrained = dispatch.constrained_beam_search

    def counting(model, src, *rest, **kw):  # noqa: ANN001, ANN202 - a wrapper of the search
        start = time.process_time()
        out = constrained(model, src, *rest, **kw)
        counted["rows"] += src.size(0)
        counted["seconds"] += time.process_time() - start
        return out

    dispatch.constrained_beam_search = counting
    choose = translator_module.preferred

    def best_alone(hyps, texts, r, nbest):  # noqa: ANN001, ANN202 - the choice turned off
        return hyps[:nbest], texts[:nbest]

    arms = {"none": (None, choose), "guard, best output alone": (Plan(), best_alone)}
    arms["guard"] = (Plan(), choose)
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    rows: dict[str, int] = {}
    search_s: dict[str, list[float]] = {name: [] for name in arms}
    outs: dict[str, list[str]] = {}
    say(f"{len(src)} lines, {len(glossary)} entries, {args.rounds} rounds")
    for k in range(args.rounds):
        for name, (plan, pick) in arms.items():
            translator_module.preferred = pick
            given = glossary if plan else None
            reqs = [Request(x, plan=plan or Plan(), glossary=given) for x in src]
            counted.update(rows=0, seconds=0.0)
            start = time.process_time()
            outs[name] = [t.text for t in translate_stream(translator, reqs)]
            seconds[name].append(time.process_time() - start)
            rows[name], search_s[name] = counted["rows"], [*search_s[name], counted["seconds"]]
            say(f"round {k + 1} {name}: {seconds[name][-1]:.2f} s, {rows[name]} constrained rows")
    translator_module.preferred = choose
    table = []
    for name in arms:
        acc = term_accuracy(glossary, src, outs[name], ref)
        best = min(seconds[name])
        table.append([name, f"{acc.lemma:.1f}", f"{acc.exact:.1f}", f"{bleu(outs[name], ref):.2f}",
                      rows[name], f"{min(search_s[name]):.2f}", f"{best:.2f}",
                      f"{min(seconds['none']) / best:.3f}"])  # fmt: skip
    print(f"{describe_machine()}; 1 thread; {args.checkpoint}; {args.rounds} rounds, the best kept")
    header = ["glossary", "terms lemma %", "exact %", "BLEU", "constrained rows",
              "constrained search, CPU s", "CPU s", "speed vs none"]  # fmt: skip
    print(markdown_table(header, table))


if __name__ == "__main__":
    main()

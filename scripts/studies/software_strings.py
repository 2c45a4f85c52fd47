"""Protected spans on real software strings: crashes, spans kept exactly, BLEU and speed,
with protection on and off (`--no-protect`), one model, one thread.

    python -m scripts.studies.software_strings CHECKPOINT DATA_DIR [--rounds 3] [--limit N]

DATA_DIR is scripts/tools/software_strings.py's output: test.jsonl (German source and its gettext
format flags) and test.en (the English msgid, the reference). A line "has spans" when its
source holds any under its flags; it is "kept exactly" when its output holds the same spans,
as a multiset. BLEU (sacrebleu) is on the lines with spans; the references' own kept rate is
printed beside it (translators drop or reorder placeholders too). Speed: the whole test part
translated with protection on and off in alternated rounds (on, off, on, off, ...), each the
median of its rounds, so machine noise hits both alike; wrap the run in `flock` on a shared
machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections import Counter
from pathlib import Path

import torch

from mt.metrics import bleu
from mt.translation.requests import Plan, Request, isolated
from mt.translation.session import Session
from tests.support.span_checks import same_spans, span_counts


def translate(engine, requests: list[Request]) -> tuple[list[str], int, float]:
    """Outputs, lines that failed, seconds (`engine`: a translator and the plan it runs)."""
    translator, plan = engine
    requests = [dataclasses.replace(r, plan=plan) for r in requests]
    start = time.perf_counter()
    out = []
    for k in range(0, len(requests), translator.cfg.buffer_lines):
        out += isolated(translator.translate, requests[k : k + translator.cfg.buffer_lines])
    return [t.text for t in out], sum(1 for t in out if t.error), time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", type=Path)
    p.add_argument("data", type=Path)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--limit", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    items = [json.loads(x) for x in (args.data / "test.jsonl").read_text().splitlines()]
    refs = (args.data / "test.en").read_text().splitlines()
    n = args.limit or len(items)
    items, refs = items[:n], refs[:n]
    requests = [Request(x["src"], formats=tuple(x["format"])) for x in items]
    session = Session([args.checkpoint], "cpu")
    tr = {
        "protect": (session.translator(), Plan(recase=False, keep_numbers=False)),
        "no-protect": (session.translator(), Plan(protect=False, recase=False, keep_numbers=False)),
    }
    outs: dict[str, list[str]] = {}
    crashes: dict[str, int] = {}
    times: dict[str, list[float]] = {k: [] for k in tr}
    for _ in range(args.rounds):
        for name, t in tr.items():
            out, failed, seconds = translate(t, requests)
            outs[name], crashes[name] = out, crashes.get(name, 0) + failed
            times[name].append(seconds)
    with_spans = [i for i, r in enumerate(requests) if span_counts(r.src, r.formats)]
    report = {
        "lines": n,
        "lines_with_spans": len(with_spans),
        "flags": dict(Counter(f for x in items for f in x["format"]).most_common()),
    }

    def kept(texts: list[str]) -> list[int]:
        """The lines with spans whose `texts` hold exactly their source's spans."""
        return [i for i in with_spans if same_spans(texts[i], requests[i].src, requests[i].formats)]

    def share(ids: list[int]) -> str:
        return f"{len(ids)}/{len(with_spans)} = {100 * len(ids) / max(1, len(with_spans)):.2f}%"

    for name, out in outs.items():
        report[name] = {
            "crashed_lines": crashes[name],
            "kept_exactly": share(kept(out)),
            "bleu_lines_with_spans": round(
                bleu([out[i] for i in with_spans], [refs[i] for i in with_spans]), 2
            ),
            "bleu_all": round(bleu(out, refs), 2),
            "seconds_median": round(statistics.median(times[name]), 2),
            "seconds_rounds": [round(x, 2) for x in times[name]],
        }
    report["references_kept_exactly"] = share(kept(refs))
    on, off = report["protect"]["seconds_median"], report["no-protect"]["seconds_median"]
    report["protect_over_no_protect_time"] = round(on / off, 3)
    lost = sorted(set(with_spans) - set(kept(outs["no-protect"])))
    report["examples_no_protect_broke"] = [
        {"src": requests[i].src, "no-protect": outs["no-protect"][i], "protect": outs["protect"][i]}
        for i in lost[:5]
    ]
    print(json.dumps(report, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()

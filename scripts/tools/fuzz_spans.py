"""Fuzz protected spans: random lines of tags, entities, placeholders and empty elements,
translated by a checkpoint, checked for one output line each and the source's spans exactly.

    python -m scripts.tools.fuzz_spans CHECKPOINT [--lines 10000] [--seed 1] [--html]

Lines nest elements (`<b><i>%d</i></b>`), leave them empty (`<i></i>`), put spans side by
side and against punctuation (`%s%d.`, `»{0}«`), and are sometimes only spans. Each line is
translated through the real `mt translate` path (`translate_stream`, an HTML plan with
--html), in buffers as the CLI does; a line that comes back with an
error, a line count that differs, or a span multiset that differs is a failure, printed with
its line. The exit code is the number of failures (capped at 100). tests/unit/test_fuzz.py drives
`fuzz_line` with hypothesis on the tiny model.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from scripts.span_checks import same_spans, span_counts

WORDS = ["Datei", "Ein", "Hund", "läuft", "öffnen", "Einträge", "Kosten", "zur", "der", "und",
         "Einberufung", "nicht", "gefunden", "Fehler", "Spieler", "zwei", "im", "Park"]  # fmt: skip
SPANS = ["%s", "%d", "%1$s", "%-5.2f", "%%", "%(name)s", "%{user}", "{0}", "{name}",
         "{{title}}", "{0:>8}", "$HOME", "${VAR}", "$color", "&amp;", "&#169;", "&lt;",
         "https://x.de/a?b=1", "www.x.org", "ana@b.de", "%1", "%L2", "%qE", "%wu",
         "{n, plural, one {# Datei} other {# Dateien}}"]  # fmt: skip
TEXT_ONLY = ["<%= x %>", "<Pfad>", "%<", "%>", "a < b", "%<count>d"]  # not well-formed HTML
PUNCT = [".", ",", ":", ";", "!", "?", "(", ")", "»", "«", "'", '"', "-", "/", "…"]
TAGS = ["b", "i", "u", "em", 'span color="$color"', 'a href="URL"', 'a href="https://x.de"']
VOIDS = ["<br/>", "<br>", '<img src="x.png"/>', "<hr>"]


def fuzz_line(rng: random.Random, html: bool = False, depth: int = 0) -> str:
    """One random line (or an element's content, below depth 0): 0 to 7 items, glued or
    spaced at random."""
    out = ""
    for _ in range(rng.randint(0, 7 if depth == 0 else 3)):
        kind = rng.random()
        if kind < 0.3:
            item = rng.choice(WORDS)
        elif kind < 0.55:
            item = rng.choice(SPANS + ([] if html else TEXT_ONLY))
        elif kind < 0.7:
            item = rng.choice(PUNCT)
        elif kind < 0.92 and depth < 3:
            tag = rng.choice(TAGS)
            inner = fuzz_line(rng, html, depth + 1)
            item = f"<{tag}>{inner}</{tag.split()[0]}>"
        else:
            item = rng.choice(VOIDS)
        out += ("" if rng.random() < 0.35 else " ") + item
    return out.strip() if depth == 0 else out


def check(translator, lines: list[str], html: bool) -> list[str]:
    """Failures (one line each) of translating `lines` as `mt translate` does."""
    from mt.translation.requests import Plan, Request
    from mt.translation.translator import translate_stream

    if html:
        asked = [
            Request(x, where=f"fuzz:{i}", plan=Plan(html=True)) for i, x in enumerate(lines, 1)
        ]
        outs = list(translate_stream(translator, asked))
    else:
        outs = list(translate_stream(translator, lines, Plan(recase=False)))
    if len(outs) != len(lines):
        return [f"{len(lines)} lines in, {len(outs)} out"]
    bad = []
    for k, (line, t) in enumerate(zip(lines, outs)):
        if t.error:
            bad.append(f"line {k}: {t.error}: {line!r}")
        elif "\n" in t.text or not all(same_spans(x, line) for x in t.texts):
            bad.append(f"line {k}: spans differ: {line!r} -> {t.text!r}")
    return bad


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--lines", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--html", action="store_true")
    p.add_argument("--greedy", action="store_true")
    args = p.parse_args()
    import torch

    from mt.translation.session import DecodeOptions, Session

    torch.set_num_threads(1)
    session = Session([args.checkpoint], "cpu")
    translator = session.translator(DecodeOptions(greedy=args.greedy or None))
    rng = random.Random(args.seed)
    lines = [fuzz_line(rng, args.html) for _ in range(args.lines)]
    start = time.perf_counter()
    bad = check(translator, lines, args.html)
    for b in bad[:50]:
        print(b)
    with_spans = sum(1 for x in lines if span_counts(x))
    print(f"{len(lines)} fuzzed lines ({with_spans} with spans), {len(bad)} failures, "
          f"{time.perf_counter() - start:.0f} s")  # fmt: skip
    sys.exit(min(len(bad), 100))


if __name__ == "__main__":
    main()

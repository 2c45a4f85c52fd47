"""Fuzz protected spans: random lines of tags, entities, placeholders and empty elements,
translated by a checkpoint, checked for one output line each and the source's spans exactly.

    python -m scripts.tools.fuzz_spans CHECKPOINT [--lines 10000] [--seed 1] [--html]

Lines nest elements (`<b><i>%d</i></b>`), leave them empty (`<i></i>`), put spans side by
side and against punctuation (`%s%d.`, `»{0}«`), and are sometimes only spans. Each line is
translated through the real `mt translate` path (`translate_stream`, an HTML plan with
--html), in buffers as the CLI does; a line that comes back with an
error, a line count that differs, or a span multiset that differs is a failure, printed with
its line. The exit code is the number of failures (capped at 100). The generator and the check
are tests/support/span_inputs.py's `fuzz_line` and tests/support/span_checks.py's
`span_failures`, which tests/unit/test_fuzz.py drives with hypothesis on the tiny model.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from tests.support.span_checks import span_counts, span_failures
from tests.support.span_inputs import fuzz_line


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
    bad = span_failures(translator, lines, args.html)
    for b in bad[:50]:
        print(b)
    with_spans = sum(1 for x in lines if span_counts(x))
    print(f"{len(lines)} fuzzed lines ({with_spans} with spans), {len(bad)} failures, "
          f"{time.perf_counter() - start:.0f} s")  # fmt: skip
    sys.exit(min(len(bad), 100))


if __name__ == "__main__":
    main()

"""Hunt the span ban for rows it judges wrongly: random rows that search could write, each step
checked against a piece-by-piece scan of the vocabulary with `find_spans`.

    python -m scripts.tools.ban_hunt [--rows 3000] [--seed 1] [--checkpoint CHECKPOINT]

A row grows one piece at a time, each piece one that the scan allows after the row so far (what
search may write: no span the sentence is not allowed). At every step the index
(`mt.spans.index.PieceIndex`) must ban, after the row's open text, exactly the pieces the scan
finds completing a span not allowed, but those banned after any row (`alone_spans`). The scan
is tests/support/ban_oracle.py and the vocabulary tests/support/span_inputs.py's `DENSE`
(pieces of every syntax, made to nest: an ICU argument inside a tag's attribute, a printf after
a digit, runs of one character before a span under way), which the tests share; or a
checkpoint's target pieces.
Each wrong step is printed with its row; the exit code is their number (capped at 100).
tests/unit/test_span_index.py drives the same check with hypothesis.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from tests.support.ban_oracle import scan, wrong
from tests.support.span_inputs import ALLOWED, DENSE


def hunt(texts: list[str], rows: int, seed: int, max_len: int = 15) -> tuple[int, list[str]]:
    """(steps checked, what was wrong) over `rows` random rows of `texts`."""
    from mt.spans.index import PieceIndex

    index = PieceIndex(texts)
    rng = random.Random(seed)
    steps, bad = 0, []
    for _ in range(rows):
        ok = tuple(rng.sample(ALLOWED, rng.randrange(0, 3)))
        row = ""
        for _ in range(rng.randrange(1, max_len + 1)):
            banned = scan(texts, row, ok)
            steps += 1
            if (msg := wrong(index, row, ok, banned)) is not None:
                bad.append(msg)
            free = [v for v, t in enumerate(texts) if t and v not in banned]
            if not free:
                break
            row += texts[rng.choice(free)]
    return steps, bad


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=3000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--checkpoint", type=Path, help="its target pieces instead of DENSE")
    args = p.parse_args()
    texts = DENSE
    if args.checkpoint:
        from mt.checkpoint import load_model
        from mt.spans.index import piece_texts

        texts = piece_texts(load_model(args.checkpoint).tokenizer)
    start = time.perf_counter()
    steps, bad = hunt(texts, args.rows, args.seed)
    for b in bad[:50]:
        print(b)
    print(f"{args.rows} rows, {steps} steps over {len(texts)} pieces: {len(bad)} wrong, "
          f"{time.perf_counter() - start:.0f} s")  # fmt: skip
    sys.exit(min(len(bad), 100))


if __name__ == "__main__":
    main()

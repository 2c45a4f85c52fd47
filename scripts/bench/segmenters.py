"""Which sentence segmenter `mt` uses: pysbd or sentencex, measured on Multi30k paragraphs.

Five consecutive test_2016_flickr sentences are joined with one space into a paragraph (what a
user pastes); each segmenter splits it, and we count the paragraphs whose split gives back the
five sentences exactly, the sentences recovered exactly, and the time per paragraph. A sentence
of the test set without final punctuation cannot be found by any segmenter (nothing marks its
end), so the ceiling is the share of paragraphs whose first four sentences end in `.!?`.
pysbd has no Czech rules; it is run with Slovak's (the closest it has) for cs.

    python -m scripts.bench.segmenters [--data DIR] [--out results.md]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from scripts import common

LANGS = ("de", "en", "fr", "cs")
PYSBD_LANG = {"cs": "sk"}


def segmenters(lang: str) -> dict[str, Callable[[str], list[str]]]:
    import pysbd
    import sentencex

    sbd = pysbd.Segmenter(language=PYSBD_LANG.get(lang, lang), clean=False)
    return {
        "pysbd": lambda text: [s.strip() for s in sbd.segment(text) if s.strip()],
        "sentencex": lambda text: [s.strip() for s in sentencex.segment(lang, text) if s.strip()],
    }


def paragraphs(lines: list[str], size: int = 5) -> list[list[str]]:
    return [lines[i : i + size] for i in range(0, len(lines) - size + 1, size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=common.multi30k_dir())
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for lang in LANGS:
        lines = [x.strip() for x in common.read_lines(args.data / f"test_2016_flickr.{lang}.gz")]
        paras = paragraphs(lines)
        ceiling = sum(all(s[-1] in ".!?" for s in p[:-1]) for p in paras) / len(paras)
        for name, split in segmenters(lang).items():
            start = time.perf_counter()
            outs = [split(" ".join(p)) for p in paras]
            ms = (time.perf_counter() - start) * 1000 / len(paras)
            whole = sum(o == p for o, p in zip(outs, paras)) / len(paras)
            found = sum(len(set(o) & set(p)) for o, p in zip(outs, paras))
            total = sum(len(p) for p in paras)
            rows.append(
                [lang, name, f"{100 * whole:.1f}", f"{100 * found / total:.1f}",
                 f"{100 * ceiling:.1f}", f"{ms:.2f}"]
            )  # fmt: skip
            common.say(f"{lang} {name}: {rows[-1][2:]}")
    table = common.markdown_table(
        ["lang", "segmenter", "paragraphs exact %", "sentences exact %", "ceiling %", "ms/para"],
        rows,
        "llrrrr",
    )
    report = f"{table}\n\n{common.describe_machine()}\n"
    print(report)
    if args.out is not None:
        common.write_text(args.out, report)


if __name__ == "__main__":
    main()

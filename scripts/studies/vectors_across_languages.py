"""One word in several languages through a multilingual model's encoder: do translations of the
word come together layer by layer? (README: Many languages; docs/many-languages.md.)

Takes the first `--captions` test_2016_flickr captions whose four versions all hold the word
(dog / Hund / chien / pes), follows the word with `mt vectors` (mt.views.vectors), prints the
mean distance between each language pair's occurrences in the same caption at each depth, and
draws the picture.

    python -m scripts.studies.vectors_across_languages runs/multi30k_multi/best.pt --data $MT_DATA \
        -o docs/vectors_dog_languages.png
"""

from __future__ import annotations

import argparse
import itertools
import re
from pathlib import Path

import numpy as np
import torch

from mt.checkpoint import load_model
from mt.data.corpus import read_lines, text_path
from mt.views.vectors import word_vectors
from scripts.common import markdown_table

WORDS = {"de": "Hund", "fr": "chien", "cs": "pes", "en": "dog"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint")
    p.add_argument("--data", required=True)
    p.add_argument("--captions", type=int, default=3)
    p.add_argument("-o", "--output", help="PNG picture")
    args = p.parse_args()
    torch.set_num_threads(1)
    langs = list(WORDS)
    lines = {
        lang: read_lines(text_path(Path(args.data), "test_2016_flickr", lang)) for lang in langs
    }
    has = {lang: re.compile(rf"(?<!\w){WORDS[lang]}(?!\w)") for lang in langs}
    chosen = [i for i in range(len(lines["en"])) if all(has[x].search(lines[x][i]) for x in langs)]
    chosen = chosen[: args.captions]
    sentences = [lines[lang][i] for i in chosen for lang in langs]
    loaded = load_model(args.checkpoint)
    found = word_vectors(loaded.model, loaded.tokenizer, sentences, list(WORDS.values()))
    assert len(found.occurrences) == len(sentences), "one occurrence per sentence expected"
    vectors = np.array([o.vectors for o in found.occurrences])  # (captions * langs, depths, D)
    pairs = list(itertools.combinations(range(len(langs)), 2))
    rows = []
    for k, depth in enumerate(found.depths):
        x = vectors[:, k, :]
        cells = []
        for a, b in pairs:
            d = [
                np.linalg.norm(x[c * len(langs) + a] - x[c * len(langs) + b])
                for c in range(len(chosen))
            ]
            cells.append(f"{np.mean(d):.2f}")
        rows.append([depth, *cells])
    header = ["depth", *[f"{langs[a]}-{langs[b]}" for a, b in pairs]]
    print(f"captions {', '.join(str(i + 1) for i in chosen)} of test_2016_flickr")
    print(markdown_table(header, rows))
    if args.output:
        from mt.plot import save_figure, vectors_figure

        save_figure(vectors_figure(found), Path(args.output))
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

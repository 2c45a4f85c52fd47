"""Write Multi30k as the text files `mt` recipes read: {train,val,test_2016_flickr}.{lang}.gz.

With internet, the corpus comes from the Hugging Face hub through `datasets` (default
`bentrevett/multi30k`, columns `en` and `de`, splits train/validation/test). Offline, point
`--from-disk` at a dataset written by `datasets.save_to_disk`, or skip this script and set
MT_DATA to a folder that already holds the files.

    python -m scripts.tools.get_multi30k --out data/multi30k
    MT_DATA=data/multi30k mt train configs/multi30k_de_en.yaml
"""

from __future__ import annotations

import argparse
import gzip
import os
from pathlib import Path

SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}


def write_split(rows, langs: list[str], out: Path, name: str) -> int:
    files = {
        lang: gzip.open(out / f".{name}.{lang}.gz.tmp", "wt", encoding="utf-8") for lang in langs
    }
    n = 0
    with_translation = None
    for row in rows:
        if with_translation is None:
            with_translation = "translation" in row
        record = row["translation"] if with_translation else row
        for lang in langs:
            files[lang].write(record[lang].replace("\n", " ").strip() + "\n")
        n += 1
    for lang, f in files.items():
        f.close()
        os.replace(out / f".{name}.{lang}.gz.tmp", out / f"{name}.{lang}.gz")
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hub", default="bentrevett/multi30k", help="datasets hub name")
    parser.add_argument("--from-disk", type=Path, help="a folder written by save_to_disk")
    parser.add_argument("--langs", nargs="+", default=["de", "en"])
    parser.add_argument("--out", type=Path, default=Path("data/multi30k"))
    args = parser.parse_args()

    import datasets

    if args.from_disk:
        ds = datasets.load_from_disk(str(args.from_disk))
    else:
        ds = datasets.load_dataset(args.hub)
    args.out.mkdir(parents=True, exist_ok=True)
    for split, name in SPLITS.items():
        if split not in ds:
            raise SystemExit(f"get_multi30k: the dataset has no split '{split}'")
        n = write_split(ds[split], args.langs, args.out, name)
        print(f"{args.out}/{name}.{{{','.join(args.langs)}}}.gz: {n} sentence pairs")


if __name__ == "__main__":
    main()

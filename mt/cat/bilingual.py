"""A small TMX or XLIFF file read whole as a test set: its pairs, the wanted side first (`mt
eval --src FILE.tmx`, a watched set of `train.watch`). Apart from the package's helpers, which
the readers import, so that the package imports none of them."""

from __future__ import annotations

from pathlib import Path

from mt.cat import SUFFIXES, format_of
from mt.cat.tmx import tmx_pairs
from mt.cat.xliff import xliff_pairs
from mt.errors import MtError


def read_bilingual(path: Path, src_lang: str, tgt_lang: str) -> tuple[list[str], list[str]]:
    """All segment pairs of a (small) TMX or XLIFF file, `src_lang` side first: a test set."""
    fmt = format_of(path)
    if fmt is None:
        raise MtError(f"{path}: not a TMX or XLIFF file name ({', '.join(SUFFIXES)})")
    read = tmx_pairs if fmt == "tmx" else xliff_pairs
    src: list[str] = []
    tgt: list[str] = []
    for s, t in read(path, src_lang, tgt_lang):
        src.append(s)
        tgt.append(t)
    if not src:
        raise MtError(f"{path}: no segment pairs")
    return src, tgt

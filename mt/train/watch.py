"""Watched dev sets (`train.watch`): the general domain scored beside a fine-tuning's own.

A fine-tuning run's dev set is the new domain's; what the model forgets of the old one shows
only on the old one's text. Each `train.watch` entry names such a set by its files (text, `.gz`
too, or a TMX/XLIFF file with both sides, as `mt eval --src` reads them). It is read and
encoded once when the run starts, into a token store held in memory (the dev loss's batches),
and scored at every evaluation beside `data.valid` (mt/train/evaluation.py), under its name:
`watch_bleu/NAME`, `watch_chrf/NAME`, `watch_loss/NAME`. It counts into no `dev_*` metric, so
it never picks `best.pt` by itself; a `keep_within` on it makes it a bound of the rule that does
(mt/train/best.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mt.cat import FORMATS, format_of
from mt.cat.bilingual import read_bilingual
from mt.config import DataConfig, WatchConfig
from mt.config_file import expand_env
from mt.data.build import masked
from mt.data.corpus import read_lines
from mt.data.store import TokenStore, token_dtype
from mt.errors import MtError
from mt.tokenizer import Tokenizer
from mt.train.evaluation import DevSet


def read_pairs(w: WatchConfig, where: str, src_lang: str, tgt_lang: str) -> tuple[list, list]:
    """The raw (sources, references) of one watch entry, its first `max_examples` pairs."""
    src = Path(expand_env(w.src))
    try:
        if format_of(src) is not None:
            sources, refs = read_bilingual(src, src_lang, tgt_lang)
        else:
            ref = Path(expand_env(w.ref))
            sources, refs = read_lines(src), read_lines(ref)
            if len(sources) != len(refs):
                raise MtError(f"{src} has {len(sources):,} lines but {ref} has {len(refs):,}")
    except MtError as err:
        raise MtError(f"{where}: {err}") from None
    if not sources:
        raise MtError(f"{where}: {src} holds no lines")
    n = w.max_examples or len(sources)
    return sources[:n], refs[:n]


def memory_store(tok: Tokenizer, sources: list[str], refs: list[str], protect: bool) -> TokenStore:
    """`sources` and `refs` encoded as data preparation encodes a dev set (no length filter;
    spans masked with `data.protect`), in a token store held in memory."""
    if protect:
        sources, refs = masked(sources, refs)
    dtype = token_dtype(max(tok.src_vocab_size, tok.tgt_vocab_size))
    arrays = {}
    for side, ids in (("src", tok.src.encode(sources)), ("tgt", tok.tgt.encode(refs))):
        lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
        flat = np.fromiter((i for row in ids for i in row), dtype, count=int(lengths.sum()))
        arrays[side] = (flat, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), lengths)
    (src, src_idx, ls), (tgt, tgt_idx, lt) = arrays["src"], arrays["tgt"]
    sizes = np.minimum(np.maximum(ls, lt) + 1, np.iinfo(np.uint16).max).astype(np.uint16)
    meta = {"pairs": len(sources), "memory": True}
    return TokenStore(Path("<memory>"), meta, src, tgt, src_idx, tgt_idx, sizes)


@dataclass
class Watched:
    """One watch entry's pairs, read before data preparation so a wrong file fails at once."""

    entry: WatchConfig
    sources: list[str]
    references: list[str]


def read_watched(entries: list[WatchConfig], d: DataConfig) -> list[Watched]:
    """The raw pairs of every `train.watch` entry (TMX/XLIFF read in `d`'s language pair)."""
    out = []
    for i, w in enumerate(entries):
        sources, refs = read_pairs(w, f"train.watch[{i}] ({w.name})", d.src_lang, d.tgt_lang)
        out.append(Watched(w, sources, refs))
    return out


def watch_sets(watched: list[Watched], tok: Tokenizer, d: DataConfig) -> list[DevSet]:
    """The watched sets encoded with the run's tokenizer, each named as its entry."""
    out = []
    for w in watched:
        store = memory_store(tok, w.sources, w.references, d.protect)
        codes = format_of(Path(expand_env(w.entry.src))) in FORMATS
        out.append(DevSet(store, w.sources, w.references, None, w.entry.name, codes=codes))
    return out

"""A run's data: its tokenizer (trained on a sample when the run has none), the training text's
case table and length bounds (`mt.textstats`, counted once into `textstats.json`), and a token
store per corpus, built where missing (`mt.data.build`) or only opened.

The tokenizer, when the run has none yet, trains on a uniform sample of
`tokenizer.input_sentence_size` sentences drawn in one streaming pass (reservoir sampling), so
it never needs the corpus in memory.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

import numpy as np

from mt.atomic import write_bytes
from mt.config import DataConfig, TokenizerConfig
from mt.data.augment import Augment
from mt.data.build import masked, open_or_build, read_ahead
from mt.data.cache import Filter, Sampling, cache_dir
from mt.data.corpus import (
    Source,
    directions,
    line_chunks,
    pair_chunks,
    split_sources,
    train_sources,
)
from mt.data.mixing import always_allowed, pair_weights, piece_counts
from mt.data.store import TokenStore
from mt.data.terms import LEXICON_FILE, Terms
from mt.errors import MtError
from mt.glossary.inline import MARKERS
from mt.glossary.lexicon import Lexicon, learn
from mt.languages import Languages
from mt.spans import reserved_symbols
from mt.textstats import MIN_CHARS, TextStats, count_stats
from mt.tokenizer import Tokenizer, train_tokenizer

STATS_FILE = "textstats.json"  # the run's case table and length bounds


def sample_pairs(
    sources: list[Source], n: int, limit: int, seed: int
) -> tuple[list[str], list[str]]:
    """A uniform sample of `n` pairs over all `sources` in one pass (reservoir sampling).

    Memory holds the sample only; per chunk the replacement positions are drawn with numpy, so
    the pass costs little more than reading.
    """
    rng = np.random.default_rng(seed)
    src: list[str] = []
    tgt: list[str] = []
    seen = 0
    for source in sources:
        for s, t in read_ahead(pair_chunks(source, limit=limit)):
            fill = min(max(n - len(src), 0), len(s))
            src += s[:fill]
            tgt += t[:fill]
            seen += fill
            rest = len(s) - fill
            if rest:
                # Item k (0-based over the whole stream) replaces slot j ~ U[0, k] when j < n.
                k = seen + np.arange(rest)
                j = (rng.random(rest) * (k + 1)).astype(np.int64)
                for i in np.nonzero(j < n)[0]:
                    src[j[i]], tgt[j[i]] = s[fill + i], t[fill + i]
                seen += rest
    return src, tgt


def prepare_tokenizer(
    d: DataConfig, t: TokenizerConfig, seed: int, run_dir: Path, log: bool = True
) -> Tokenizer:
    """The run's tokenizer: loaded from `run_dir`, else trained as `t` says on a sample of the
    data section's corpora (drawn with `seed`, train.seed) and saved there."""
    tok = Tokenizer.load(run_dir)
    if tok is not None:
        return tok
    pairs = t.input_sentence_size // 2 if t.joint else t.input_sentence_size
    start = time.perf_counter()
    if d.pairs:
        src, tgt = sample_languages(d, max(pairs, 1), seed)
    else:
        src, tgt = sample_pairs(train_sources(d), max(pairs, 1), d.max_train_examples, seed)
    sampled = time.perf_counter() - start
    if d.protect:  # the tokenizer learns the text it will encode: spans masked
        src, tgt = masked(src, tgt)
    langs = [lang for pair in directions(d) for lang in pair] if d.pairs else None
    reserved = (reserved_symbols() if d.protect else []) + (list(MARKERS) if d.terms.share else [])
    tok = train_tokenizer(src, tgt, t, reserved or None, list(dict.fromkeys(langs or [])) or None)
    tok.save(run_dir)
    if log:
        print(
            f"tokenizer: {t.type} {tok.src_vocab_size:,} pieces"
            + ("" if tok.joint else f" / {tok.tgt_vocab_size:,}")
            + f", trained on {len(src):,} sampled pairs (sampling {sampled:.1f} s, training "
            f"{time.perf_counter() - start - sampled:.1f} s) -> {run_dir}",
            file=sys.stderr,
            flush=True,
        )
    return tok


def prepare_terms(d: DataConfig, seed: int, run_dir: Path, build: bool, log: bool) -> Terms | None:
    """The run's term annotator (`data.terms`; None when its share is 0): the lexicon read
    from `run_dir`, else (`build`) learnt on a uniform sample of `data.terms.lexicon_lines`
    training pairs (drawn with `seed`) and saved there."""
    t = d.terms
    if not t.share:
        return None
    path = run_dir / LEXICON_FILE
    if path.is_file():
        return Terms(Lexicon.load(path), t.share, t.max_terms, seed, t.mask)
    if not build:
        raise MtError(f"{path}: no term lexicon (the preparing process did not write it)")
    start = time.perf_counter()
    src, tgt = sample_pairs(train_sources(d), t.lexicon_lines, d.max_train_examples, seed)
    lexicon = learn(src, tgt, d.src_lang, d.tgt_lang, t.min_dice, t.min_count, t.skip_common)
    if not len(lexicon):
        raise MtError(
            f"data.terms: no term pairs in {len(src):,} training pairs (data.terms.min_dice "
            f"{t.min_dice}, min_count {t.min_count}, skip_common {t.skip_common}); lower them, "
            "or set data.terms.share to 0"
        )
    lexicon.save(path)
    if log:
        print(
            f"terms: {len(lexicon):,} term pairs of {len(lexicon.pairs):,} source stems, found "
            f"on {len(src):,} sampled pairs ({time.perf_counter() - start:.1f} s) -> {path}",
            file=sys.stderr,
            flush=True,
        )
    return Terms(lexicon, t.share, t.max_terms, seed, t.mask)


def sample_languages(d: DataConfig, n: int, seed: int) -> tuple[list[str], list[str]]:
    """The tokenizer's sample for several pairs, balanced per language: each language gets
    the same share of sentences (a large pair must not crowd a small language's pieces out),
    drawn from the pairs that hold it and without repeats (Multi30k's English is the same
    text in three pairs). Returned as two halves of one list, as a joint model reads them."""
    sources = train_sources(d)
    langs = list(dict.fromkeys(lang for s in sources for lang in (s.src_lang, s.tgt_lang)))
    share = max(2 * n // len(langs), 1)
    text: list[str] = []
    for k, lang in enumerate(langs):
        holding = [s for s in sources if lang in (s.src_lang, s.tgt_lang)]
        seen: dict[str, None] = {}
        for source in holding:
            src, tgt = sample_pairs(
                [source], share // len(holding) + 1, d.max_train_examples, seed + k
            )
            seen.update(dict.fromkeys(src if source.src_lang == lang else tgt))
        text += list(seen)[:share]
    half = len(text) // 2
    return text[:half], text[half:]


def prepare_text_stats(d: DataConfig, run_dir: Path, build: bool, log: bool) -> TextStats | None:
    """The run's case table and length bounds: read from `run_dir`, else (`build`) counted on
    the first lines of each training corpus and saved there; None when neither."""
    path = run_dir / STATS_FILE
    if path.is_file():
        try:
            return TextStats.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, TypeError, AttributeError, IndexError):
            raise MtError(
                f"{path}: not a readable statistics file; delete it to count again"
            ) from None
    if not build:
        return None
    start = time.perf_counter()
    sources = train_sources(d)
    stats = count_stats(
        (s.src_lang, s.tgt_lang, pair_chunks(s, limit=d.max_train_examples)) for s in sources
    )
    text = json.dumps(stats.to_dict(), ensure_ascii=False)
    write_bytes(path, text.encode("utf-8"), "the text statistics")
    if log:
        words = ", ".join(f"{lang} {len(w):,}" for lang, w in stats.case.items())
        print(
            f"text statistics: case table ({words} words), length bounds of "
            f"{len(stats.lengths)} direction(s) ({time.perf_counter() - start:.1f} s) -> {path}",
            file=sys.stderr,
            flush=True,
        )
    return stats


def count_files(source: Path, target: Path | None, src_lang: str, tgt_lang: str) -> TextStats:
    """The statistics of a text file (`mt text-stats`): the case table of `source`, and the
    length bounds when `target` (its translation, line by line) is given."""
    chunks = line_chunks(source)
    if target is None:
        stats = count_stats([(src_lang, tgt_lang, ((c, []) for c in chunks))])
    else:
        stats = count_stats([(src_lang, tgt_lang, _paired(source, target))])
        if f"{src_lang}-{tgt_lang}" not in stats.lengths:
            raise MtError(
                f"{source}: too few lines of {MIN_CHARS} characters or more for length bounds "
                "(200 needed)"
            )
    if not stats.case.get(src_lang):
        raise MtError(f"{source}: no words to count (an empty file?)")
    return stats


def _paired(source: Path, target: Path) -> Iterator[tuple[list[str], list[str]]]:
    """The lines of two files side by side, a chunk at a time; files of unequal length are
    an error."""
    seen = 0
    for src, tgt in zip_longest(line_chunks(source), line_chunks(target), fillvalue=[]):
        seen += min(len(src), len(tgt))
        if len(src) != len(tgt):
            raise MtError(f"{source} and {target} differ in length after line {seen}")
        yield src, tgt


@dataclass
class Prepared:
    """What training reads: the tokenizer, a store per training corpus (per direction with
    data.pairs), and a dev store per direction, named as `sources` and `valid_sources`."""

    tokenizer: Tokenizer
    train: list[TokenStore]
    weights: list[float]
    valid: list[TokenStore]
    sources: list[Source]
    valid_sources: list[Source]
    # tokenizer.sample_alpha: per copy, the training stores segmented by sampling
    sampled: list[list[TokenStore]] = field(default_factory=list)


def prepare(
    d: DataConfig,
    t: TokenizerConfig,
    seed: int,
    run_dir: Path,
    build: bool = True,
    log: bool = True,
    tokenizer: Tokenizer | None = None,
) -> Prepared:
    """Tokenizer and stores for the data section `d`, built where missing (`build`) or only
    opened. `t` is the tokenizer section (how a missing tokenizer is trained, and subword
    sampling's copies); `seed` (train.seed) draws the tokenizer's sample, the augmentation and
    the term annotations (`data.terms`).

    `mt prepare` and the first `mt train` build; under torchrun each node's local rank 0
    builds or checks the node's stores with the `tokenizer` global rank 0 sent it, and the
    node's other ranks only open them, so every process of a node maps the same files.
    """
    if tokenizer is not None:
        tok = tokenizer
    elif build:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise MtError(f"{run_dir}: cannot create the run directory ({err.strerror})") from None
        tok = prepare_tokenizer(d, t, seed, run_dir, log)
    else:
        loaded = Tokenizer.load(run_dir)
        if loaded is None:
            raise MtError(f"{run_dir}: no tokenizer (the preparing process did not write it)")
        tok = loaded
    if tokenizer is None:  # a given tokenizer brings global rank 0's (mt/train/nodes.py)
        tok.text_stats = prepare_text_stats(d, run_dir, build, log)
    cache = cache_dir(d, run_dir)
    f = Filter(d.max_len, d.max_len_ratio)
    sources = train_sources(d)
    aug = Augment.from_config(d.augment, seed)
    terms = prepare_terms(d, seed, run_dir, build, log)
    limit = d.max_train_examples
    train = [
        open_or_build(s, tok, cache, f, limit, build, log, d.protect, None, aug, terms)
        for s in sources
    ]
    sampled = []  # tokenizer.sample_alpha: the training stores again, segmented by sampling
    for c in range(t.sample_copies if t.sample_alpha else 0):
        how = Sampling(t.sample_alpha, c)
        sampled.append(
            [
                open_or_build(s, tok, cache, f, limit, build, log, d.protect, how, aug, terms)
                for s in sources
            ]
        )
    valid_sources = split_sources(d, d.valid)
    valid = [
        open_or_build(v, tok, cache, None, d.max_valid_examples, build, log, d.protect)
        for v in valid_sources
    ]
    weights = [s.weight for s in sources]
    if d.pairs:
        weights = pair_weights([len(s) for s in train], d.sampling_temperature)
        counts = piece_counts(tok, train, sources)
        tok.languages = Languages(directions(d), d.lang_token, counts, always_allowed(tok))
    return Prepared(tok, train, weights, valid, sources, valid_sources, sampled)

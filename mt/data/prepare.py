"""Turn raw corpora into token stores: stream, encode on all cores, filter, append.

Peak memory does not grow with the corpus: text is read `CHUNK` pairs at a time, encoded with
sentencepiece's batch API (C++ threads over all cores) while the next chunk is read, converted to
flat numpy arrays and appended to the store. The tokenizer, when the run has none yet, trains on
a uniform sample of `tokenizer.input_sentence_size` sentences drawn in one streaming pass
(reservoir sampling), so it never needs the corpus in memory either.
"""

from __future__ import annotations

import itertools
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import sentencepiece as spm

from mt.config import Config, DataConfig
from mt.data.augment import Augment
from mt.data.cache import build_lock, cache_dir, store_folder
from mt.data.corpus import Chunk, Source, directions, pair_chunks, split_sources, train_sources
from mt.data.mixing import always_allowed, pair_weights, piece_counts
from mt.data.store import StoreError, StoreWriter, TokenStore, token_dtype
from mt.errors import MtError
from mt.languages import Languages
from mt.progress import Progress
from mt.spans import mask_pair, reserved_symbols
from mt.tokenizer import Tokenizer, train_tokenizer

FILTERS = ("empty", "too_long", "ratio")


@dataclass(frozen=True)
class Filter:
    """Which training pairs to drop; lengths count the EOS each side gets in training."""

    max_len: int
    max_ratio: float


@dataclass(frozen=True)
class Sampling:
    """Subword regularisation (`tokenizer.sample_alpha`): copy number `copy` of the training
    text, each sentence segmented by sampling from sentencepiece's lattice (nbest -1) with
    `alpha` (unigram: the smoothing of the piece probabilities; bpe: the BPE-dropout rate)."""

    alpha: float
    copy: int


def drop_reasons(src_len: np.ndarray, tgt_len: np.ndarray, f: Filter) -> np.ndarray:
    """Per pair 0 (kept) or 1 + the index in FILTERS of the first filter that drops it.

    Lengths are raw token counts; each side gets one EOS in training, counted here.
    """
    ls, lt = src_len.astype(np.int64) + 1, tgt_len.astype(np.int64) + 1
    reason = np.zeros(len(ls), np.int8)
    ratio = np.maximum(ls, lt) > f.max_ratio * np.minimum(ls, lt)
    reason[ratio] = 3
    reason[(ls > f.max_len) | (lt > f.max_len)] = 2
    reason[(src_len == 0) | (tgt_len == 0)] = 1
    return reason


def threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _flat(ids: list[list[int]], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """sentencepiece's nested lists as (flat ids, lengths) without a Python loop per token."""
    lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype, count=int(lengths.sum()))
    return flat, lengths


def _read_ahead(chunks: Iterator[Chunk], depth: int = 2) -> Iterator[Chunk]:
    """Yield from `chunks`, read by a thread one or two chunks ahead (reading overlaps encoding)."""
    q: queue.Queue[tuple[str, object]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def work() -> None:
        try:
            for c in chunks:
                if stop.is_set():
                    return
                q.put(("chunk", c))
            q.put(("end", None))
        except BaseException as err:  # re-raised in the consumer, where the user sees it
            q.put(("error", err))

    t = threading.Thread(target=work, daemon=True)
    t.start()
    try:
        while True:
            kind, value = q.get()
            if kind == "end":
                return
            if kind == "error":
                raise value  # type: ignore[misc]
            yield value  # type: ignore[misc]
    finally:
        stop.set()
        while t.is_alive():  # unblock a reader waiting on a full queue
            try:
                q.get(timeout=0.1)
            except queue.Empty:
                pass


def build_store(
    source: Source,
    tokenizer: Tokenizer,
    folder: Path,
    f: Filter | None,
    limit: int = 0,
    n_threads: int = 0,
    log: bool = True,
    protect: bool = False,
    sampling: Sampling | None = None,
    augment: Augment | None = None,
) -> TokenStore:
    """Read, encode, filter and write one corpus into a store at `folder`; with `augment`,
    a share of the pairs is changed first (mt.data.augment); with `protect`,
    spans are masked on both sides first (`mt.spans.mask_pair`); with `sampling`, each
    sentence's segmentation is drawn (one thread from a seed per copy, so a copy built again
    is the same)."""
    encode: dict = {"num_threads": n_threads or threads()}
    if sampling is not None:
        spm.set_random_generator_seed(sampling.copy + 1)
        encode = {"num_threads": 1, "enable_sampling": True, "alpha": sampling.alpha}
        encode["nbest_size"] = -1
    dtype = token_dtype(max(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size))
    writer = StoreWriter(folder, dtype)
    dropped = np.zeros(len(FILTERS) + 1, np.int64)
    progress = Progress(f"prepare {source.name}", "pairs", enabled=log)
    start = time.perf_counter()
    try:
        for src_text, tgt_text in _read_ahead(pair_chunks(source, limit=limit)):
            if augment is not None:
                src_text, tgt_text = augment.apply(src_text, tgt_text, progress.n)
            if protect:
                src_text, tgt_text = _masked(src_text, tgt_text)
            src, src_len = _flat(tokenizer.src.encode(src_text, **encode), dtype)
            tgt, tgt_len = _flat(tokenizer.tgt.encode(tgt_text, **encode), dtype)
            if f is not None:
                reason = drop_reasons(src_len, tgt_len, f)
                dropped += np.bincount(reason, minlength=len(dropped))
                keep = reason == 0
                src, src_len = src[np.repeat(keep, src_len)], src_len[keep]
                tgt, tgt_len = tgt[np.repeat(keep, tgt_len)], tgt_len[keep]
            writer.append((src, src_len), (tgt, tgt_len))
            progress.update(len(src_text))
        progress.close()
        read = progress.n
        if f is not None and writer.pairs == 0:
            raise MtError(
                f"{source.where}: no pair passes the filters (data.max_len {f.max_len}, "
                f"data.max_len_ratio {f.max_ratio}, and both sides non-empty)"
            )
        seconds = time.perf_counter() - start
        summary = {
            "source": source.where,
            "pairs_read": read,
            "pairs_kept": writer.pairs,
            "dropped": {name: int(dropped[i + 1]) for i, name in enumerate(FILTERS)},
            "seconds": round(seconds, 3),
        }
        writer.finish({"summary": summary})
    except BaseException:
        progress.close()
        writer.abort()
        raise
    store = TokenStore.open(folder)
    if log:
        progress.write(describe(store))
    return store


def _masked(src: list[str], tgt: list[str]) -> tuple[list[str], list[str]]:
    pairs = [mask_pair(s, t) for s, t in zip(src, tgt)]
    return [s for s, _ in pairs], [t for _, t in pairs]


def describe(store: TokenStore) -> str:
    """One line on what a store holds and what preparing it dropped."""
    m = store.meta
    s = m.get("summary", {})
    size = sum(p.stat().st_size for p in store.folder.iterdir())
    tokens = m["tokens"]["src"] + m["tokens"]["tgt"]
    dropped = s.get("dropped", {})
    drops = ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in dropped.items())
    seconds = s.get("seconds", 0)
    rate = f" ({s.get('pairs_read', 0) / seconds:,.0f} pairs/s)" if seconds >= 0.05 else ""
    return (
        f"{s.get('source', store.folder)}: {s.get('pairs_read', len(store)):,} pairs read, "
        f"{len(store):,} kept" + (f" (dropped: {drops})" if dropped else "") + f"; "
        f"{m['tokens']['src']:,} + {m['tokens']['tgt']:,} tokens, {size / 2**20:,.1f} MiB "
        f"({size / max(tokens, 1):.2f} bytes/token) in {seconds:.1f} s{rate} "
        f"-> {store.folder}"
    )


def open_or_build(
    source: Source,
    tokenizer: Tokenizer,
    cache: Path,
    f: Filter | None,
    limit: int = 0,
    build: bool = True,
    log: bool = True,
    protect: bool = False,
    sampling: Sampling | None = None,
    augment: Augment | None = None,
) -> TokenStore:
    """The store for `source`: mapped when a trusted one exists, else built (if `build`).

    Builders hold the cache folder's lock (`cache.build_lock`): the nodes of a multi-node run
    whose cache folders are one shared folder build each store once."""
    folder = store_folder(cache, source, tokenizer, f, limit, protect, sampling, augment)
    args = (source, tokenizer, folder, f, limit, build, log, protect, sampling, augment)
    if not build:
        return _open_or_build(*args)
    with build_lock(cache):
        return _open_or_build(*args)


def _open_or_build(
    source: Source,
    tokenizer: Tokenizer,
    folder: Path,
    f: Filter | None,
    limit: int,
    build: bool,
    log: bool,
    protect: bool,
    sampling: Sampling | None,
    augment: Augment | None,
) -> TokenStore:
    if folder.exists():
        try:
            store = TokenStore.open(folder)
            if log:
                print(f"ready: {describe(store)}", file=sys.stderr, flush=True)
            return store
        except StoreError as err:
            if not build:
                raise MtError(f"{folder}: token store cannot be used ({err})") from None
            print(f"{folder}: rebuilding the token store ({err})", flush=True, file=sys.stderr)
    elif not build:
        raise MtError(f"{folder}: token store missing (the preparing process did not write it)")
    return build_store(source, tokenizer, folder, f, limit, 0, log, protect, sampling, augment)


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
        for s, t in _read_ahead(pair_chunks(source, limit=limit)):
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


def prepare_tokenizer(cfg: Config, run_dir: Path, log: bool = True) -> Tokenizer:
    """The run's tokenizer: loaded from `run_dir`, else trained on a sample and saved there."""
    tok = Tokenizer.load(run_dir)
    if tok is not None:
        return tok
    t = cfg.tokenizer
    pairs = t.input_sentence_size // 2 if t.joint else t.input_sentence_size
    start = time.perf_counter()
    if cfg.data.pairs:
        src, tgt = sample_languages(cfg, max(pairs, 1))
    else:
        src, tgt = sample_pairs(
            train_sources(cfg.data), max(pairs, 1), cfg.data.max_train_examples, cfg.train.seed
        )
    sampled = time.perf_counter() - start
    if cfg.data.protect:  # the tokenizer learns the text it will encode: spans masked
        src, tgt = _masked(src, tgt)
    langs = [lang for pair in directions(cfg.data) for lang in pair] if cfg.data.pairs else None
    reserved = reserved_symbols() if cfg.data.protect else None
    tok = train_tokenizer(src, tgt, t, reserved, list(dict.fromkeys(langs or [])) or None)
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


def sample_languages(cfg: Config, n: int) -> tuple[list[str], list[str]]:
    """The tokenizer's sample for several pairs, balanced per language: each language gets
    the same share of sentences (a large pair must not crowd a small language's pieces out),
    drawn from the pairs that hold it and without repeats (Multi30k's English is the same
    text in three pairs). Returned as two halves of one list, as a joint model reads them."""
    d = cfg.data
    sources = train_sources(d)
    langs = list(dict.fromkeys(lang for s in sources for lang in (s.src_lang, s.tgt_lang)))
    share = max(2 * n // len(langs), 1)
    text: list[str] = []
    for k, lang in enumerate(langs):
        holding = [s for s in sources if lang in (s.src_lang, s.tgt_lang)]
        seen: dict[str, None] = {}
        for source in holding:
            src, tgt = sample_pairs(
                [source], share // len(holding) + 1, d.max_train_examples, cfg.train.seed + k
            )
            seen.update(dict.fromkeys(src if source.src_lang == lang else tgt))
        text += list(seen)[:share]
    half = len(text) // 2
    return text[:half], text[half:]


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
    cfg: Config,
    run_dir: Path,
    build: bool = True,
    log: bool = True,
    tokenizer: Tokenizer | None = None,
) -> Prepared:
    """Tokenizer and stores for `cfg`, built where missing (`build`) or only opened.

    `mt prepare` and the first `mt train` build; under torchrun each node's local rank 0
    builds or checks the node's stores with the `tokenizer` global rank 0 sent it, and the
    node's other ranks only open them, so every process of a node maps the same files.
    """
    d: DataConfig = cfg.data
    if tokenizer is not None:
        tok = tokenizer
    elif build:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise MtError(f"{run_dir}: cannot create the run directory ({err.strerror})") from None
        tok = prepare_tokenizer(cfg, run_dir, log)
    else:
        loaded = Tokenizer.load(run_dir)
        if loaded is None:
            raise MtError(f"{run_dir}: no tokenizer (the preparing process did not write it)")
        tok = loaded
    cache = cache_dir(cfg, run_dir)
    f = Filter(d.max_len, d.max_len_ratio)
    sources = train_sources(d)
    aug = Augment.from_config(d.augment, cfg.train.seed)
    train = [
        open_or_build(s, tok, cache, f, d.max_train_examples, build, log, d.protect, None, aug)
        for s in sources
    ]
    sampled = []  # tokenizer.sample_alpha: the training stores again, segmented by sampling
    for c in range(cfg.tokenizer.sample_copies if cfg.tokenizer.sample_alpha else 0):
        how = Sampling(cfg.tokenizer.sample_alpha, c)
        limit = d.max_train_examples
        sampled.append(
            [
                open_or_build(s, tok, cache, f, limit, build, log, d.protect, how, aug)
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

"""Build one token store: stream a corpus, encode it on all cores, filter, append.

Peak memory does not grow with the corpus: text is read `CHUNK` pairs at a time, encoded with
sentencepiece's batch API (C++ threads over all cores) while the next chunk is read, converted to
flat numpy arrays and appended to the store. `open_or_build` maps a store that exists and is
trusted, else builds it under the cache folder's lock.
"""

from __future__ import annotations

import itertools
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import sentencepiece as spm

from mt.data.augment import Augment
from mt.data.cache import Filter, Sampling, build_lock, store_folder
from mt.data.corpus import Chunk, Source, pair_chunks
from mt.data.store import StoreError, StoreWriter, TokenStore, token_dtype
from mt.data.terms import Terms
from mt.errors import MtError
from mt.progress import Progress
from mt.spans import mask_pair
from mt.tokenizer import Tokenizer

FILTERS = ("empty", "too_long", "ratio")


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


def read_ahead(chunks: Iterator[Chunk], depth: int = 2) -> Iterator[Chunk]:
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
    terms: Terms | None = None,
) -> TokenStore:
    """Read, encode, filter and write one corpus into a store at `folder`; with `augment`,
    a share of the pairs is changed first (mt.data.augment), with `terms` a share of the
    sources annotated with target terms (mt.data.terms); with `protect`,
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
        for src_text, tgt_text in read_ahead(pair_chunks(source, limit=limit)):
            if augment is not None:
                src_text, tgt_text = augment.apply(src_text, tgt_text, progress.n)
            if terms is not None:
                src_text = terms.apply(src_text, tgt_text, progress.n)
            if protect:
                src_text, tgt_text = masked(src_text, tgt_text)
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


def masked(src: list[str], tgt: list[str]) -> tuple[list[str], list[str]]:
    """Both sides with their spans masked (`data.protect`), as the model and tokenizer see them."""
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
    terms: Terms | None = None,
) -> TokenStore:
    """The store for `source`: mapped when a trusted one exists, else built (if `build`).

    Builders hold the cache folder's lock (`cache.build_lock`): the nodes of a multi-node run
    whose cache folders are one shared folder build each store once."""
    folder = store_folder(cache, source, tokenizer, f, limit, protect, sampling, augment, terms)
    args = (source, tokenizer, folder, f, limit, build, log, protect, sampling, augment, terms)
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
    terms: Terms | None,
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
    return build_store(
        source, tokenizer, folder, f, limit, 0, log, protect, sampling, augment, terms
    )

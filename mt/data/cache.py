"""The token cache: which folder holds a corpus's store, which cache folder a run (or a node)
uses, and the lock that lets one process at a time build there.

A store's folder is `{cache}/{name}-{key}`, the key a hash of what the store depends on, so a
changed corpus, tokenizer or filter never reuses an old store; the settings among its
ingredients (`Filter`, `Sampling`) are defined here, beside the key, and their reprs are part of
it. The cache folder is `data.cache_dir` (which defaults to env MT_CACHE, set per node in a
multi-node job) or `{run_dir}/cache`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mt.config import DataConfig
from mt.data.augment import Augment
from mt.data.corpus import Source
from mt.data.terms import Terms
from mt.errors import MtError
from mt.tokenizer import Tokenizer


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


def cache_dir(data: DataConfig, run_dir: Path) -> Path:
    """`data.cache_dir` (env MT_CACHE by default), else the run directory's `cache`."""
    return Path(data.cache_dir) if data.cache_dir else run_dir / "cache"


def _identity(source: Source) -> str:
    """What a store must change with: the files (path, size, mtime) or the dataset name."""
    parts = [source.format, source.root, source.name, source.src_lang, source.tgt_lang]
    parts.append(source.hf_subset)
    for p in source.paths():
        st = p.stat() if p.exists() else None
        parts.append(f"{p.resolve()}:{st.st_size if st else -1}:{st.st_mtime_ns if st else -1}")
    return "|".join(parts)


def store_folder(
    cache: Path,
    source: Source,
    tokenizer: Tokenizer,
    f: Filter | None,
    limit: int,
    protect: bool = False,
    sampling: Sampling | None = None,
    augment: Augment | None = None,
    terms: Terms | None = None,
) -> Path:
    """`cache/{name}-{key}`: the key changes with the data, the tokenizer, the filters, the
    masking of spans, the sampled segmentation (`Sampling`, its copy number), the
    training-data modifiers (`mt.data.augment.Augment`) and the term annotations
    (`mt.data.terms.Terms`: its settings and its lexicon's digest)."""
    settings = f"filter={f}:limit={limit}" + (":protect" if protect else "")
    settings += f":{sampling}" if sampling is not None else ""
    settings += f":{augment}" if augment is not None else ""
    settings += f":{terms}" if terms is not None else ""
    key_text = "|".join([_identity(source), tokenizer.fingerprint(), settings])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:20]
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", source.name).strip("._") or "corpus"
    return cache / f"{name}-{key}"


@contextmanager
def build_lock(cache: Path) -> Iterator[None]:
    """Hold the cache folder's lock while checking and building a store: processes that share
    the folder (the nodes of a multi-node run on one shared filesystem) build each store once,
    the others wait and then map it. `flock` on the folder itself, so no file is left beside
    the stores; the kernel drops it when the process ends, however it ends."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd = os.open(cache, os.O_RDONLY)
    except OSError as err:
        raise MtError(f"{cache}: cannot create the token cache ({err.strerror or err})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # drops the lock

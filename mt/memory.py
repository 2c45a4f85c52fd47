"""Keep freed memory in the process instead of handing it back to the OS after every step.

glibc serves blocks above its mmap threshold (at most 32 MB) with fresh `mmap`s and trims the
heap top on free, so each training step of the base model page-faults its large activations
and logits back in: a share of CPU time goes to the kernel, and steps are faster with both
behaviours off. The cost is that the process keeps its peak heap,
which training reaches again at the next batch anyway. Linux/glibc only; a
no-op elsewhere.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

from mt.config import ModelConfig
from mt.errors import MtError

M_TRIM_THRESHOLD = -1  # glibc mallopt parameters (malloc.h)
M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Turn off glibc's mmap for large blocks and heap trimming; True if glibc accepted it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def parameter_count(
    d_model: int, d_ff: int, enc: int, dec: int, src_vocab: int, tgt_vocab: int, tied: bool
) -> int:
    """Weights of the encoder-decoder Transformer of `mt.model`, counted from its shape.

    Known before any tensor exists, so an absurd config is refused before it allocates.
    """
    d = d_model
    ffn = 2 * d * d_ff + d_ff + d
    encoder = enc * (4 * d * d + 4 * d + ffn + 4 * d)
    decoder = dec * (8 * d * d + 8 * d + ffn + 6 * d)
    embeddings = src_vocab * d + (0 if tied else 2 * tgt_vocab * d)
    return embeddings + encoder + decoder


def physical_memory() -> int:
    """Bytes of RAM of this machine (0 where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def check_fits(n_bytes: int, available: int, what: str) -> None:
    """Refuse with one line when `n_bytes` cannot fit in `available` bytes (0: unknown)."""
    if available and n_bytes > available:
        raise MtError(
            f"{what} needs {n_bytes / 2**30:,.1f} GiB but this machine has "
            f"{available / 2**30:,.1f} GiB"
        )


def check_model_fits(m: ModelConfig, src_vocab: int, tgt_vocab: int) -> int:
    """The parameter count of model config `m`; one line if its fp32 weights exceed the RAM."""
    tied = m.tie_embeddings and src_vocab == tgt_vocab
    n = parameter_count(
        m.d_model, m.d_ff, m.encoder_layers, m.decoder_layers, src_vocab, tgt_vocab, tied
    )
    check_fits(
        4 * n, physical_memory(), f"the model of {n:,} parameters (model.d_model, d_ff, *_layers)"
    )
    return n

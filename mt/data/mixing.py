"""What several language pairs add to data preparation: how often each pair is drawn, and
which pieces each language's text holds (for the target-language guard, mt/languages.py).
"""

from __future__ import annotations

import numpy as np

from mt.data.corpus import Source
from mt.data.store import TokenStore
from mt.spans import reserved_symbols
from mt.tokenizer import EOS, UNK, Tokenizer


def pair_weights(sizes: list[int], temperature: float) -> list[float]:
    """Per pair, how many times each of its pairs is seen per epoch, so that pair i is drawn
    with probability ~ (n_i / N) ** (1 / T) and an epoch keeps N pairs in all."""
    n = np.asarray(sizes, np.float64)
    p = (n / n.sum()) ** (1.0 / temperature)
    p /= p.sum()
    return [float(x) for x in p * n.sum() / np.maximum(n, 1)]


def piece_counts(
    tok: Tokenizer, stores: list[TokenStore], sources: list[Source]
) -> dict[str, bytes]:
    """Per language, how often each piece occurs in its training text (both sides of every
    pair that holds the language), as int64 bytes for the checkpoint."""
    size = tok.tgt_vocab_size
    out: dict[str, np.ndarray] = {}
    for store, source in zip(stores, sources):
        for side, lang in ((store.src, source.src_lang), (store.tgt, source.tgt_lang)):
            n = np.bincount(np.asarray(side), minlength=size)[:size].astype(np.int64)
            out[lang] = out[lang] + n if lang in out else n
    return {lang: n.tobytes() for lang, n in out.items()}


def always_allowed(tok: Tokenizer) -> list[int]:
    """EOS and the reserved span pieces: any language may write them."""
    return [EOS] + [i for p in reserved_symbols() if (i := tok.tgt.piece_to_id(p)) != UNK]

"""Batches from token stores: epoch plans, collation straight from the memory maps, a loader.

An epoch is planned with numpy only (which pairs, in which token-budget batches, in which
order), from (seed, epoch); a batch is collated from the mapped arrays with vectorised gathers;
a `DataLoader` worker collates ahead of the training step, so a step never waits on Python.
Several corpora form one index space (corpus after corpus); a corpus of weight w contributes
floor(w) full copies plus a fresh random fraction w - floor(w) of its pairs each epoch.
"""

from __future__ import annotations

import gc
import signal
from collections.abc import Iterator

import numpy as np
import torch

from mt.batching import Batch, Batches, token_batches
from mt.data.store import TokenStore
from mt.tokenizer import BOS, EOS, PAD


def _gather(
    flat: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    width: int,
    before: tuple[int, ...],
    after: int | None,
) -> torch.Tensor:
    """(B, width) rows: the `before` ids, flat[start:start+length], optional `after` id."""
    b = len(starts)
    out = np.full((b, max(width, 1)), PAD, dtype=np.int64)
    shift = len(before)
    out[:, :shift] = before
    total = int(lengths.sum())
    if total:
        rows = np.repeat(np.arange(b), lengths)
        first = np.repeat(np.cumsum(lengths) - lengths, lengths)
        cols = np.arange(total) - first
        out[rows, cols + shift] = flat[np.repeat(starts, lengths) + cols]
    if after is not None:
        out[np.arange(b), lengths + shift] = after
    return torch.from_numpy(out)


def collate_store(
    store: TokenStore, idx: np.ndarray, lang: int | None = None, placement: str = "source"
) -> Batch:
    """The batch of pairs `idx`: source + EOS, BOS + target, target + EOS; right-padded.

    With a language token `lang` (a multilingual model, mt/languages.py): placement "source"
    puts it before the source; "target" makes it the decoder's first input in place of BOS
    (so nothing has to learn to predict it: which language to write is the request's)."""
    s0, s1 = store.src_idx[idx], store.src_idx[idx + 1]
    t0, t1 = store.tgt_idx[idx], store.tgt_idx[idx + 1]
    ls, lt = s1 - s0, t1 - t0
    src_mark = (lang,) if lang is not None and placement == "source" else ()
    start = lang if lang is not None and placement == "target" else BOS
    width_s = int(ls.max()) + 1 + len(src_mark)
    width_t = int(lt.max()) + 1
    return Batch(
        src=_gather(store.src, s0, ls, width_s, src_mark, EOS),
        tgt_in=_gather(store.tgt, t0, lt, width_t, (start,), None),
        tgt_out=_gather(store.tgt, t0, lt, width_t, (), EOS),
        src_tokens=int(ls.sum()) + len(idx) * (1 + len(src_mark)),
        tgt_tokens=int(lt.sum()) + len(idx),
    )


class TrainingSet(torch.utils.data.Dataset):
    """The training corpora as one index space, indexed by whole batches (index arrays).

    `langs` gives each store's language token (a multilingual model: the id of `<2tgt>` of its
    direction), placed as `placement` says; a batch then mixes directions freely. `copies`:
    the corpora segmented by sampling (`tokenizer.sample_alpha`), one list of stores per copy;
    `use_copy(epoch)` makes an epoch read one of them. `general`: per store, whether its
    pairs are the general domain's (`data.corpora[].general`); where any is, every batch marks
    its rows (`Batch.general`)."""

    def __init__(
        self,
        stores: list[TokenStore],
        weights: list[float],
        langs: list[int] | None = None,
        placement: str = "source",
        copies: list[list[TokenStore]] | None = None,
        general: list[bool] | None = None,
    ) -> None:
        self.weights, self.langs, self.placement = weights, langs, placement
        self.general = general if general and any(general) else None
        self.copies = copies or []
        self._use(stores)

    def use_copy(self, epoch: int) -> None:
        """Subword regularisation: epoch `epoch` reads sampled copy `epoch % copies` (the
        segmentation changes between epochs, with no Python per token on the hot path)."""
        if self.copies:
            self._use(self.copies[epoch % len(self.copies)])

    def _use(self, stores: list[TokenStore]) -> None:
        self.stores = stores
        counts = [len(s) for s in stores]
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        # One corpus: the store's mapped array itself, no copy. Several: one small copy.
        self.sizes = (
            stores[0].sizes if len(stores) == 1 else np.concatenate([s.sizes for s in stores])
        )
        if self.langs is not None and self.placement == "source":  # a source position
            self.sizes = self.sizes.astype(np.int64) + 1

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _lang(self, k: int) -> int | None:
        return None if self.langs is None else self.langs[k]

    def epoch_items(self, seed: int, epoch: int) -> np.ndarray | None:
        """The pairs of an epoch (None: every pair once, the common case of weight 1)."""
        if all(w == 1.0 for w in self.weights):
            return None
        rng = np.random.default_rng([seed, epoch, 1])
        parts = []
        for k, w in enumerate(self.weights):
            lo, hi = int(self.starts[k]), int(self.starts[k + 1])
            whole = int(w)
            parts += [np.arange(lo, hi, dtype=np.int64)] * whole
            extra = round((w - whole) * (hi - lo))
            if extra:
                parts.append(lo + rng.choice(hi - lo, size=extra, replace=False))
        return np.concatenate(parts)

    def epoch_batches(self, max_tokens: int, seed: int, epoch: int) -> Batches:
        items = self.epoch_items(seed, epoch)
        return token_batches(self.sizes, max_tokens, seed, epoch, items)

    def __getitem__(self, idx: np.ndarray) -> Batch:
        if len(self.stores) == 1:
            batch = collate_store(self.stores[0], idx, self._lang(0), self.placement)
            return self._marked(batch, 0)
        # Pairs of several corpora in one batch: collate per corpus, then pad to one width.
        corpus = np.searchsorted(self.starts, idx, side="right") - 1
        parts = [
            self._marked(
                collate_store(
                    self.stores[k], idx[corpus == k] - self.starts[k], self._lang(k), self.placement
                ),
                int(k),
            )
            for k in np.unique(corpus)
        ]
        return concat_batches(parts)

    def _marked(self, batch: Batch, k: int) -> Batch:
        """`batch` of store `k` with its rows marked general or not (where any store is)."""
        if self.general is not None:
            batch.general = torch.full((batch.src.size(0),), self.general[k], dtype=torch.bool)
        return batch


def concat_batches(parts: list[Batch]) -> Batch:
    if len(parts) == 1:
        return parts[0]

    def cat(tensors: list[torch.Tensor]) -> torch.Tensor:
        width = max(t.size(1) for t in tensors)
        return torch.cat(
            [torch.nn.functional.pad(t, (0, width - t.size(1)), value=PAD) for t in tensors]
        )

    return Batch(
        src=cat([p.src for p in parts]),
        tgt_in=cat([p.tgt_in for p in parts]),
        tgt_out=cat([p.tgt_out for p in parts]),
        src_tokens=sum(p.src_tokens for p in parts),
        tgt_tokens=sum(p.tgt_tokens for p in parts),
        general=None if parts[0].general is None else torch.cat([p.general for p in parts]),
    )


def _keep_batch(batch: Batch) -> Batch:
    return batch


def _worker_init(_: int) -> None:
    # Ctrl-C is the main process's to handle: it finishes the update and saves before stopping.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)


def iterate(
    data: torch.utils.data.Dataset, batches: Batches, workers: int, pin: bool
) -> Iterator[Batch]:
    """Collated batches in the order given; `workers` > 0 collates them in other processes."""
    if workers == 0:
        for idx in batches:
            b = data[idx]
            yield b.pin_memory() if pin else b
        return
    # Forked workers share the trainer's memory copy-on-write; the garbage collector would
    # touch (and so copy) every tracked object in them. Frozen objects are left alone.
    gc.freeze()
    loader = torch.utils.data.DataLoader(
        data,
        batch_size=None,
        sampler=batches,
        num_workers=workers,
        collate_fn=_keep_batch,
        pin_memory=pin,
        prefetch_factor=4,
        worker_init_fn=_worker_init,
        # Its own generator: a loader seeds its workers from it, and drawing that seed from
        # torch's global RNG would shift dropout masks whenever a loader starts (not resumable).
        generator=torch.Generator().manual_seed(0),
    )
    yield from loader

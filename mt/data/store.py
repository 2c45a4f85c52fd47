"""The prepared token store: a split's token ids as flat memory-mapped `.npy` arrays.

Layout of one store folder (fairseq's `MMapIndexedDataset` idea, in standard numpy files):

    src.npy       every source sentence's ids back to back, narrowest dtype (uint16 < 65,536 types)
    tgt.npy       the same for the target side
    src.idx.npy   int64 offsets, one more than the pairs: sentence i is src[idx[i]:idx[i+1]]
    tgt.idx.npy   the same for the target side
    sizes.npy     uint16 per pair: its longer side + EOS, what a batch pays for it (batching
                  reads only this, so a start-up never scans the offsets)
    meta.json     format version, pair and token counts, dtype, the preparation summary

Neither side holds BOS or EOS; batching adds them. Training opens the arrays with
`np.load(mmap_mode="r")`, so the data lives in the page cache once, shared by every process and
loader worker on the machine, and a process costs only the pages it touches. The files are
written while the corpus streams past (a fixed-size `.npy` header is rewritten with the final
shape at the end) into a temporary folder that is renamed into place: a store is either whole or
absent. A store whose files disagree with its `meta.json`, or of another format version, is
never trusted.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from mt.atomic import temp_path
from mt.errors import MtError

FORMAT_VERSION = 2
_HEADER = 128  # bytes of our .npy header: room for any shape, and a 64-byte aligned data start
_SIDES = ("src", "tgt")


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


def _npy_header(dtype: np.dtype, n: int) -> bytes:
    """A version 1.0 `.npy` header for a 1-D array of `n` items, padded to `_HEADER` bytes."""
    body = f"{{'descr': {dtype.str!r}, 'fortran_order': False, 'shape': ({n},), }}"
    size = _HEADER - 10  # magic (6) + version (2) + header length (2)
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", size) + (body.ljust(size - 1) + "\n").encode()


class _Appender:
    """A 1-D `.npy` file written in pieces; its header gets the final length on `close`."""

    def __init__(self, path: Path, dtype: np.dtype) -> None:
        self.path, self.dtype, self.n = path, dtype, 0
        self.f: BinaryIO = path.open("wb")
        self.f.write(_npy_header(dtype, 0))

    def append(self, values: np.ndarray) -> None:
        self.f.write(np.ascontiguousarray(values, dtype=self.dtype).tobytes())
        self.n += len(values)

    def close(self) -> None:
        self.f.seek(0)
        self.f.write(_npy_header(self.dtype, self.n))
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()


class StoreWriter:
    """Builds a store in `.{folder}.tmp-{pid}` (mt.atomic.temp_path) and renames it to
    `folder` when finished.

    Any failure (a full disk, an error in the input) removes the temporary folder, and the
    previous store at `folder`, if any, stays as it was until the new one is complete.
    """

    def __init__(self, folder: Path, dtype: np.dtype) -> None:
        self.folder = folder
        self.tmp = temp_path(folder)
        self.pairs = 0
        try:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp.mkdir(parents=True)
            self.tokens = {s: _Appender(self.tmp / f"{s}.npy", dtype) for s in _SIDES}
            self.offsets = {
                s: _Appender(self.tmp / f"{s}.idx.npy", np.dtype(np.int64)) for s in _SIDES
            }
            for a in self.offsets.values():
                a.append(np.zeros(1, np.int64))
            self.sizes = _Appender(self.tmp / "sizes.npy", np.dtype(np.uint16))
        except OSError as err:
            self._fail(err)

    def append(
        self, src: tuple[np.ndarray, np.ndarray], tgt: tuple[np.ndarray, np.ndarray]
    ) -> None:
        """Add pairs given per side as (flat ids, lengths)."""
        try:
            for side, (flat, lengths) in zip(_SIDES, (src, tgt)):
                tokens, offsets = self.tokens[side], self.offsets[side]
                offsets.append(tokens.n + np.cumsum(lengths, dtype=np.int64))
                tokens.append(flat)
            size = np.maximum(src[1], tgt[1]) + 1
            self.sizes.append(np.minimum(size, np.iinfo(np.uint16).max))
            self.pairs += len(src[1])
        except OSError as err:
            self._fail(err)

    def finish(self, meta: dict[str, Any]) -> None:
        try:
            for a in [*self.tokens.values(), *self.offsets.values(), self.sizes]:
                a.close()
            meta = {
                "format": FORMAT_VERSION,
                "pairs": self.pairs,
                "dtype": self.tokens["src"].dtype.str,
                "tokens": {s: self.tokens[s].n for s in _SIDES},
                **meta,
            }
            (self.tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
            if self.folder.exists():
                shutil.rmtree(self.folder)
            os.replace(self.tmp, self.folder)
        except OSError as err:
            self._fail(err)

    def abort(self) -> None:
        """Drop the unfinished store (on any error, including the caller's)."""
        appenders = [*getattr(self, "tokens", {}).values(), *getattr(self, "offsets", {}).values()]
        if hasattr(self, "sizes"):
            appenders.append(self.sizes)
        for a in appenders:
            if not a.f.closed:
                with contextlib.suppress(OSError):  # flushing a full disk fails again
                    a.f.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _fail(self, err: OSError) -> None:
        self.abort()
        raise MtError(
            f"{self.folder}: cannot write the token store ({err.strerror or err})"
        ) from None


class StoreError(Exception):
    """A store that cannot be used as it is (missing, damaged, another format)."""


@dataclass
class TokenStore:
    """An opened store: read-only memory maps of the token arrays and offsets."""

    folder: Path
    meta: dict[str, Any]
    src: np.ndarray
    tgt: np.ndarray
    src_idx: np.ndarray
    tgt_idx: np.ndarray
    sizes: np.ndarray

    def __len__(self) -> int:
        return len(self.src_idx) - 1

    @staticmethod
    def open(folder: Path) -> TokenStore:
        """Map a store, raising StoreError with the reason if it cannot be trusted."""
        try:
            meta = json.loads((folder / "meta.json").read_text())
        except (OSError, ValueError) as err:
            raise StoreError(f"no readable meta.json ({err.__class__.__name__})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_VERSION:
            found = meta.get("format") if isinstance(meta, dict) else None
            raise StoreError(f"format {found}, this mt reads format {FORMAT_VERSION}")
        try:
            arrays = [
                np.load(folder / f"{name}.npy", mmap_mode="r")
                for name in ("src", "tgt", "src.idx", "tgt.idx", "sizes")
            ]
        except (OSError, ValueError, EOFError) as err:
            raise StoreError(f"unreadable array ({err})") from None
        src, tgt, src_idx, tgt_idx, sizes = arrays
        n = meta.get("pairs")
        tokens = meta.get("tokens")
        if not isinstance(tokens, dict) or not isinstance(n, int):
            raise StoreError("meta.json lacks the pair and token counts")
        ok = (
            src.dtype.str == tgt.dtype.str == meta.get("dtype")
            and src_idx.dtype == tgt_idx.dtype == np.int64
            and src.ndim == tgt.ndim == src_idx.ndim == tgt_idx.ndim == 1
            and len(src_idx) == len(tgt_idx) == n + 1
            and sizes.dtype == np.uint16
            and sizes.shape == (n,)
            and len(src) == tokens.get("src")
            and len(tgt) == tokens.get("tgt")
            and src_idx[0] == tgt_idx[0] == 0
            and src_idx[-1] == len(src)
            and tgt_idx[-1] == len(tgt)
        )
        if not ok:
            raise StoreError("arrays disagree with meta.json")
        return TokenStore(folder, meta, src, tgt, src_idx, tgt_idx, sizes)

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Token counts per pair, (source, target), without EOS."""
        return np.diff(self.src_idx), np.diff(self.tgt_idx)

    def pair(self, i: int) -> tuple[list[int], list[int]]:
        """One pair's ids as lists (tests and tools; batching reads the arrays directly)."""
        s, t = self.src_idx, self.tgt_idx
        return self.src[s[i] : s[i + 1]].tolist(), self.tgt[t[i] : t[i + 1]].tolist()

    def __getstate__(self) -> dict[str, Any]:
        # A loader worker started by spawn re-maps the files instead of receiving copies.
        return {"folder": self.folder}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(TokenStore.open(state["folder"]).__dict__)

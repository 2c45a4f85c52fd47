"""The files of a model in HF's format: where they are, and reading them safely.

A SOURCE is a local folder, or a hub id (`Helsinki-NLP/opus-mt-de-en`) fetched with
`huggingface_hub` into its cache where the machine has network. Weights are read from
`model.safetensors` (or its shards) or `pytorch_model.bin` with `weights_only`, so a file
carrying pickled code is refused, never run. Every way a folder can be wrong is one line.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from mt.errors import MtError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
# What `snapshot_download` fetches: configs, tokenizer files and one format of the weights.
HUB_PATTERNS = ["*.json", "*.spm", "*.model", "*.txt", "*.safetensors"]
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def resolve(source: str) -> Path:
    """The local folder of `source`: itself when it is a folder, else a hub id's download."""
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists():
        raise MtError(f"{source}: not a folder (give a folder in HF format or a hub id)")
    if not HUB_ID.fullmatch(source):
        raise MtError(f"{source}: no such folder, and not a hub id (owner/name)")
    return _download(source)


def _download(repo_id: str) -> Path:
    """Fetch `repo_id` from the HF hub (real network: never called by the tests)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise MtError(f"{repo_id}: fetching a hub id needs huggingface_hub") from None
    try:
        folder = snapshot_download(repo_id, allow_patterns=HUB_PATTERNS)
    except Exception as err:  # noqa: BLE001 - offline, unknown repo, gated: all one line
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise MtError(f"{repo_id}: cannot fetch from the hub ({first[:200]})") from None
    path = Path(folder)
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        # Only pytorch_model.bin published: fetch it too.
        try:
            folder = snapshot_download(repo_id, allow_patterns=["pytorch_model.bin"])
        except Exception as err:  # noqa: BLE001
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise MtError(f"{repo_id}: cannot fetch from the hub ({first[:200]})") from None
        path = Path(folder)
    return path


def read_json(path: Path, required: bool = True) -> dict[str, Any]:
    """A JSON object from `path`; {} when it is missing and not `required`."""
    if not path.is_file():
        if required:
            raise MtError(f"{path}: missing")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise MtError(f"{path}: not readable JSON ({err})") from None
    if not isinstance(data, dict):
        raise MtError(f"{path}: expected a JSON object")
    return data


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of the model in `folder`, by their HF names."""
    single = folder / "model.safetensors"
    index = folder / "model.safetensors.index.json"
    if single.is_file():
        return _safetensors(single)
    if index.is_file():
        shards = sorted(set(read_json(index).get("weight_map", {}).values()))
        if not shards:
            raise MtError(f"{index}: names no weight files")
        out: dict[str, torch.Tensor] = {}
        for name in shards:
            out.update(_safetensors(folder / name))
        return out
    binary = folder / "pytorch_model.bin"
    if binary.is_file():
        return _torch_bin(binary)
    raise MtError(
        f"{folder}: no weights (model.safetensors or pytorch_model.bin); "
        "a folder in HF format holds one of them"
    )


# safetensors' dtype names, for the tensors a model file may hold.
DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


def _safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, each read into memory of its own.

    Read, not mapped: the pages of a mapped file count in the process's resident memory once
    touched and stay until its last tensor is gone, so an import that fuses and reorders
    tensors would hold the file's pages and their copies at once (the peak of `mt import`).
    The format is an 8-byte header length, a JSON header (name -> dtype, shape, byte offsets)
    and the data; every way it can be wrong is one line."""
    if not path.is_file():
        raise MtError(f"{path}: missing")
    bad = MtError(f"{path}: not readable safetensors (corrupt or truncated)")
    out: dict[str, torch.Tensor] = {}
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            n = int.from_bytes(f.read(8), "little")
            if not 2 <= n <= size - 8:
                raise bad
            header = json.loads(f.read(n))
            for name, info in header.items():
                if name != "__metadata__":
                    out[name] = _read_tensor(f, info, 8 + n, size, bad)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise bad from None
    return out


def _read_tensor(f: Any, info: dict, base: int, size: int, bad: MtError) -> torch.Tensor:
    """One tensor of a safetensors file (`info`: its header entry), read into a new tensor."""
    shape = [int(x) for x in info["shape"]]
    start, end = (int(x) for x in info["data_offsets"])
    dtype = DTYPES[info["dtype"]]
    nbytes = math.prod(shape) * dtype.itemsize
    if min(shape, default=0) < 0 or end - start != nbytes or start < 0 or base + end > size:
        raise bad  # checked before allocating: a corrupt shape must not ask for terabytes
    t = torch.empty(shape, dtype=dtype)
    if nbytes:
        f.seek(base + start)
        if f.readinto(t.reshape(-1).view(torch.uint8).numpy()) != nbytes:
            raise bad
    return t


def _torch_bin(path: Path) -> dict[str, torch.Tensor]:
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "GLOBAL" in str(err):
            raise MtError(f"{path}: refused, the file carries pickled code or objects") from None
        raise MtError(f"{path}: not readable weights (corrupt or truncated)") from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile, KeyError):
        raise MtError(f"{path}: not readable weights (corrupt or truncated)") from None
    if not isinstance(data, dict) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise MtError(f"{path}: not a state dict of tensors")
    return data

"""Device and precision: resolved in one place for training, decoding, serving and scripts.

`auto` means CUDA when there is one. Precision `auto` means bf16 on CUDA (fp16 where bf16 is
missing) and on CPU bf16 only with AMX tiles: without them CPU bf16 matmuls are far slower than
fp32, so fp32 is the right default there.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from mt.errors import MtError

DEVICES = ("auto", "cpu", "cuda")


def has_amx() -> bool:
    """Whether the CPU has AMX tiles for bf16; only then is CPU bf16 faster than fp32."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return "amx_bf16" in f.read()
    except OSError:
        return False


def resolve_device(name: str, option: str = "--device") -> torch.device:
    """The torch device for `auto`, `cpu` or `cuda`; `option` names the setting in errors."""
    if name not in DEVICES:
        raise MtError(f"{option} must be cpu, cuda or auto, got {name!r}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise MtError(f"{option} is 'cuda' but no CUDA device is available")
    return torch.device(name)


def resolve_precision(name: str, device: torch.device) -> str:
    """`auto`: bf16 on CUDA (fp16 where bf16 is missing), bf16 on CPU only with AMX."""
    if name == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "bf16" if has_amx() else "fp32"
    if name == "fp16" and device.type != "cuda":
        raise MtError("train.precision fp16 needs CUDA (use bf16 or fp32 on CPU)")
    return name


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)

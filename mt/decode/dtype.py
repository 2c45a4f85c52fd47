"""The dtype a decode computes in (`decode.dtype`, resolved by mt.device), applied the one way
that pays on each device.

- CUDA, bf16 or fp16: a half copy of the weights; the GPU runs every op in that type.
- CPU, bf16: bf16 autocast around the whole call. Matmuls run in bf16 while the residual sums,
  layer norms and the log-softmax stay fp32, which keeps the scores closer to fp32 than bf16
  weights do; autocast casts each weight once per call and keeps the cast until the call ends.
  Only a CPU with native bf16 (avx512_bf16, amx_bf16) gains speed from it (docs/benchmarks.md).
- int8 (CPU): a copy whose Linear layers are dynamically quantised; they take fp32 inputs, so
  int8 decodes in fp32 around them.

The caller's model (maybe mid-training) is never changed: what differs is a copy or a context.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import torch
from torch import nn

from mt.decode.int8 import quantize_linears
from mt.device import Precision, autocast

HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


def decode_model(
    model: nn.Module, precision: Precision, device: torch.device, int8: bool
) -> nn.Module:
    """The model search runs, in eval mode: an int8 copy, a half copy (CUDA), or `model`."""
    if int8:
        return quantize_linears(model)
    if device.type == "cuda" and precision.name in HALF:
        return copy.deepcopy(model).to(HALF[precision.name]).eval()
    return model.eval()


def compute(precision: Precision, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The context a whole decoding call runs in: bf16 autocast on a CPU, else nothing."""
    if device.type == "cpu" and precision.name in HALF:
        return autocast(device, precision.name)
    return contextlib.nullcontext()

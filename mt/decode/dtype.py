"""The dtype a decode computes in (`decode.dtype`, resolved by mt.device), applied the one way
that pays on each device.

- CUDA, bf16 or fp16: a half copy of the weights; the GPU runs every op in that type.
- CPU, bf16: bf16 autocast around the whole call. Matmuls run in bf16 while the residual sums,
  layer norms and the log-softmax stay fp32, which keeps the scores closer to fp32 than bf16
  weights do; autocast casts each weight once per call and keeps the cast until the call ends.
  Only asked for: even a CPU with native bf16 (AMX) decoded no faster in it than in fp32
  (docs/benchmarks.md), so `auto` is fp32 on a CPU.
- int8 (CPU): a copy whose Linear layers are dynamically quantised; they take fp32 inputs, so
  int8 decodes in fp32 around them.
- fp32 on a CPU, `decode.gemm` onednn (auto's choice there): a copy, sharing the weights, whose
  output layer multiplies through oneDNN (mt.decode.onednn). Only search asks for it.

The caller's model (maybe mid-training) is never changed: what differs is a copy or a context.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import torch
from torch import nn

from mt.decode import onednn
from mt.decode.int8 import quantize_linears
from mt.device import Precision, autocast

HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


def decode_model(
    model: nn.Module, precision: Precision, device: torch.device, int8: bool, gemm: str = "torch"
) -> nn.Module:
    """The model search runs, in eval mode: an int8 copy, a half copy (CUDA), a copy with a
    oneDNN output layer (`gemm`, a `decode.gemm` value), or `model`."""
    if int8:
        return quantize_linears(model)
    if device.type == "cuda" and precision.name in HALF:
        return copy.deepcopy(model).to(HALF[precision.name]).eval()
    if uses_onednn(gemm, precision, device, int8):
        return onednn.onednn_output(model)
    return model.eval()


def uses_onednn(gemm: str, precision: Precision, device: torch.device, int8: bool) -> bool:
    """Whether `decode.gemm` = `gemm` puts the output layer on oneDNN here: fp32 on a CPU, not
    int8, and this torch has the op (auto and onednn alike; the session refuses onednn
    given where it cannot apply)."""
    fp32_cpu = device.type == "cpu" and precision.name == "fp32" and not int8
    return gemm != "torch" and fp32_cpu and onednn.available()


def compute(precision: Precision, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The context a whole decoding call runs in: bf16 autocast on a CPU, else nothing."""
    if device.type == "cpu" and precision.name in HALF:
        return autocast(device, precision.name)
    return contextlib.nullcontext()

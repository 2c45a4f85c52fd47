"""The dtype a decode computes in (`decode.dtype`, resolved by mt.device), applied the one way
that pays on each device.

- bf16 (a CPU with native bf16, or CUDA) and fp16 (CUDA): a half copy of the weights; every op
  runs in that type, and search takes the log-softmax of the logits in fp32. On a CPU this beat
  bf16 autocast around fp32 weights: autocast casts every weight at every call and every
  activation before every product and back, which a decode of many short calls pays over and
  over; the half copy is cast once, at fp32's quality (docs/studies/bf16-and-threads.md). With
  `decode.gemm` auto or onednn, a CPU's half copy runs every Linear layer through oneDNN on
  weights packed once (mt.runtime.onednn).
- int8 (CPU): a copy whose Linear layers are dynamically quantised; they take fp32 inputs, so
  int8 decodes in fp32 around them. `decode.gemm` onednn packs them for oneDNN's int8 kernels;
  auto and torch for torch's default engine (FBGEMM's on x86), which decoded faster on the
  one CPU kind measured (an AMD Zen 4 with VNNI: docs/studies/decoding-speed.md).
- fp32 on a CPU, `decode.gemm` onednn (auto's choice there): a copy, sharing the weights, whose
  output layer multiplies through oneDNN (mt.runtime.onednn). Only search asks for it.

The caller's model (maybe mid-training) is never changed: what differs is a copy.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from mt.device import Precision
from mt.runtime import onednn
from mt.runtime.int8 import quantize_linears

HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


def decode_model(
    model: nn.Module, precision: Precision, device: torch.device, int8: bool, gemm: str = "torch"
) -> nn.Module:
    """The model search runs, in eval mode: an int8 copy, a half copy, a copy with a oneDNN
    output layer (`gemm`, a `decode.gemm` value), or `model`."""
    if int8:
        return quantize_linears(model, "onednn" if gemm == "onednn" else "torch")
    if uses_onednn(gemm, precision, device, int8):
        if precision.name == "bf16":
            return onednn.onednn_bf16(model)
        return onednn.onednn_output(model)
    if precision.name in HALF:
        return copy.deepcopy(model).to(HALF[precision.name]).eval()
    return model.eval()


def uses_onednn(gemm: str, precision: Precision, device: torch.device, int8: bool) -> bool:
    """Whether `decode.gemm` = `gemm` puts Linear layers on oneDNN here: fp32 (the output layer)
    or bf16 (all of them) on a CPU, not int8, and this torch has the ops (auto and onednn alike;
    the session refuses onednn given where it cannot apply)."""
    if gemm == "torch" or device.type != "cpu" or int8:
        return False
    if precision.name == "bf16":
        return onednn.bf16_available()
    return precision.name == "fp32" and onednn.available()

"""int8 decoding on CPU: the Linear layers dynamically quantised (int8 weights per tensor,
activations quantised per call), the rest fp32.

It decodes faster than fp32 for a small BLEU cost (measured in docs/studies/decoding-speed.md).
torch has deprecated its quantized tensor types in favour of torchao; they still work in the
pinned torch, and the deprecation warning is not shown to `mt translate` users.

Which library's int8 kernels run is fixed when the weights are packed, by torch's quantized
engine at that moment: torch's default on x86 ("x86") packs Linear layers for FBGEMM;
`engine="onednn"` packs them for oneDNN (which has AMX kernels). The packed weights carry
their kernels, so the engine is set for the packing alone and the process-wide setting is
restored after: one process can hold copies of both kinds (docs/studies/decoding-speed.md
measures them).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator

import torch
from torch import nn

from mt.model import FeedForward, applied, fusable

# The float module torch's dynamic quantisation turns into its fused int8 LinearReLU.
LinearReLU = getattr(getattr(torch.ao.nn, "intrinsic", None), "LinearReLU", None)


# What `engine` may name: torch's default engine, or oneDNN's.
ENGINES = ("torch", "onednn")


def engine_available(engine: str) -> bool:
    """Whether this torch can pack int8 weights for `engine`."""
    return engine == "torch" or engine in torch.backends.quantized.supported_engines


@contextlib.contextmanager
def packing_engine(engine: str) -> Iterator[None]:
    """torch's quantized engine set to `engine` while weights are packed, restored after."""
    if engine == "torch":
        yield
        return
    if not engine_available(engine):
        raise ValueError(f"torch {torch.__version__} has no {engine} engine for int8 decoding")
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        yield
    finally:
        torch.backends.quantized.engine = before


def quantize_linears(model: nn.Module, engine: str = "torch") -> nn.Module:
    """A copy of `model` in eval mode with every `nn.Linear` dynamically quantised to int8,
    packed for `engine` (one of ENGINES), and a ReLU feed-forward layer's activation applied
    inside its first product (torch's fused dynamic LinearReLU), which spares a pass over its
    widest activations."""
    if engine not in ENGINES:
        raise ValueError(f"int8 engine {engine!r}: expected one of {', '.join(ENGINES)}")
    if any(p.device.type != "cpu" for p in model.parameters()):
        raise ValueError("int8 decoding runs on CPU only")
    quantize = getattr(torch.ao.quantization, "quantize_dynamic", None)
    if quantize is None:
        raise ValueError(f"torch {torch.__version__} has no dynamic quantisation for int8 decoding")
    shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    fused = copy.deepcopy(model, memo=shared)  # new modules, the same weights
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*deprecated.*")
        kinds: set[type[nn.Module]] = {nn.Linear}
        if LinearReLU is not None:
            kinds.add(LinearReLU)
            for module in fused.modules():
                if isinstance(module, FeedForward) and fusable(module):
                    module.fc1 = LinearReLU(module.fc1, nn.ReLU())
                    module.activation = applied
        with packing_engine(engine):
            quantized = quantize(fused, kinds, dtype=torch.qint8, inplace=True)
    return quantized.eval()

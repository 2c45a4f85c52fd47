"""LoRA (Hu et al., 2021): a frozen Linear layer plus a trained low-rank update.

    y = W x + b + (alpha / r) * B A dropout(x)        A: (r, in), B: (out, r)

B starts at zero, so a fresh adapter changes no output, and only A and B train: an adapter is
r * (in + out) values per projection instead of in * out. The model gains wrapped projections,
not branches: `wrap` puts a `LoraLinear` where an attention or feed-forward block held its
`nn.Linear`, keeping that layer as its `base` child. A decoding copy may turn the base into
an int8 or oneDNN layer (mt.runtime.int8, mt.runtime.onednn): the update stays beside it, in the
copy's float type.

The model's fused projections (self-attention's qkv, cross-attention's kv) hold several outputs
side by side; each wrapped output ("q", "k", "v") gets its own A and B, as LoRA on separate
projections would, computed in one product for the As and one for the Bs.
`fold` adds the update into the base's weight: a plain `nn.Linear` again, the same outputs
within float rounding and no cost at decoding.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mt.config import FinetuneConfig
from mt.dropout import Dropout
from mt.model import CrossAttention, FeedForward, SelfAttention

# Per block: its Linear layers and the outputs each holds side by side, by target name.
PROJECTIONS: dict[type[nn.Module], dict[str, tuple[str, ...]]] = {
    SelfAttention: {"qkv": ("q", "k", "v"), "out": ("out",)},
    CrossAttention: {"q": ("q",), "kv": ("k", "v"), "out": ("out",)},
    FeedForward: {"fc1": ("ffn",), "fc2": ("ffn",)},
}
TARGETS = ("q", "k", "v", "out", "ffn")
PARAMS = ("lora_a", "lora_b")  # the names of an adapter's tensors in a state dict


@dataclass(frozen=True)
class LoraSpec:
    """What an adapter is: its rank, scale, training dropout and the projections it wraps."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = TARGETS

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    @classmethod
    def of(cls, f: FinetuneConfig) -> LoraSpec:
        return cls(f.lora_rank, f.lora_alpha, f.lora_dropout, tuple(f.lora_targets))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "lora",
            "rank": self.rank,
            "alpha": self.alpha,
            "dropout": self.dropout,
            "targets": list(self.targets),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LoraSpec:
        return cls(int(d["rank"]), float(d["alpha"]), float(d["dropout"]), tuple(d["targets"]))


class LoraLinear(nn.Module):
    """`base(x)` plus the low-rank update of the wrapped outputs `slots` among `parts` equal
    ones side by side (3 for a fused qkv)."""

    def __init__(self, base: nn.Linear, parts: int, slots: tuple[int, ...], spec: LoraSpec):
        super().__init__()
        out_features, in_features = base.weight.shape
        self.base = base
        self.parts, self.width, self.rank = parts, out_features // parts, spec.rank
        self.slots = slots
        index = torch.tensor(slots, device=base.weight.device)
        self.register_buffer("index", index, persistent=False)
        self.scale = spec.scale
        self.dropout = Dropout(spec.dropout)
        w = base.weight
        self.lora_a = nn.Parameter(w.new_empty(len(slots) * spec.rank, in_features))
        self.lora_b = nn.Parameter(w.new_zeros(len(slots), self.width, spec.rank))
        for a in self.lora_a.detach().split(spec.rank):  # as nn.Linear draws its weight
            nn.init.kaiming_uniform_(a, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        z = F.linear(self.dropout(x), self.lora_a.to(x.dtype)) * self.scale  # (..., S * r)
        # The Bs side by side as one block-diagonal matrix: one product for every wrapped
        # output (a few zeros cost less than a batched product at decoding's shapes).
        b = self.lora_b.to(z.dtype)
        b = b[0] if len(self.slots) == 1 else torch.block_diag(*b)  # (S * width, S * r)
        if len(self.slots) == self.parts:  # the update's columns are the output's
            flat = torch.addmm(y.reshape(-1, y.size(-1)), z.reshape(-1, z.size(-1)).to(y.dtype),
                               b.t().to(y.dtype))  # fmt: skip
            return flat.view_as(y)
        d = F.linear(z, b).unflatten(-1, (len(self.slots), self.width)).to(y.dtype)
        return y.unflatten(-1, (self.parts, self.width)).index_add(-2, self.index, d).flatten(-2)

    @torch.no_grad()
    def folded(self) -> nn.Linear:
        """A plain Linear layer computing what this one does (the update added to the
        weight, in float64 before rounding to the weight's type)."""
        base = self.base
        w = base.weight.detach().double().view(self.parts, self.width, -1).clone()
        a = self.lora_a.detach().double().view(len(self.slots), self.rank, -1)
        b = self.lora_b.detach().double()
        w[list(self.slots)] += self.scale * (b @ a)  # (S, width, in)
        out = nn.Linear(base.in_features, base.out_features, bias=base.bias is not None)
        out = out.to(device=base.weight.device, dtype=base.weight.dtype)
        out.weight.copy_(w.view_as(base.weight))
        if base.bias is not None:
            out.bias.copy_(base.bias)
        return out


def wrap(model: nn.Module, spec: LoraSpec) -> list[LoraLinear]:
    """Put a LoraLinear around every projection of `model` that `spec.targets` names (in
    place); returns them. Their A and B are new parameters, on the base's device and type."""
    wrapped = []
    for module in list(model.modules()):
        for name, outputs in PROJECTIONS.get(type(module), {}).items():
            slots = tuple(i for i, role in enumerate(outputs) if role in spec.targets)
            if slots:
                layer = LoraLinear(getattr(module, name), len(outputs), slots, spec)
                setattr(module, name, layer)
                wrapped.append(layer)
    return wrapped


def attach(model: nn.Module, spec: LoraSpec) -> int:
    """Wrap `model` for training its adapter alone: every other parameter frozen. Returns the
    number of adapter values (the trainable ones)."""
    for p in model.parameters():
        p.requires_grad_(False)
    return sum(p.numel() for layer in wrap(model, spec) for p in (layer.lora_a, layer.lora_b))


def is_adapter_key(key: str) -> bool:
    return key.rsplit(".", 1)[-1] in PARAMS


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter's tensors of a wrapped model, by state-dict name, on the CPU."""
    return {k: v.detach().cpu() for k, v in model.state_dict().items() if is_adapter_key(k)}


def load_adapter_state(model: nn.Module, weights: Mapping[str, torch.Tensor]) -> None:
    """Put an adapter's tensors into a wrapped `model`; it must name exactly its A and B
    tensors, of their shapes (a ValueError says which does not)."""
    own = {k: v for k, v in model.state_dict().items() if is_adapter_key(k)}
    missing, unexpected = sorted(own.keys() - weights.keys()), sorted(weights.keys() - own.keys())
    if missing or unexpected:
        what = f"lacks {missing[0]}" if missing else f"has {unexpected[0]}, which the model lacks"
        raise ValueError(f"the adapter does not fit the model: it {what}")
    for k, v in weights.items():
        if v.shape != own[k].shape:
            raise ValueError(f"the adapter's {k} is {tuple(v.shape)}, the model's {own[k].shape}")
    model.load_state_dict(dict(weights), strict=False)


def load_weights(model: nn.Module, weights: Mapping[str, torch.Tensor]) -> None:
    """`model.load_state_dict(weights)` for a checkpoint's weights: an adapter's (on a wrapped
    model, only its tensors) or a whole model's."""
    if weights and all(is_adapter_key(k) for k in weights):
        load_adapter_state(model, weights)
    else:
        model.load_state_dict(dict(weights))


def with_adapter(
    model: nn.Module, spec: LoraSpec, weights: Mapping[str, torch.Tensor]
) -> nn.Module:
    """A copy of `model` in eval mode with the adapter applied, sharing every weight of
    `model` (only module objects and the adapter's tensors are new): several adapters on one
    base cost one base in memory."""
    shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    adapted = copy.deepcopy(model, memo=shared)
    wrap(adapted, spec)
    device = next(model.parameters()).device
    load_adapter_state(adapted, {k: v.to(device) for k, v in weights.items()})
    for p in adapted.parameters():
        p.requires_grad_(False)
    return adapted.eval()


def fold(model: nn.Module) -> nn.Module:
    """`model` with every LoraLinear replaced by its folded plain Linear layer (in place)."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, LoraLinear):
                setattr(module, name, child.folded())
    return model

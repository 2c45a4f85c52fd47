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

The target "embed" wraps the embedding tables (`LoraTable`: E + (alpha / r) B A, B: (V, r),
A: (r, D)) and the output layer. A new domain's words are pieces whose vectors the base learnt
for other text, and the projections alone do not reach them. A tied output layer (the target
table itself) shares its table's A and B, so the logits and the lookups see one updated table,
as in the base; the update is applied as two thin products, never as a (V, D) table, so an
adapter held beside others costs no table of its own.
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
from mt.model import PAD_ID, CrossAttention, FeedForward, SelfAttention, Transformer

# Per block: its Linear layers and the outputs each holds side by side, by target name.
PROJECTIONS: dict[type[nn.Module], dict[str, tuple[str, ...]]] = {
    SelfAttention: {"qkv": ("q", "k", "v"), "out": ("out",)},
    CrossAttention: {"q": ("q",), "kv": ("k", "v"), "out": ("out",)},
    FeedForward: {"fc1": ("ffn",), "fc2": ("ffn",)},
}
TARGETS = ("q", "k", "v", "out", "ffn")  # every projection
DEFAULT_TARGETS = (*TARGETS, "embed")  # and the tables: finetune.lora_targets' default
PARAMS = ("lora_a", "lora_b")  # the names of an adapter's tensors in a state dict


@dataclass(frozen=True)
class LoraSpec:
    """What an adapter is: its rank, scale, training dropout and the projections it wraps."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = DEFAULT_TARGETS

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

    @property
    def weight(self) -> torch.Tensor:
        """The weight this layer computes with (base and update, (out, in)), for readers of
        an output layer's rows such as the lexical shortlist."""
        w = self.base.weight
        update = torch.zeros_like(w).view(self.parts, self.width, -1)
        a = self.lora_a.view(len(self.slots), self.rank, -1).to(w.dtype)
        update[list(self.slots)] = self.scale * (self.lora_b.to(w.dtype) @ a)
        return w + update.view_as(w)

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


class LoraTable(nn.Module):
    """An embedding table plus a low-rank update: `base(ids) + scale * B[ids] A`. B has the
    shape of an output layer's (1, V, r), so a tied output `LoraLinear` shares this A and B."""

    def __init__(self, base: nn.Embedding, spec: LoraSpec):
        super().__init__()
        vocab, width = base.weight.shape
        self.base, self.rank, self.scale = base, spec.rank, spec.scale
        w = base.weight
        self.lora_a = nn.Parameter(w.new_empty(spec.rank, width))
        self.lora_b = nn.Parameter(w.new_zeros(1, vocab, spec.rank))
        nn.init.kaiming_uniform_(self.lora_a.detach(), a=math.sqrt(5))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        y = self.base(ids)
        rows = F.embedding(ids, self.lora_b[0], padding_idx=PAD_ID)  # (..., r): as the base's
        return y + (rows @ self.lora_a).to(y.dtype) * self.scale

    @property
    def weight(self) -> torch.Tensor:
        """The table this layer looks up in (base and update, (V, D))."""
        w = self.base.weight
        return w + self.scale * (self.lora_b[0].to(w.dtype) @ self.lora_a.to(w.dtype))

    @torch.no_grad()
    def folded(self) -> nn.Embedding:
        """A plain table looking up what this one does (the update added in float64)."""
        w = self.base.weight.detach().double()
        w = w + self.scale * (self.lora_b[0].detach().double() @ self.lora_a.detach().double())
        out = nn.Embedding(*w.shape, padding_idx=self.base.padding_idx)
        out = out.to(device=self.base.weight.device, dtype=self.base.weight.dtype)
        out.weight.copy_(w)
        return out


def _wrap_tables(model: Transformer, spec: LoraSpec) -> list[nn.Module]:
    """Wrap `model`'s embedding tables (a shared source and target table once) and its output
    layer; a tied output layer takes its table's A and B as its own."""
    tables: dict[int, LoraTable] = {}
    for name in ("src_embed", "tgt_embed"):
        table = getattr(model, name)
        if id(table) not in tables:
            tables[id(table)] = LoraTable(table, spec)
        setattr(model, name, tables[id(table)])
    target = model.tgt_embed
    output = LoraLinear(model.output, 1, (0,), spec)
    if model.output.weight is target.base.weight:
        output.lora_a, output.lora_b = target.lora_a, target.lora_b
    model.output = output
    return [*tables.values(), output]


def wrap(model: nn.Module, spec: LoraSpec) -> list[nn.Module]:
    """Put a LoraLinear around every projection of `model` that `spec.targets` names (in
    place); returns them. Their A and B are new parameters, on the base's device and type."""
    wrapped: list[nn.Module] = []
    for module in list(model.modules()):
        if isinstance(module, Transformer) and "embed" in spec.targets:
            wrapped += _wrap_tables(module, spec)
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
    wrap(model, spec)
    return sum(p.numel() for name, p in model.named_parameters() if is_adapter_key(name))


def param_groups(model: nn.Module, b_lr: float) -> list[dict[str, Any]] | None:
    """Adam's groups for an adapter whose Bs learn at `b_lr` times the rate of its As (LoRA+,
    Hayou et al. 2024: B, which starts at zero, moves the output and gains from a larger
    step); None where the rates are equal, so such a run's optimizer is one group as before."""
    trained = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
    b = [p for k, p in trained if k.endswith("lora_b")]
    rest = [p for k, p in trained if not k.endswith("lora_b")]
    if b_lr == 1.0 or not b:  # no adapter: nothing to set apart
        return None
    return [{"params": rest, "lr_scale": 1.0}, {"params": b, "lr_scale": b_lr}]


def is_adapter_key(key: str) -> bool:
    return key.rsplit(".", 1)[-1] in PARAMS


def _adapter_params(model: nn.Module) -> dict[str, nn.Parameter]:
    """A wrapped model's adapter tensors by name, each once: a tied output layer's A and B are
    its table's, named where the table is."""
    return {k: p for k, p in model.named_parameters() if is_adapter_key(k)}


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter's tensors of a wrapped model, by parameter name, on the CPU."""
    return {k: p.detach().cpu() for k, p in _adapter_params(model).items()}


def load_adapter_state(model: nn.Module, weights: Mapping[str, torch.Tensor]) -> None:
    """Put an adapter's tensors into a wrapped `model`; it must name exactly its A and B
    tensors, of their shapes (a ValueError says which does not)."""
    own = _adapter_params(model)
    missing, unexpected = sorted(own.keys() - weights.keys()), sorted(weights.keys() - own.keys())
    if missing or unexpected:
        what = f"lacks {missing[0]}" if missing else f"has {unexpected[0]}, which the model lacks"
        raise ValueError(f"the adapter does not fit the model: it {what}")
    for k, v in weights.items():
        if v.shape != own[k].shape:
            raise ValueError(f"the adapter's {k} is {tuple(v.shape)}, the model's {own[k].shape}")
    with torch.no_grad():
        for k, v in weights.items():
            own[k].copy_(v)


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
    """`model` with every LoraLinear and LoraTable replaced by its folded plain layer (in
    place); a tied output layer is tied again to its folded table, a shared table replaced
    once, so the folded model has the base's shape and size."""
    done: dict[int, nn.Module] = {}
    tied: list[tuple[nn.Module, LoraTable]] = []
    for module in list(model.modules()):
        if isinstance(module, Transformer) and isinstance(module.output, LoraLinear):
            table = module.tgt_embed
            if isinstance(table, LoraTable) and module.output.lora_a is table.lora_a:
                tied.append((module, table))
        for name, child in list(module._modules.items()):
            if isinstance(child, LoraLinear | LoraTable):
                if id(child) not in done:
                    done[id(child)] = child.folded()
                setattr(module, name, done[id(child)])
    for module, table in tied:
        module.output.weight = done[id(table)].weight
    return model

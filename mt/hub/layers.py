"""HF's BART-family weight names (Marian, M2M-100, NLLB) onto mt's Transformer.

The layers of these models are mt's layers with other names: separate q/k/v projections where
mt fuses them, `self_attn_layer_norm` / `encoder_attn_layer_norm` / `final_layer_norm` for
mt's norm1 / norm2 / norm3. The vocabulary is reordered so that mt's fixed ids (PAD, UNK,
BOS, EOS = 0-3) hold the model's own pad, unk and eos; mt's BOS, the decoder's first input,
is one row more: a copy of the model's decoder start token (Marian's pad, M2M's eos) whose
output logit is `NEVER`, so it takes no probability and the softmax is the model's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mt.config import ModelConfig
from mt.errors import MtError

NEVER = -1e4  # the logit bias of an input-only row: exp(-1e4) is 0 in fp32, yet finite
START_PIECE = "<decoder-start>"  # the name of that row in the piece table


@dataclass
class Order:
    """mt id -> the model's id (`start` for the added BOS row), and the piece of each mt id."""

    ids: list[int]
    pieces: list[str]


def vocab_order(vocab: dict[str, int], size: int, pad: int, unk: int, eos: int) -> Order:
    """mt's order of a vocabulary of `size` ids whose pieces are `vocab` (piece -> id)."""
    names = {i: p for p, i in vocab.items()}
    if len({pad, unk, eos}) != 3:
        raise MtError(f"pad, unk and eos must be three tokens, got ids {pad}, {unk}, {eos}")
    for what, i in (("pad", pad), ("unk", unk), ("eos", eos)):
        if not 0 <= i < size:
            raise MtError(f"the {what} id {i} is outside the vocabulary of {size}")
    special = {pad, unk, eos}
    ids = [pad, unk, -1, eos] + [i for i in range(size) if i not in special]
    pieces = [names.get(i, f"<unused{i}>") if i >= 0 else START_PIECE for i in ids]
    return Order(ids, pieces)


def reorder(table: torch.Tensor, order: Order, start_row: torch.Tensor) -> torch.Tensor:
    """Rows of `table` (the model's ids) in mt's order, `start_row` at BOS."""
    ids = torch.tensor([max(i, 0) for i in order.ids])
    out = table.index_select(0, ids)  # one new table (indexing then cloning made two)
    out[2] = start_row
    return out


def first(w: dict[str, torch.Tensor], *names: str) -> torch.Tensor:
    """The first of `names` the weights hold (HF stores a tied table under one of its names)."""
    for name in names:
        if name in w:
            return w[name]
    raise MtError(f"the weights lack {names[0]}")


def take(w: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """`w[name]`, removed from `w`: an import frees the originals of the tensors it fuses as
    it goes, rather than holding every original beside its copy until the end."""
    if name not in w:
        raise MtError(f"the weights lack {name}")
    return w.pop(name)


def map_layers(w: dict[str, torch.Tensor], m: ModelConfig, prefix: str = "model.") -> dict:
    """mt's names for every layer weight (embeddings and output excluded), taken out of `w`."""
    sd: dict[str, torch.Tensor] = {}

    def get(name: str) -> torch.Tensor:
        return take(w, prefix + name)

    def copy(dst: str, src: str) -> None:
        sd[f"{dst}.weight"], sd[f"{dst}.bias"] = get(f"{src}.weight"), get(f"{src}.bias")

    def fused(dst: str, src: str, parts: tuple[str, ...]) -> None:
        for kind in ("weight", "bias"):
            sd[f"{dst}.{kind}"] = torch.cat([get(f"{src}.{p}_proj.{kind}") for p in parts])

    for i in range(m.encoder_layers):
        s, d = f"encoder.layers.{i}", f"encoder.{i}"
        fused(f"{d}.attn.qkv", f"{s}.self_attn", ("q", "k", "v"))
        copy(f"{d}.attn.out", f"{s}.self_attn.out_proj")
        copy(f"{d}.norm1", f"{s}.self_attn_layer_norm")
        copy(f"{d}.ffn.fc1", f"{s}.fc1")
        copy(f"{d}.ffn.fc2", f"{s}.fc2")
        copy(f"{d}.norm2", f"{s}.final_layer_norm")
    for i in range(m.decoder_layers):
        s, d = f"decoder.layers.{i}", f"decoder.{i}"
        fused(f"{d}.self_attn.qkv", f"{s}.self_attn", ("q", "k", "v"))
        copy(f"{d}.self_attn.out", f"{s}.self_attn.out_proj")
        copy(f"{d}.norm1", f"{s}.self_attn_layer_norm")
        copy(f"{d}.cross_attn.q", f"{s}.encoder_attn.q_proj")
        fused(f"{d}.cross_attn.kv", f"{s}.encoder_attn", ("k", "v"))
        copy(f"{d}.cross_attn.out", f"{s}.encoder_attn.out_proj")
        copy(f"{d}.norm2", f"{s}.encoder_attn_layer_norm")
        copy(f"{d}.ffn.fc1", f"{s}.fc1")
        copy(f"{d}.ffn.fc2", f"{s}.fc2")
        copy(f"{d}.norm3", f"{s}.final_layer_norm")
    if m.norm == "pre":
        copy("encoder_norm", "encoder.layer_norm")
        copy("decoder_norm", "decoder.layer_norm")
    return sd

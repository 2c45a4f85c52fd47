"""HF `MarianMTModel` (OPUS-MT) as an mt model: its config, tokenizer and weights.

Marian is mt's post-norm Transformer with sinusoids in halves (`model.positions: halves`),
`final_logits_bias` (`model.logits_bias`), swish or relu (`model.activation`) and pad as the
decoder's start token. Its tokenizer is two sentencepiece models (`source.spm`, `target.spm`)
over one `vocab.json` (or a `target_vocab.json` beside it when the vocabularies are separate),
which becomes the checkpoint's piece tables (mt/vocab.py). Every size is read from
`config.json`, with MarianConfig's defaults for the keys it leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mt.config import ModelConfig
from mt.errors import MtError
from mt.hub import shape
from mt.hub.files import read_json
from mt.hub.layers import NEVER, Order, first, map_layers, reorder, vocab_order
from mt.hub.shape import shared_fields

# MarianConfig's defaults, for the keys a config.json leaves out.
DEFAULTS: dict[str, Any] = {
    "vocab_size": 58101,
    "max_position_embeddings": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "activation_function": "gelu",
    "d_model": 1024,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "decoder_start_token_id": 58100,
    "scale_embedding": False,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
}
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
TABLES = (  # the names HF stores embedding and output tables under
    "model.shared.weight",
    "model.encoder.embed_tokens.weight",
    "model.decoder.embed_tokens.weight",
    "lm_head.weight",
)


@dataclass
class Parts:
    """What an imported model becomes: mt's model config, tokenizer pieces and weights."""

    model: ModelConfig
    src_proto: bytes
    tgt_proto: bytes
    pieces: tuple[list[str], list[str]]
    weights: dict[str, torch.Tensor]
    start: int  # the model's decoder start id (its prompt before the output)


def setting(config: dict[str, Any], key: str) -> Any:
    return shape.setting(config, DEFAULTS, key)


def model_config(config: dict[str, Any], where: str) -> ModelConfig:
    """mt's ModelConfig of a MarianConfig (as a config.json dict)."""
    share = bool(setting(config, "share_encoder_decoder_embeddings"))
    tie = bool(setting(config, "tie_word_embeddings"))
    return ModelConfig(
        **shared_fields(config, DEFAULTS, where),
        norm="post",
        tie_embeddings=share and tie,
        tie_output=tie and not share,
        positions="halves",
    )


def _tokenizer_files(folder: Path) -> tuple[bytes, bytes, dict[str, int], dict[str, int]]:
    settings = read_json(folder / "tokenizer_config.json", required=False)
    separate = bool(settings.get("separate_vocabs", False))
    names = TOKENIZER_FILES + (("target_vocab.json",) if separate else ())
    for name in names:
        if not (folder / name).is_file():
            raise MtError(
                f"{folder / name}: missing (a Marian model's tokenizer is {', '.join(names)})"
            )
    src_vocab = read_json(folder / "vocab.json")
    tgt_vocab = read_json(folder / "target_vocab.json") if separate else src_vocab
    for name, vocab in (("vocab.json", src_vocab), ("target_vocab.json", tgt_vocab)):
        if not all(isinstance(v, int) for v in vocab.values()):
            raise MtError(f"{folder / name}: piece ids must be integers")
        if "<unk>" not in vocab:
            raise MtError(f"{folder / name}: has no <unk> piece")
    return (
        (folder / "source.spm").read_bytes(),
        (folder / "target.spm").read_bytes(),
        src_vocab,
        tgt_vocab,
    )


def read(folder: Path, config: dict[str, Any], weights: dict[str, torch.Tensor]) -> Parts:
    """The mt parts of the Marian model in `folder` (config.json already read as `config`)."""
    where = str(folder / "config.json")
    m = model_config(config, where)
    src_proto, tgt_proto, src_vocab, tgt_vocab = _tokenizer_files(folder)
    share = bool(setting(config, "share_encoder_decoder_embeddings"))
    src_size = int(setting(config, "vocab_size"))
    tgt_size = src_size if share else int(config.get("decoder_vocab_size") or src_size)
    pad, eos = int(setting(config, "pad_token_id")), int(setting(config, "eos_token_id"))
    start = int(config.get("decoder_start_token_id", pad))
    src_order = vocab_order(src_vocab, src_size, pad, src_vocab["<unk>"], eos)
    tgt_order = vocab_order(tgt_vocab, tgt_size, pad, tgt_vocab["<unk>"], eos)
    sd = map_layers(w=weights, m=m)
    sd.update(embeddings(weights, m, src_order, tgt_order, start))
    return Parts(m, src_proto, tgt_proto, (src_order.pieces, tgt_order.pieces), sd, start)


def embeddings(
    w: dict[str, torch.Tensor], m: ModelConfig, src: Order, tgt: Order, start: int
) -> dict[str, torch.Tensor]:
    """Embedding tables, output layer and logit bias in mt's order. Takes the tables out of
    `w`, so each original is freed once its reordered copy is made."""
    enc = first(w, "model.encoder.embed_tokens.weight", "model.shared.weight")
    dec = first(w, "model.decoder.embed_tokens.weight", "model.shared.weight")
    if m.tie_embeddings:
        enc = dec = first(w, "model.shared.weight", "model.encoder.embed_tokens.weight")
    for name, table, order in (("encoder", enc, src), ("decoder", dec, tgt)):
        if table.size(0) != len(order.ids) - 1 or table.size(1) != m.d_model:
            raise MtError(
                f"the {name} embedding is {tuple(table.shape)}, the config says "
                f"({len(order.ids) - 1}, {m.d_model})"
            )
    size = dec.size(0)
    if not 0 <= start < size:
        raise MtError(f"decoder_start_token_id {start} is outside the vocabulary")
    head = None if m.tie_embeddings or m.tie_output else first(w, "lm_head.weight")
    for name in TABLES:
        w.pop(name, None)
    # A tied table is reordered once: a second copy would only be thrown away (58k x 512
    # floats are 119 MB, the largest part of an import's peak memory).
    sd = {"src_embed.weight": reorder(enc, src, enc[start])}
    if m.tie_embeddings:
        del enc, dec
        sd["tgt_embed.weight"] = sd["src_embed.weight"]
    else:
        del enc
        sd["tgt_embed.weight"] = reorder(dec, tgt, dec[start])
        del dec
    if head is None:
        sd["output.weight"] = sd["tgt_embed.weight"]
    else:
        sd["output.weight"] = reorder(head, tgt, torch.zeros(m.d_model))
        del head
    bias = w.pop("final_logits_bias", torch.zeros(1, size)).reshape(-1)
    sd["output_bias"] = reorder(bias[:, None], tgt, torch.tensor([NEVER]))[:, 0]
    return {k: v.float().contiguous() for k, v in sd.items()}

"""`mt import SOURCE -o OUT.pt`: a model in HF's format becomes an ordinary mt checkpoint.

The checkpoint carries the model's tokenizer (its sentencepiece models and piece tables), its
weights in mt's names and order, and HF's decoding rules as its decode settings (the
generation config's beam, `length_penalty` as `len ** lp`, HF's stopping rule, its length
limit), so `mt translate OUT.pt --beam 4` equals `generate(num_beams=4)` with no other flag.
Nothing is written unless every part was read and the weights fit the model (atomic write).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mt.checkpoint import payload, save
from mt.config import Config, DecodeConfig
from mt.config_rules import validate
from mt.errors import MtError
from mt.hub import m2m, marian
from mt.hub.files import read_json, read_weights, resolve
from mt.memory import check_model_fits
from mt.model import Transformer
from mt.tokenizer import Tokenizer

SUPPORTED = {
    "marian": "MarianMTModel (OPUS-MT)",
    "m2m_100": "M2M100ForConditionalGeneration (M2M-100, NLLB-200)",
}


def decode_settings(
    folder: Path, config: dict[str, Any], max_positions: int, forced: int = 0
) -> DecodeConfig:
    """HF generate's settings (generation_config.json, else config.json) as mt's decode config.

    `max_length` counts the decoder's start token, the `forced` language token (M2M, NLLB)
    and the final EOS; mt's limit counts the tokens before EOS (a * src_len + b with a = 0),
    and its length penalty counts the forced token as HF's does (`length_offset`)."""
    gen = read_json(folder / "generation_config.json", required=False) or config
    beams = int(gen.get("num_beams") or 1)
    if gen.get("max_new_tokens"):
        limit = int(gen["max_new_tokens"]) - 1 - forced
    else:
        limit = int(gen.get("max_length") or 20) - 2 - forced
    early = gen.get("early_stopping", False)
    return DecodeConfig(
        beam=beams,
        greedy=False,  # beam 1 is greedy search already; a `--beam N` given widens it
        alpha=float(gen.get("length_penalty", 1.0)),
        penalty="power",
        length_offset=forced,
        hf_stopping=early is not True,
        no_repeat_ngram=int(gen.get("no_repeat_ngram_size") or 0),
        max_len_a=0.0,
        max_len_b=max(1, min(limit, max_positions - 1)),
    )


def convert(
    source: str, src_lang: str | None = None, tgt_lang: str | None = None
) -> dict[str, Any]:
    """The checkpoint payload of the model `source` names (a folder or a hub id)."""
    folder = resolve(source)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise MtError(f"{config_path}: missing (a model folder in HF format has config.json)")
    config = read_json(config_path)
    kind = config.get("model_type")
    if kind not in SUPPORTED:
        raise MtError(
            f"{config_path}: model_type {kind!r} is not supported; mt imports "
            + ", ".join(f"{k} ({v})" for k, v in SUPPORTED.items())
        )
    weights = read_weights(folder)
    languages = None
    if kind == "marian":
        parts = marian.read(folder, config, weights)
    else:
        parts, languages = m2m.read(folder, config, weights)
    cfg = Config()
    cfg.model = parts.model
    cfg.tokenizer.joint = parts.model.tie_embeddings
    cfg.tokenizer.vocab_size = len(parts.pieces[1])
    forced = 1 if languages is not None else 0
    cfg.decode = decode_settings(folder, config, parts.model.max_positions, forced)
    src, tgt = _languages(folder)
    cfg.data.src_lang, cfg.data.tgt_lang = src_lang or src, tgt_lang or tgt
    if languages is not None:
        _check_languages(cfg, languages.languages, config_path)
    try:
        validate(cfg)
    except MtError as err:
        raise MtError(f"{config_path}: {err}") from None
    tokenizer = Tokenizer(parts.src_proto, parts.tgt_proto, languages, parts.pieces)
    del weights  # what the mapping did not take is freed before the model takes the rest
    check_model_fits(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    with torch.device("meta"):  # no weights of its own: the mapped tensors become its weights
        model = Transformer(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    try:
        model.load_state_dict(parts.weights, strict=True, assign=True)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[-1].strip()
        raise MtError(f"{folder}: the weights do not fit config.json ({first[:200]})") from None
    return payload(cfg, tokenizer, model, imported_from=str(source))


def _languages(folder: Path) -> tuple[str, str]:
    """The pair a model translates by default, as its tokenizer config names it ("src" and
    "tgt" when it does not: no pair is assumed)."""
    settings = read_json(folder / "tokenizer_config.json", required=False)
    src = settings.get("source_lang") or settings.get("src_lang") or "src"
    tgt = settings.get("target_lang") or settings.get("tgt_lang") or "tgt"
    return str(src), str(tgt)


def _check_languages(cfg: Config, codes: list[str], where: Path) -> None:
    """A multilingual model's default source language (the token HF's tokenizer writes when
    not told: its src_lang) must be one of its own; the default target is only a name."""
    d = cfg.data
    if d.src_lang not in codes:
        raise MtError(f"{where}: the source language {d.src_lang!r} is not one of the model's")
    if d.tgt_lang not in codes or d.tgt_lang == d.src_lang:
        d.tgt_lang = next(c for c in codes if c != d.src_lang)


def import_model(
    source: str, out: Path, src_lang: str | None = None, tgt_lang: str | None = None
) -> dict[str, Any]:
    """Convert `source` and write it to `out` atomically; returns what was written."""
    data = convert(source, src_lang, tgt_lang)
    save(data, out)
    return data

"""HF `M2M100ForConditionalGeneration` (M2M-100, NLLB-200) as a multilingual mt model.

The model is mt's pre-norm Transformer with final layer norms, fairseq's sinusoids
(`model.positions: fairseq`) starting after the pad id (`model.position_offset`), and relu.
The source starts with its language's token (`__de__`, `deu_Latn`); the decoder starts from
EOS and is forced to write the target language's token first (`forced_bos_token_id`): the
checkpoint's languages have the placement "forced" (mt/translation/target.py). The language tokens
become mt's `<2xx>` pieces, named by the model's codes (`fr`, `fra_Latn`).

The vocabulary is a fairseq dictionary over one sentencepiece model: M2M-100's `vocab.json`
(language tokens and 8 made-up words after it), or NLLB's sentencepiece ids shifted by one
behind `<s> <pad> </s> <unk>` (language codes, then `<mask>`, after it).
"""

from __future__ import annotations

import json
from itertools import permutations
from pathlib import Path
from typing import Any

import sentencepiece as spm

from mt.config import ModelConfig
from mt.errors import MtError
from mt.hub import shape
from mt.hub.files import read_json
from mt.hub.layers import map_layers, vocab_order
from mt.hub.marian import Parts, embeddings
from mt.hub.shape import shared_fields
from mt.languages import Languages, lang_piece

# M2M100Config's defaults, for the keys a config.json leaves out.
DEFAULTS: dict[str, Any] = {
    "vocab_size": 128112,
    "max_position_embeddings": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "activation_function": "relu",
    "d_model": 1024,
    "dropout": 0.1,
    "attention_dropout": 0.1,
    "activation_dropout": 0.0,
    "decoder_start_token_id": 2,
    "scale_embedding": True,
    "pad_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": True,
}
# The language tokens of M2M-100's dictionaries, in their order (fairseq's lang lists).
M2M_CODES = {
    "m2m100": (
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd "
        "gl gu ha he hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg "
        "mk ml mn mr ms my ne nl no ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw "
        "ta th tl tn tr uk ur uz vi wo xh yi yo zh zu"
    ).split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}
MADEUP = 8  # M2M-100's dictionary ends with madeupword0000..0007


def setting(config: dict[str, Any], key: str) -> Any:
    return shape.setting(config, DEFAULTS, key)


def model_config(config: dict[str, Any], where: str) -> ModelConfig:
    """mt's ModelConfig of an M2M100Config (as a config.json dict)."""
    if not setting(config, "tie_word_embeddings"):
        raise MtError(f"{where}: tie_word_embeddings false is not supported for m2m_100")
    return ModelConfig(
        **shared_fields(config, DEFAULTS, where),
        norm="pre",
        tie_embeddings=True,
        positions="fairseq",
        position_offset=int(setting(config, "pad_token_id")) + 1,
    )


def _dictionary(folder: Path, size: int) -> tuple[bytes, dict[str, int], list[str]]:
    """The sentencepiece model, the piece -> id table and the language codes in id order."""
    model = folder / "sentencepiece.bpe.model"
    if not model.is_file():
        raise MtError(f"{model}: missing (an M2M-100/NLLB tokenizer is one sentencepiece model)")
    proto = model.read_bytes()
    settings = read_json(folder / "tokenizer_config.json", required=False)
    vocab_file = folder / "vocab.json"
    if vocab_file.is_file():  # M2M-100: vocab.json, then languages, then made-up words
        vocab = read_json(vocab_file)
        codes = M2M_CODES.get(str(settings.get("language_codes", "m2m100")))
        if codes is None:
            raise MtError(f"{folder / 'tokenizer_config.json'}: unknown language_codes")
        return proto, _m2m_table(vocab, codes, size), codes
    return proto, *_nllb_table(folder, proto, size)


def _m2m_table(vocab: dict[str, int], codes: list[str], size: int) -> dict[str, int]:
    table = dict(vocab)
    base = len(vocab)
    for i, code in enumerate(codes):
        table[lang_piece(code)] = base + i
    for i in range(MADEUP):
        table[f"madeupword{i:04d}"] = base + len(codes) + i
    if max(table.values()) >= size:
        raise MtError(f"the dictionary has {max(table.values()) + 1} ids, the model {size}")
    return table


def _nllb_table(folder: Path, proto: bytes, size: int) -> tuple[dict[str, int], list[str]]:
    """NLLB: sentencepiece ids + 1 behind the four specials; the language codes after them, as
    tokenizer.json's added tokens name them."""
    sp = spm.SentencePieceProcessor(model_proto=proto)
    table = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for j in range(3, sp.get_piece_size()):
        table.setdefault(sp.id_to_piece(j), j + 1)
    added = folder / "tokenizer.json"
    if not added.is_file():
        raise MtError(f"{added}: missing (it names NLLB's language tokens)")
    try:
        tokens = json.loads(added.read_text(encoding="utf-8")).get("added_tokens", [])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise MtError(f"{added}: not readable JSON ({err})") from None
    codes = []
    for t in sorted(tokens, key=lambda t: t["id"]):
        if t["id"] > sp.get_piece_size() and "_" in t["content"]:
            codes.append(t["content"])
            table[lang_piece(t["content"])] = t["id"]
        elif t["id"] > sp.get_piece_size():
            table[t["content"]] = t["id"]
    if not codes or max(table.values()) >= size:
        raise MtError(f"{added}: no language tokens within the model's {size} ids")
    return table, codes


def read(folder: Path, config: dict[str, Any], weights: dict) -> tuple[Parts, Languages]:
    """The mt parts of the M2M-100/NLLB model in `folder`, and its languages."""
    m = model_config(config, str(folder / "config.json"))
    size = int(setting(config, "vocab_size"))
    proto, table, codes = _dictionary(folder, size)
    pad, eos = int(setting(config, "pad_token_id")), int(setting(config, "eos_token_id"))
    start = int(setting(config, "decoder_start_token_id"))
    order = vocab_order(table, size, pad, table.get("<unk>", 3), eos)
    sd = map_layers(weights, m)
    sd.update(embeddings(weights, m, order, order, start))
    languages = Languages(list(permutations(codes, 2)), "forced", {}, [])
    parts = Parts(m, proto, proto, (order.pieces, order.pieces), sd, start)
    return parts, languages

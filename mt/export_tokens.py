"""How an exported multilingual model is asked for a language, in each engine's own terms.

mt tells a multilingual model which language to write with its token `<2fr>` (mt/languages.py),
in one of two places, and each engine has an exact way to put it there:

- `source` (before the source ids): CTranslate2 reads `<2fr>` as the first source token; HF
  Marian's tokenizer turns `>>fr<<` at the start of a text into that token (Marian's own
  convention), so the vocabulary names it `>>fr<<`.
- `target` (the decoder's first input, in place of BOS): CTranslate2's model gets no decoder
  start token of its own, so `target_prefix=[["<2fr>"]]` is the first thing the decoder reads;
  HF's `generate` takes it as `decoder_start_token_id`.

Not exact, and so not offered: Marian's `>>fr<<` for the `target` placement (the tokenizer
puts it in the source), HF's `forced_bos_token_id` and CTranslate2's `target_prefix` after a
BOS start (both make the decoder read BOS, then the token: a sequence the model never saw).

mt's target-language guard (decoding for L scores only L's pieces, `decode.target_vocab_ratio`)
is carried as the pieces it bans, per language, in each engine's argument for banning tokens
(CTranslate2 `suppress_sequences`, HF `suppress_tokens`): `languages.json` in the export holds
them, with the token, and `mt export` prints how to pass both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mt.checkpoint import Loaded
from mt.languages import Languages, lang_piece
from mt.tokenizer import BOS, PAD, Tokenizer

CARD = "languages.json"


def marian_code(lang: str) -> str:
    """The name HF Marian's tokenizer recognises as a language code at the start of a text."""
    return f">>{lang}<<"


def marian_piece_names(tok: Tokenizer) -> dict[int, str]:
    """Vocabulary entries renamed for HF Marian: with the `source` placement, each language
    token is `>>fr<<`, so `MarianTokenizer(">>fr<< text")` writes it before the source."""
    langs = tok.languages
    if langs is None or langs.placement != "source":
        return {}
    return {tok.lang_id(lang): marian_code(lang) for lang in langs.targets}


def banned(langs: Languages, lang: str, ratio: float) -> list[int]:
    """The ids mt's search never writes in `lang` with the guard on: the pieces outside the
    language's own, and PAD and BOS (which mt's search never writes at all)."""
    allowed = langs.allowed(lang, ratio)
    allowed[[PAD, BOS]] = False
    return [int(i) for i in (~allowed).nonzero()[0]]


def language_card(loaded: Loaded, engine: str) -> dict[str, Any] | None:
    """What `languages.json` holds for `engine` ("ctranslate2" or "marian"); None for a
    bilingual model. Per target language: how to ask for it, and the guard's banned pieces."""
    langs, tok = loaded.tokenizer.languages, loaded.tokenizer
    if langs is None:
        return None
    ratio = loaded.cfg.decode.target_vocab_ratio
    per: dict[str, Any] = {}
    for lang in langs.targets:
        ids = banned(langs, lang, ratio)
        if engine == "ctranslate2":
            ask = "source_prefix" if langs.placement == "source" else "target_prefix"
            entry: dict[str, Any] = {ask: [lang_piece(lang)]}
            entry["suppress_sequences"] = [[tok.tgt.id_to_piece(i)] for i in ids]
        elif langs.placement == "source":
            entry = {"source_prefix": marian_code(lang), "suppress_tokens": ids}
        else:
            entry = {"decoder_start_token_id": tok.lang_id(lang), "suppress_tokens": ids}
        per[lang] = entry
    return {
        "placement": langs.placement,
        "pairs": [f"{s}-{t}" for s, t in langs.pairs],
        "target_vocab_ratio": ratio,
        "languages": per,
    }


def write_card(card: dict[str, Any], out_dir: Path) -> None:
    """`languages.json` beside the model (the export's folder is renamed into place whole)."""
    (out_dir / CARD).write_text(json.dumps(card, ensure_ascii=False) + "\n", encoding="utf-8")


def how_to_ask(card: dict[str, Any], engine: str, out_dir: Path) -> list[str]:
    """The lines `mt export` prints for a multilingual model: how to ask for language L."""
    langs = list(card["languages"])
    first, path = langs[0], out_dir / CARD
    guard = f'json.load(open("{path}"))["languages"]["{first}"]'
    if engine == "ctranslate2":
        if card["placement"] == "source":
            ask = f'translate_batch([["{lang_piece(first)}", *pieces], ...])'
        else:
            ask = f'translate_batch([pieces, ...], target_prefix=[["{lang_piece(first)}"], ...])'
        keep = f'suppress_sequences={guard}["suppress_sequences"]'
    else:
        if card["placement"] == "source":
            ask = f'tokenizer(["{marian_code(first)} " + text, ...])'
        else:
            start = card["languages"][first]["decoder_start_token_id"]
            ask = f"generate(..., decoder_start_token_id={start}) (one language per call)"
        keep = f'suppress_tokens={guard}["suppress_tokens"]'
    return [
        f"a multilingual model ({', '.join(card['pairs'])}); it writes {', '.join(langs)}",
        f"  into {first}: {ask}",
        f"  mt's target-language guard (on in mt translate): {keep}",
        f"  every language's token and guard: {path}",
    ]

"""`mt import` of an M2M-100 model with NLLB-200's tokenizer: HF's ids and HF's output.

The folder of tests/support/hf_models.py's `build_nllb` is what an NLLB folder holds
(`sentencepiece.bpe.model`, `tokenizer.json` with the `fra_Latn` codes as added tokens), made by
transformers' own NllbTokenizer from a BPE sentencepiece model trained on Multi30k. The
imported model must cut real text into HF's pieces and ids and translate as HF `generate`
with `forced_bos_token_id` set to the target language's code.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.hub_models import read_slice, short_sources

from mt.checkpoint import load_model

pytest_plugins = ["support.hub_models"]  # the small NLLB-tokenizer model and its import, shared
LINES = 20
TEXTS = [
    "Die Straße hat 3 Häuser und 42 Bäume: äöü ß é ñ!",
    "Zwei  Hunde   spielen im Schnee",
    "\tEine Frau (mit Hut) sitzt auf einer Bank.",
    "   Un homme assis travaille avec ses mains.",
    "Ça coûte 12,50 € – « très » cher…",
    "",
]


@pytest.fixture(scope="module")
def hf(nllb_dir: Path):
    from transformers import M2M100ForConditionalGeneration, NllbTokenizer

    tok = NllbTokenizer.from_pretrained(nllb_dir)
    return M2M100ForConditionalGeneration.from_pretrained(nllb_dir).eval(), tok


@pytest.fixture(scope="module")
def sources(multi30k_dir: Path, tmp_path_factory) -> Path:
    return short_sources(multi30k_dir, tmp_path_factory.mktemp("src"), LINES)


def hf_generate(hf, lines: list[str], code: str, beams: int) -> list[str]:
    model, tok = hf
    tok.src_lang = "deu_Latn"
    enc = tok(lines, return_tensors="pt", padding=True)
    forced = tok.convert_tokens_to_ids(code)
    with torch.no_grad():
        out = model.generate(**enc, num_beams=beams, forced_bos_token_id=forced)
    return tok.batch_decode(out[:, 2:], skip_special_tokens=True)  # after start and language


def hf_pieces(pieces: list[str]) -> list[str]:
    """mt's names of the language tokens (`<2fra_Latn>`) as HF's (`fra_Latn`)."""
    return [p[2:-1] if p.startswith("<2") and p.endswith(">") else p for p in pieces]


def test_pieces_and_ids_are_hf_on_real_text(nllb_imported, hf, multi30k_dir):
    """Source and target ids, on Multi30k lines of three languages (val.fr has lines that
    start with spaces) and on accents, digits, odd spacing and an empty line."""
    _, tok = hf
    mt_tok = load_model(nllb_imported).tokenizer
    texts = list(TEXTS)
    for lang in ("de", "en", "fr"):
        texts += read_slice(multi30k_dir, "val", lang, 300)
    assert any(t != t.lstrip() for t in texts)
    for code in ("deu_Latn", "fra_Latn"):
        tok.src_lang, tok.tgt_lang = code, code
        for text in texts:
            ids = [mt_tok.lang_id(code)] + mt_tok.encode_src([text])[0]
            pieces = hf_pieces([mt_tok.src.id_to_piece(i) for i in ids])
            hf_ids = tok(text).input_ids
            assert pieces == tok.convert_ids_to_tokens(hf_ids), text
            assert tok.convert_tokens_to_ids(pieces) == hf_ids, text
            tgt = [mt_tok.lang_id(code)] + mt_tok.encode_tgt([text])[0]
            tgt_pieces = hf_pieces([mt_tok.tgt.id_to_piece(i) for i in tgt]) + ["</s>"]
            assert tok.convert_tokens_to_ids(tgt_pieces) == tok(text_target=text).input_ids
    assert mt_tok.encode_src([""]) == [[3]]  # EOS alone, as HF's [lang, </s>]


def test_the_import_reads_nllb_codes_and_the_default_source(nllb_imported, hf):
    _, tok = hf
    ckpt = load_model(nllb_imported)
    codes = ckpt.tokenizer.languages.languages
    assert len(codes) == 202 and codes[0] == "ace_Arab" and "fra_Latn" in codes
    assert ckpt.cfg.data.src_lang == "deu_Latn"  # tokenizer_config.json's src_lang
    assert ckpt.tokenizer.tgt_vocab_size == len(tok) + 1  # + the decoder's start row


@pytest.mark.parametrize("code, iso", [("fra_Latn", "fr"), ("eng_Latn", "en")])
def test_translation_equals_hf_generate_with_forced_bos(
    nllb_imported, hf, sources, mt_cli, own_cpu, code, iso
):
    """Under the CPU's own `auto`: what a user gets with no --dtype."""
    lines = sources.read_text(encoding="utf-8").splitlines()
    for beams, flags in ((1, ("--greedy",)), (4, ("--beam", "4"))):
        args = ("--to", code, "--input", sources)
        result = mt_cli("translate", nllb_imported, *flags, *args, env=own_cpu)
        assert result.rc == 0, result.err
        assert result.out.splitlines() == hf_generate(hf, lines, code, beams), (code, beams)
        if beams == 1:  # the ISO code names the same language (the search is not in question)
            by_iso = mt_cli("translate", nllb_imported, *flags, "--to", iso, "--input", sources)
            assert by_iso.rc == 0 and by_iso.out == result.out, by_iso.err


def test_score_equals_hf_log_probabilities(nllb_imported, hf, sources, tmp_path, mt_cli, own_cpu):
    model, tok = hf
    src = sources.read_text(encoding="utf-8").splitlines()[:6]
    tgt = hf_generate(hf, src, "fra_Latn", 1)[:3] + ["Un chien court.", "Deux hommes.", ""]
    (tmp_path / "s").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "t").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    args = ("--src", tmp_path / "s", "--tgt", tmp_path / "t", "--to", "fra_Latn")
    result = mt_cli("score", nllb_imported, *args, env=own_cpu)
    assert result.rc == 0, result.err
    ours = [float(line.split("\t")[0]) for line in result.out.splitlines()]
    assert len(ours) == len(src)
    tok.src_lang, tok.tgt_lang = "deu_Latn", "fra_Latn"
    for s, t, mine in zip(src, tgt, ours):
        enc = tok([s], text_target=[t], return_tensors="pt")
        with torch.no_grad():
            logits = model(**enc).logits[0]
        labels = enc["labels"][0]
        lp = logits.log_softmax(-1).gather(1, labels[:, None])[1:].sum().item()
        assert abs(mine - lp) <= 1e-4 * abs(lp), (s, t, mine, lp)

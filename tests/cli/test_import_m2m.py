"""`mt import` of M2M100ForConditionalGeneration (M2M-100; NLLB-200 shares the architecture):
a multilingual mt model whose output is HF's, language by language.

The small model of tests/support/hub_models.py (one spm model over de, en and fr; trained de->en and
de->fr) is imported; `mt translate --from de --to fr` must print what HF `generate` writes with
`forced_bos_token_id` = `__fr__`, greedy and beam 4, and `mt score` HF's log-probabilities of
the target after its language token (the token the decoder is forced to read).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.hub_models import short_sources

from mt.checkpoint import load_model

pytest_plugins = ["support.hub_models"]  # the small M2M-100 model and its import, shared
LINES = 20


@pytest.fixture(scope="module")
def hf(m2m_dir: Path):
    from transformers import M2M100ForConditionalGeneration, M2M100Tokenizer

    tok = M2M100Tokenizer.from_pretrained(m2m_dir)
    tok.src_lang = "de"
    return M2M100ForConditionalGeneration.from_pretrained(m2m_dir).eval(), tok


@pytest.fixture(scope="module")
def sources(multi30k_dir: Path, tmp_path_factory) -> Path:
    return short_sources(multi30k_dir, tmp_path_factory.mktemp("src"), LINES)


def hf_generate(hf, lines: list[str], lang: str, beams: int) -> list[str]:
    model, tok = hf
    enc = tok(lines, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**enc, num_beams=beams, forced_bos_token_id=tok.get_lang_id(lang))
    return tok.batch_decode(out[:, 2:], skip_special_tokens=True)  # after start and language


def test_source_pieces_and_language_token_are_hf(m2m_imported, hf):
    _, tok = hf
    mt_tok = load_model(m2m_imported).tokenizer
    for text in ["Zwei  Hunde spielen im Schnee.", "Die Straße hat 3 Häuser: äöü ß é!", ""]:
        hf_pieces = tok.convert_ids_to_tokens(tok(text).input_ids)
        ids = [mt_tok.lang_id("de")] + mt_tok.encode_src([text])[0]
        pieces = [mt_tok.src.id_to_piece(i) for i in ids]
        assert ["__de__"] + pieces[1:] == hf_pieces and pieces[0] == "<2de>"


@pytest.mark.parametrize("dtype", ["auto", "fp32"])
@pytest.mark.parametrize("lang", ["en", "fr"])
def test_translation_equals_hf_generate(m2m_imported, hf, sources, mt_cli, own_cpu, lang, dtype):
    """Under the CPU's own `auto` (a user's default) and in fp32 named."""
    lines = sources.read_text(encoding="utf-8").splitlines()
    for beams, flags in ((1, ("--greedy",)), (4, ("--beam", "4"))):
        result = mt_cli(
            "translate", m2m_imported, *flags, "--from", "de", "--to", lang, "--dtype", dtype,
            "--input", sources, env=own_cpu,
        )  # fmt: skip
        assert result.rc == 0, result.err
        assert result.out.splitlines() == hf_generate(hf, lines, lang, beams), (lang, beams)


def test_the_source_language_defaults_to_the_imported_one(m2m_imported, sources, mt_cli):
    plain = mt_cli("translate", m2m_imported, "--to", "fr", "--input", sources)
    named = mt_cli("translate", m2m_imported, "--from", "de", "--to", "fr", "--input", sources)
    assert plain.rc == named.rc == 0 and plain.out == named.out
    missing = mt_cli("translate", m2m_imported, "--input", sources)
    assert missing.rc == 2 and "--to" in missing.err


def test_score_equals_hf_log_probabilities(m2m_imported, hf, sources, tmp_path, mt_cli, own_cpu):
    model, tok = hf
    src = sources.read_text(encoding="utf-8").splitlines()[:8]
    tgt = hf_generate(hf, src, "fr", 1)[:4] + ["Un chien court.", "Deux hommes."] * 2
    (tmp_path / "s").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "t").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    args = ("--src", tmp_path / "s", "--tgt", tmp_path / "t", "--to", "fr")
    result = mt_cli("score", m2m_imported, *args, env=own_cpu)
    assert result.rc == 0, result.err
    ours = [float(line.split("\t")[0]) for line in result.out.splitlines()]
    tok.tgt_lang = "fr"
    for s, t, mine in zip(src, tgt, ours):
        enc = tok([s], text_target=[t], return_tensors="pt")
        with torch.no_grad():
            logits = model(**enc).logits[0]
        labels = enc["labels"][0]
        lp = logits.log_softmax(-1).gather(1, labels[:, None])[1:].sum().item()
        assert abs(mine - lp) <= 1e-4 * abs(lp), (s, t, mine, lp)


def test_serve_lists_and_translates_its_languages(m2m_imported, tmp_path, mt_cli):
    import httpx
    from support.processes import start_server

    want = mt_cli("translate", m2m_imported, "--from", "de", "--to", "fr", stdin="Ein Hund.\n")
    server = start_server(m2m_imported, log=tmp_path / "serve.log")
    try:
        langs = {x["code"]: x["targets"] for x in httpx.get(server.url + "/languages").json()}
        assert len(langs) == 100 and "fr" in langs["de"] and "de" not in langs["de"]
        form = {"q": "Ein Hund.", "source": "de", "target": "fr"}
        got = httpx.post(server.url + "/translate", json=form, timeout=60)
        assert got.status_code == 200, got.text
        assert got.json()["translatedText"] == want.out.strip()
    finally:
        server.stop()


def test_attention_shows_the_forced_language_token(m2m_imported, tmp_path, mt_cli):
    from mt.translation.session import Session

    session = Session([m2m_imported], "cpu")
    att = session.attention("Zwei Hunde spielen im Schnee.", to="fr")
    assert att.tgt_in_tokens[0] == "<2fr>" and att.src_tokens[0] == "<2de>"
    T, S = len(att.tgt_in_tokens), len(att.src_tokens)
    assert att.maps.cross[-1].shape[-2:] == (T, S) and att.maps.decoder[-1].shape[-2:] == (T, T)
    fr = mt_cli("translate", m2m_imported, "--to", "fr", stdin="Zwei Hunde spielen im Schnee.\n")
    assert att.translation == fr.out.strip()
    html = tmp_path / "attn.html"
    result = mt_cli("attention", m2m_imported, "--src", "Ein Hund.", "--to", "fr", "--html", html)
    assert result.rc == 0 and html.stat().st_size > 1000, result.err

"""Everything mt does with a model it trained, on an imported one (tests/support/hub_models.py).

The small Marian model imported through `mt import` is fine-tuned with `--init-from` (its
tokenizer kept), evaluated, served over HTTP, shown inside (`mt attention`, `mt vectors`),
translated with protected spans and int8, and exported to CTranslate2, whose greedy output
must be mt's.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
import torch
import yaml

from mt.checkpoint import load_model

pytest_plugins = ["support.hub_models"]  # the small Marian model and its import, shared
LINES = ["Ein Hund läuft über die Wiese.", "Zwei Männer spielen Fußball.", ""]
LINES += ["Eine Frau sitzt auf einer Bank.", "Ein kleines Mädchen lacht."]


@pytest.fixture(scope="module")
def slice_dir(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`ft.{de,en}`: 300 pairs the model never saw; `dev.{de,en}`: 30 dev pairs."""
    root = tmp_path_factory.mktemp("ft_data")
    for lang in ("de", "en"):
        with gzip.open(multi30k_dir / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
        (root / f"ft.{lang}").write_text("\n".join(lines[10_000:10_300]) + "\n", "utf-8")
        with gzip.open(multi30k_dir / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
        (root / f"dev.{lang}").write_text("\n".join(lines[:30]) + "\n", "utf-8")
    return root


def ft_config(folder: Path, data: Path, **train: object) -> Path:
    """A few fine-tuning steps on the slice, written to `folder/ft.yaml`."""
    cfg: dict = {
        "data": {"root": str(data), "train": "ft", "valid": "dev"},
        "train": {
            "device": "cpu",
            "precision": "fp32",
            "threads": 1,
            "max_tokens": 1024,
            "schedule": "constant",
            "lr": 0.001,
            "warmup": 2,
            "max_steps": 4,
            "log_every": 1,
            "eval_every": 4,
            "eval_bleu": False,
            "keep_last": 0,
            "loader_workers": 0,
            **train,
        },
    }
    path = folder / "ft.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def test_fine_tuning_keeps_the_imported_tokenizer(imported, slice_dir, tmp_path, mt_cli):
    config = ft_config(tmp_path, slice_dir)
    run = tmp_path / "run"
    result = mt_cli("train", config, "--run-dir", run, "--init-from", imported)
    assert result.rc == 0, result.err
    base, tuned = load_model(imported), load_model(run / "last.pt")
    assert tuned.tokenizer.pieces == base.tokenizer.pieces
    assert tuned.tokenizer.vocabulary_key() == base.tokenizer.vocabulary_key()
    assert tuned.cfg.model == base.cfg.model
    moved = [
        k
        for k, v in base.model.state_dict().items()
        if not torch.equal(v, tuned.model.state_dict()[k])
    ]
    assert moved and "output_bias" not in moved  # trained, but the fixed bias stays fixed
    out = mt_cli("translate", run / "last.pt", "--greedy", stdin="\n".join(LINES) + "\n")
    assert out.rc == 0 and out.out.count("\n") == len(LINES), out.err


def test_a_fine_tuning_run_resumes_exactly(imported, slice_dir, tmp_path, mt_cli):
    """4 steps straight, or 2, a stop, and --resume to 4: the same weights."""
    config = ft_config(tmp_path, slice_dir, max_steps=4, eval_every=2)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    result = mt_cli("train", config, "--run-dir", straight, "--init-from", imported)
    assert result.rc == 0, result.err
    half = mt_cli("train", config, "--run-dir", resumed, "--init-from", imported,
                  "--set", "train.max_steps=2")  # fmt: skip
    assert half.rc == 0, half.err
    more = mt_cli("train", config, "--run-dir", resumed, "--init-from", imported, "--resume")
    assert more.rc == 0, more.err
    wa = torch.load(straight / "last.pt", weights_only=True)
    wb = torch.load(resumed / "last.pt", weights_only=True)
    assert wa["step"] == wb["step"] == 4 and wb["tokenizer"]["pieces"] == wa["tokenizer"]["pieces"]
    for name, tensor in wa["model"].items():
        torch.testing.assert_close(wb["model"][name], tensor, rtol=1e-5, atol=1e-6, msg=name)


def test_fine_tuning_with_a_new_vocabulary_keeps_the_shared_pieces(
    imported, slice_dir, tmp_path, mt_cli
):
    config = ft_config(tmp_path, slice_dir, init_vocab="new", lr=1e-9, max_steps=2)
    cfg = yaml.safe_load(config.read_text(encoding="utf-8"))
    config.write_text(yaml.safe_dump({**cfg, "tokenizer": {"vocab_size": 300}}), "utf-8")
    run = tmp_path / "run"
    result = mt_cli("train", config, "--run-dir", run, "--init-from", imported)
    assert result.rc == 0, result.err
    line = next(x for x in result.err.splitlines() if x.startswith("new vocabulary:"))
    kept, total = (int(n.replace(",", "")) for n in re.findall(r"[\d,]+", line)[:2])
    base, tuned = load_model(imported), load_model(run / "last.pt")
    assert tuned.tokenizer.pieces is None and tuned.tokenizer.src_vocab_size < 400
    assert 0 < kept < total == tuned.tokenizer.src_vocab_size - 4
    old_rows, new_rows = base.model.src_embed.weight, tuned.model.src_embed.weight
    shared = [
        (i, j)
        for i in range(4, tuned.tokenizer.src_vocab_size)
        if (j := base.tokenizer.src.piece_to_id(tuned.tokenizer.src.id_to_piece(i))) > 3
    ]
    assert len(shared) == kept
    for i, j in shared:  # lr 1e-9: the rows are still the checkpoint's
        assert torch.allclose(new_rows[i], old_rows[j], atol=1e-5)
    out = mt_cli("translate", run / "last.pt", "--greedy", stdin="\n".join(LINES) + "\n")
    assert out.rc == 0 and out.out.count("\n") == len(LINES), out.err


def test_eval_scores_the_imported_model(imported, slice_dir, mt_cli):
    result = mt_cli(
        "eval", imported, "--src", slice_dir / "dev.de", "--ref", slice_dir / "dev.en", "--json"
    )
    assert result.rc == 0, result.err
    assert '"bleu"' in result.out


def test_capitalised_lines_are_recased_on_an_imported_model(imported, mt_cli):
    """ALL-CAPS and Title Case lines are translated in their usual case, whose spellings are
    ranked by sentencepiece's piece scores: the piece table gives the scores of its pieces."""
    import sentencepiece as spm

    tok = load_model(imported).tokenizer
    sp = spm.SentencePieceProcessor(model_proto=tok.src_proto)
    text = [i for i in range(4, 80) if not tok.src.is_control(i)]
    scores = [tok.src.get_score(i) for i in text]
    assert scores == [sp.get_score(sp.piece_to_id(tok.src.id_to_piece(i))) for i in text]
    assert len(text) > 50 and len(set(scores)) > 10
    assert tok.src.get_score(3) == 0.0  # EOS: no text
    lines = "ZWEI HUNDE SPIELEN IM SCHNEE.\nAufruf: %s [OPTION]… [ DATEI | ARG1 ARG2 ]\n"
    result = mt_cli("translate", imported, "--greedy", stdin=lines)
    assert result.rc == 0, result.err
    out = result.out.splitlines()
    assert len(out) == 2 and all(out), result.err


def test_spans_int8_attention_and_vectors(imported, tmp_path, mt_cli):
    spans = "Ein Hund %s läuft.\nEine Frau mit {name} sitzt.\n"
    result = mt_cli("translate", imported, "--greedy", stdin=spans)
    assert result.rc == 0, result.err
    first, second = result.out.splitlines()
    assert "%s" in first and "{name}" in second
    plain = mt_cli("translate", imported, "--greedy", stdin="\n".join(LINES) + "\n")
    int8 = mt_cli("translate", imported, "--greedy", "--int8", stdin="\n".join(LINES) + "\n")
    assert int8.rc == 0, int8.err
    assert len(int8.out.splitlines()) == len(plain.out.splitlines()) == len(LINES)
    html = tmp_path / "attn.html"
    att = mt_cli("attention", imported, "--src", LINES[0], "--html", html)
    assert att.rc == 0, att.err
    assert html.stat().st_size > 1000
    words = tmp_path / "words.de"
    words.write_text("Der Hund schläft.\nEin Hund bellt laut.\n", encoding="utf-8")
    png = tmp_path / "vec.png"
    vec = mt_cli("vectors", imported, "--word", "Hund", "--input", words, "-o", png)
    assert vec.rc == 0, vec.err
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_serve_answers_as_the_cli(imported, tmp_path, mt_cli):
    import httpx
    from support.processes import start_server

    want = mt_cli("translate", imported, stdin=LINES[0] + "\n")
    server = start_server(imported, log=tmp_path / "serve.log")
    try:
        form = {"q": LINES[0], "source": "de", "target": "en"}
        got = httpx.post(server.url + "/translate", json=form, timeout=60)
        assert got.status_code == 200, got.text
        assert got.json()["translatedText"] == want.out.strip()
        langs = httpx.get(server.url + "/languages", timeout=60).json()
        assert [lang["code"] for lang in langs] == ["de"] and langs[0]["targets"] == ["en"]
    finally:
        server.stop()


def test_ctranslate2_export_decodes_as_mt(imported, tmp_path, mt_cli):
    ctranslate2 = pytest.importorskip("ctranslate2", reason="needs the [export] extra")
    import sentencepiece as spm

    out = tmp_path / "ct2"
    result = mt_cli("export", imported, out, "--to", "ctranslate2")
    assert result.rc == 0, result.err
    lines = [line for line in LINES if line]
    limit = 20
    ours = mt_cli("translate", imported, "--greedy", "--max-len-b", str(limit), "--max-len-a", "0",
                  stdin="\n".join(lines) + "\n")  # fmt: skip
    assert ours.rc == 0, ours.err
    tok = load_model(imported).tokenizer
    translator = ctranslate2.Translator(str(out))
    pieces = [tok.src.encode(line, out_type=str) for line in lines]
    found = translator.translate_batch(pieces, beam_size=1, max_decoding_length=limit)
    target = spm.SentencePieceProcessor(model_proto=tok.tgt_proto)
    theirs = [target.decode_pieces(r.hypotheses[0]) for r in found]
    assert theirs == ours.out.splitlines()

"""`mt import` of a MarianMTModel (OPUS-MT): exactly HF's model, tokenizer and decoding rules.

A small Marian model is built with transformers' own classes (tests/support/hf_models.py: spm models
and weights briefly trained on a Multi30k slice, random logit biases), saved as
`save_pretrained` saves it, and imported through the real command line. On that model
`mt translate` must print what HF `generate` writes, greedy and with beam 4 (with no flag: the
checkpoint carries HF's rules; up to 62 new tokens), under the CPU's own `auto` and in fp32
named, `mt score` HF's log-probabilities, and the tokenizer HF's pieces and ids. A folder
whose generation config names no `num_beams` decodes greedy, and `--beam 4` beam search.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support.hub_models import short_sources

from mt.checkpoint import load_model

pytest_plugins = ["support.hub_models"]  # the small Marian model and its import, shared
LINES = 30
TEXTS = [
    "Ein Mann fährt mit dem Fahrrad über die Brücke.",
    "Zwei  Hunde   spielen im Schnee ",
    "Die Straße hat 3 Häuser und 42 Bäume: äöü ß é ñ!",
    "",
    "\tEine Frau (mit Hut) sitzt auf einer Bank.",
]


@pytest.fixture(scope="module")
def hf(marian_dir: Path):
    from transformers import MarianMTModel, MarianTokenizer

    model = MarianMTModel.from_pretrained(marian_dir).eval()
    return model, MarianTokenizer.from_pretrained(marian_dir)


@pytest.fixture(scope="module")
def sources(multi30k_dir: Path, tmp_path_factory) -> Path:
    """Short dev sentences (the size of those the small model was trained on)."""
    return short_sources(multi30k_dir, tmp_path_factory.mktemp("src"), LINES)


def hf_generate(hf, lines: list[str], **settings) -> list[str]:
    model, tok = hf
    enc = tok(lines, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**enc, **settings)
    return tok.batch_decode(out, skip_special_tokens=True)


def test_the_tokenizer_cuts_and_numbers_text_as_hf(imported, hf):
    _, tok = hf
    vocab = json.loads((Path(tok.name_or_path) / "vocab.json").read_text(encoding="utf-8"))
    mt_tok = load_model(imported).tokenizer
    for text in TEXTS:
        hf_ids = tok(text).input_ids
        mt_ids = mt_tok.encode_src([text.strip()])[0]
        pieces = [mt_tok.src.id_to_piece(i) for i in mt_ids]
        assert pieces == tok.convert_ids_to_tokens(hf_ids), text
        assert [vocab[p] for p in pieces] == hf_ids, text
        labels = tok(text_target=text).input_ids
        mt_tgt = mt_tok.encode_tgt([text.strip()])[0]
        assert [vocab[mt_tok.tgt.id_to_piece(i)] for i in mt_tgt] == labels[:-1], text
    assert mt_tok.encode_src([""]) == [[3]]  # an empty line is EOS alone, as HF's [eos]


# How a test decodes: the CPU's own `auto` (what a user gets with no --dtype) and fp32 named.
DTYPES = {"auto": (), "fp32": ("--dtype", "fp32")}


@pytest.mark.parametrize("dtype", DTYPES)
def test_greedy_output_equals_hf_generate(imported, hf, sources, mt_cli, own_cpu, dtype):
    lines = sources.read_text(encoding="utf-8").splitlines()
    result = mt_cli(
        "translate", imported, "--greedy", *DTYPES[dtype], "--input", sources, env=own_cpu
    )
    assert result.rc == 0, result.err
    ours = result.out.splitlines()
    assert ours == hf_generate(hf, lines, num_beams=1)
    assert len(set(ours)) > LINES // 3, "the model should say different things"


@pytest.mark.parametrize("dtype", DTYPES)
def test_beam_output_equals_hf_generate_with_only_the_beam_flag(
    imported, hf, sources, mt_cli, own_cpu, dtype
):
    lines = sources.read_text(encoding="utf-8").splitlines()
    flags = (*DTYPES[dtype], "--input", sources)
    # No flag: the folder's own generation config (4 beams, max_length 64), as generate() reads it.
    plain = mt_cli("translate", imported, *flags, env=own_cpu)
    assert plain.rc == 0, plain.err
    assert plain.out.splitlines() == hf_generate(hf, lines)
    wide = mt_cli("translate", imported, "--beam", "6", *flags, env=own_cpu)
    assert wide.out.splitlines() == hf_generate(hf, lines, num_beams=6)


@pytest.fixture(scope="module")
def greedy_folder(marian_dir: Path, mt_cli, tmp_path_factory) -> tuple[Path, Path]:
    """The folder as `save_pretrained` writes one whose config names no `num_beams` (HF's
    default: greedy), and its import."""
    folder = tmp_path_factory.mktemp("plain") / "marian"
    folder.mkdir()
    for f in marian_dir.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    gen = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    del gen["num_beams"]
    (folder / "generation_config.json").write_text(json.dumps(gen), encoding="utf-8")
    out = folder.parent / "plain.pt"
    result = mt_cli("import", folder, "-o", out)
    assert result.rc == 0, result.err
    return folder, out


def test_a_folder_without_num_beams_decodes_greedy_and_beam_as_asked(
    greedy_folder, hf, sources, mt_cli, own_cpu
):
    """HF's default search is greedy; `--beam 4` is beam search all the same."""
    from transformers import MarianMTModel

    folder, imported = greedy_folder
    model = MarianMTModel.from_pretrained(folder).eval()
    assert model.generation_config.num_beams in (None, 1)  # generate() decodes greedy
    lines = sources.read_text(encoding="utf-8").splitlines()
    plain = mt_cli("translate", imported, "--input", sources, env=own_cpu)
    beam = mt_cli("translate", imported, "--beam", "4", "--input", sources, env=own_cpu)
    assert plain.rc == beam.rc == 0, beam.err
    assert plain.out.splitlines() == hf_generate((model, hf[1]), lines)
    assert beam.out.splitlines() == hf_generate((model, hf[1]), lines, num_beams=4)
    assert plain.out != beam.out  # the two searches part on this slice


def test_the_checkpoint_carries_hf_decoding_rules(imported):
    d = load_model(imported).cfg.decode
    # generation_config.json: num_beams 4, max_length 64 (start + 62 tokens + EOS), lp 1.0
    assert (d.beam, d.greedy, d.alpha, d.penalty, d.hf_stopping) == (4, False, 1.0, "power", True)
    assert (d.max_len_a, d.max_len_b) == (0.0, 62)


def test_length_flags_limit_the_output_as_max_length(imported, hf, sources, mt_cli):
    lines = sources.read_text(encoding="utf-8").splitlines()
    args = ("--greedy", "--max-len-a", "0", "--max-len-b", "3", "--input", sources)
    result = mt_cli("translate", imported, *args)
    assert result.rc == 0, result.err
    assert result.out.splitlines() == hf_generate(hf, lines, num_beams=1, max_length=5)


def test_score_equals_hf_log_probabilities(imported, hf, sources, tmp_path, mt_cli, own_cpu):
    model, tok = hf
    src = sources.read_text(encoding="utf-8").splitlines()
    tgt = hf_generate(hf, src, num_beams=1)[:10] + ["A dog runs.", "Zwei Männer."] * 5
    src = src[:20]
    (tmp_path / "s").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "t").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    result = mt_cli(
        "score", imported, "--src", tmp_path / "s", "--tgt", tmp_path / "t", env=own_cpu
    )
    assert result.rc == 0, result.err
    ours = [float(line.split("\t")[0]) for line in result.out.splitlines()]
    for s, t, mine in zip(src, tgt, ours):
        enc = tok([s], text_target=[t], return_tensors="pt")
        with torch.no_grad():
            logits = model(**enc).logits
        lp = logits.log_softmax(-1)[0].gather(1, enc["labels"][0][:, None]).sum().item()
        assert abs(mine - lp) <= 1e-4 * abs(lp), (s, t, mine, lp)


@pytest.mark.parametrize(
    "case, expect",
    [
        ("no_weights", "no weights"),
        ("no_tokenizer", "target.spm: missing"),
        ("model_type", "model_type 'bert' is not supported"),
        ("corrupt", "model.safetensors: not readable safetensors"),
        ("no_config", "config.json: missing"),
        ("hub_offline", "cannot fetch from the hub"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    case, expect, marian_dir, tmp_path, capsys, monkeypatch
):
    from support.inprocess import run_in_process

    folder = tmp_path / "model"
    folder.mkdir()
    for f in marian_dir.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    source = str(folder)
    if case == "no_weights":
        (folder / "model.safetensors").unlink()
    elif case == "no_tokenizer":
        (folder / "target.spm").unlink()
    elif case == "model_type":
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    elif case == "corrupt":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif case == "no_config":
        (folder / "config.json").unlink()
    elif case == "hub_offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-cache"))
        source = "Helsinki-NLP/opus-mt-de-en"
    out = tmp_path / "out.pt"
    rc, _, err = run_in_process(["import", source, "-o", out], capsys, monkeypatch)
    assert rc == 2, err
    assert expect in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and not list(tmp_path.glob("*.tmp*"))


def test_export_to_marian_and_import_back_translates_the_same(tiny_run, mt_cli, tmp_path):
    """mt -> HF Marian -> mt: the imported model's greedy output is the trained model's."""
    lines = ["Ein Hund läuft durch den Schnee.", "Zwei Männer spielen Fußball.", ""]
    lines += ["Eine Frau mit einem roten Hut sitzt auf einer Bank im Park."]
    text = "\n".join(lines) + "\n"
    exported = tmp_path / "marian"
    result = mt_cli("export", tiny_run / "best.pt", exported, "--to", "marian")
    assert result.rc == 0, result.err
    back = tmp_path / "back.pt"
    result = mt_cli("import", exported, "-o", back, "--src-lang", "de", "--tgt-lang", "en")
    assert result.rc == 0, result.err
    # The export's generation config says max_length; mt's own limit is 1.2 * src + 10.
    same = ("--greedy", "--max-len-a", "1.2", "--max-len-b", "10")
    before = mt_cli("translate", tiny_run / "best.pt", *same, stdin=text)
    after = mt_cli("translate", back, *same, stdin=text)
    assert before.rc == after.rc == 0, after.err
    assert after.out == before.out and before.out.count("\n") == len(lines)

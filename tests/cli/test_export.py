"""`mt export`: CTranslate2 and HF Marian exports compute what mt computes, on real data.

The tiny Multi30k run of conftest.py (`tiny_run`) is exported through the real command line.
CTranslate2 decodes a 100-line slice of test_2016_flickr greedily and must print what
`mt translate --greedy` prints; the Marian export must give mt's logits and greedy output.
Both engines take one length limit per batch where mt has one per sentence, so the slice is
decoded in groups of equal source length, each with mt's limit.
"""

from __future__ import annotations

import gzip
import os
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

LINES = 100
MAX_DIFFERENT = 3  # "all but a few": float noise may flip a near-tie in a long greedy output


@pytest.fixture(scope="module")
def flickr_de(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    with gzip.open(multi30k_dir / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(LINES)]
    path = tmp_path_factory.mktemp("flickr") / "test.de"
    path.write_text("".join(lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def mt_greedy(tiny_run, mt_cli, flickr_de, own_cpu) -> list[str]:
    """`mt translate --greedy` as a user runs it here: this CPU's own `auto`."""
    args = ("--greedy", "--input", flickr_de)
    result = mt_cli("translate", tiny_run / "best.pt", *args, env=own_cpu)
    assert result.rc == 0, result.err
    return result.out.splitlines()


def _exported(mt_cli, tiny_run: Path, folder: Path, target: str) -> Path:
    out = folder / target
    result = mt_cli("export", tiny_run / "best.pt", out, "--to", target)
    assert result.rc == 0, result.err
    return out


@pytest.fixture(scope="module")
def ct2_dir(tiny_run, mt_cli, tmp_path_factory) -> Path:
    pytest.importorskip("ctranslate2", reason="needs the [export] extra (ctranslate2)")
    return _exported(mt_cli, tiny_run, tmp_path_factory.mktemp("export"), "ctranslate2")


@pytest.fixture(scope="module")
def marian_dir(tiny_run, mt_cli, tmp_path_factory) -> Path:
    pytest.importorskip("transformers", reason="needs the [export] extra (transformers)")
    return _exported(mt_cli, tiny_run, tmp_path_factory.mktemp("export"), "marian")


def _by_limit(lengths: list[int], a: float, b: int) -> dict[int, list[int]]:
    """Line indices grouped by mt's output limit floor(a * src_len + b), src_len counting EOS."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, n in enumerate(lengths):
        groups[int(a * (n + 1) + b)].append(i)
    return groups


def _decode_in_groups(
    pieces: list[list[str]], decode: Callable[[list[int], int], list[list[int]]]
) -> list[list[int]]:
    """Token ids per line from `decode(rows, limit)`, run once per group of equal limit."""
    from mt.config import DecodeConfig

    d = DecodeConfig()
    out: list[list[int]] = [[] for _ in pieces]
    for limit, rows in _by_limit([len(p) for p in pieces], d.max_len_a, d.max_len_b).items():
        for r, ids in zip(rows, decode(rows, limit)):
            out[r] = ids
    return out


def test_ctranslate2_greedy_equals_mt_greedy(ct2_dir, flickr_de, mt_greedy):
    import ctranslate2
    import sentencepiece as spm

    assert {"model.bin", "config.json", "spm.model"} <= {p.name for p in ct2_dir.iterdir()}
    sp = spm.SentencePieceProcessor(model_file=str(ct2_dir / "spm.model"))
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", intra_threads=1)
    lines = flickr_de.read_text(encoding="utf-8").splitlines()
    pieces = [sp.encode(line.strip(), out_type=str) for line in lines]  # the model adds </s>

    def decode(rows: list[int], limit: int) -> list[list[int]]:
        results = translator.translate_batch(
            [pieces[r] for r in rows], beam_size=1, max_decoding_length=limit
        )
        return [[sp.piece_to_id(p) for p in res.hypotheses[0]] for res in results]

    ids = _decode_in_groups(pieces, decode)
    texts = [sp.decode([i for i in x if i > 3]) for x in ids]  # mt drops pad/unk/bos/eos
    same = sum(x == y for x, y in zip(texts, mt_greedy))
    assert same >= LINES - MAX_DIFFERENT, f"{same}/{LINES} identical"


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_marian_export_gives_mt_logits_and_greedy_output(
    marian_dir, tiny_run, flickr_de, mt_greedy
):
    from transformers import MarianMTModel, MarianTokenizer

    from mt.batching import pad
    from mt.checkpoint import load_model
    from mt.tokenizer import BOS, EOS, PAD

    loaded = load_model(tiny_run / "best.pt")
    hf = MarianMTModel.from_pretrained(marian_dir).eval()
    lines = flickr_de.read_text(encoding="utf-8").splitlines()
    ids = loaded.tokenizer.encode_src(lines)
    # The tokenizer files load and give mt's ids (EOS appended, as mt's encoder expects).
    hf_tok = MarianTokenizer.from_pretrained(marian_dir)
    assert hf_tok(lines[:8], padding=True).input_ids == pad(ids[:8]).tolist()

    # Teacher-forced on mt's own greedy outputs: the same logits at every real position.
    tgt = [loaded.tokenizer.encode_tgt([t])[0] for t in mt_greedy[:16]]
    src, tgt_in = pad(ids[:16]), pad([[BOS] + t for t in tgt])
    with torch.inference_mode():
        ours = loaded.model(src, tgt_in)
        theirs = hf(input_ids=src, attention_mask=src.ne(PAD), decoder_input_ids=tgt_in).logits
    real = tgt_in.ne(PAD)
    assert (ours - theirs)[real].abs().max() < 1e-4

    def decode(rows: list[int], limit: int) -> list[list[int]]:
        batch = pad([ids[r] for r in rows])
        with torch.inference_mode():  # the saved generation config: greedy needs num_beams=1
            out = hf.generate(
                input_ids=batch, attention_mask=batch.ne(PAD), num_beams=1, max_new_tokens=limit + 1
            )
        return [[i for i in seq[1:] if i != EOS and i != PAD] for seq in out.tolist()]

    pieces = [loaded.tokenizer.src.encode(line, out_type=str) for line in lines]
    texts = [loaded.tokenizer.decode_tgt(x) for x in _decode_in_groups(pieces, decode)]
    same = sum(x == y for x, y in zip(texts, mt_greedy))
    assert same >= LINES - MAX_DIFFERENT, f"{same}/{LINES} identical"


def test_an_unknown_target_is_one_line(tiny_run, mt_cli, tmp_path):
    result = mt_cli("export", tiny_run / "best.pt", tmp_path / "out", "--to", "onnx")
    assert result.rc == 2 and result.out == ""
    assert result.err == "mt: error: --to must be one of ctranslate2, marian, got 'onnx'\n"
    assert list(tmp_path.iterdir()) == []


def test_an_existing_out_dir_is_kept_unless_forced(ct2_dir, tiny_run, mt_cli, tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "keep.txt").write_text("mine", encoding="utf-8")
    refused = mt_cli("export", tiny_run / "best.pt", out, "--to", "ctranslate2")
    assert (
        refused.rc == 2 and refused.err == f"mt: error: {out} exists; add --force to replace it\n"
    )
    assert [p.name for p in out.iterdir()] == ["keep.txt"]

    forced = mt_cli("export", tiny_run / "best.pt", out, "--to", "ctranslate2", "--force")
    assert forced.rc == 0, forced.err
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in ct2_dir.iterdir())
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary or old folder left


def test_a_missing_package_names_the_extra(tiny_run, mt_process, tmp_path):
    """Without ctranslate2 (a stand-in that fails to import, so a fresh interpreter is what is
    tested): one line with the pip command."""
    blocker = tmp_path / "blocked" / "ctranslate2"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('not installed')\n", encoding="utf-8")
    result = mt_process(
        "export",
        tiny_run / "best.pt",
        tmp_path / "out",
        "--to",
        "ctranslate2",
        env={
            "PYTHONPATH": os.pathsep.join(
                [str(tmp_path / "blocked"), os.environ.get("PYTHONPATH", "")]
            )
        },
    )
    assert result.rc == 2 and result.out == ""
    assert result.err.count("\n") == 1
    assert "pip install 'mt[export]'" in result.err
    assert not (tmp_path / "out").exists()

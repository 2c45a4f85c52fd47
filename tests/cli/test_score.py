"""`mt score`: forced decoding gives beam search's own score for beam search's own output.

The tiny Multi30k run of conftest.py (`tiny_run`) translates a 100-line slice of
test_2016_flickr with `--nbest 2`; scoring those outputs through `mt score` must give back the
printed scores. The printed scores are rounded to 4 decimals, and the outputs are detokenized
text that `mt score` tokenizes again, so the in-process test compares the token ids too.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import pytest
import torch
import yaml

NBEST_LINE = re.compile(r"^(\d+) \|\|\| (.*) \|\|\| (-?\d+\.\d+)$")
LINES = 100


@pytest.fixture(scope="module")
def flickr(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The first LINES pairs of test_2016_flickr as plain text files."""
    folder = tmp_path_factory.mktemp("flickr")
    paths = []
    for lang in ("de", "en"):
        with gzip.open(multi30k_dir / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = [next(f) for _ in range(LINES)]
        path = folder / f"test.{lang}"
        path.write_text("".join(lines), encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1]


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_scores_of_beam_output_equal_the_beam_scores(tiny_run, mt_cli, flickr, tmp_path, own_cpu):
    """Both commands with default flags on this CPU (its own `auto`), as a user runs them."""
    src, _ = flickr
    ckpt = tiny_run / "best.pt"
    # `--nbest 1` prints bare text; with 2 every line is `i ||| text ||| score`.
    nbest = mt_cli("translate", ckpt, "--input", src, "--nbest", "2", "--beam", "4", env=own_cpu)
    assert nbest.rc == 0, nbest.err
    parsed = [NBEST_LINE.match(line) for line in nbest.out.splitlines()]
    assert len(parsed) == 2 * LINES and all(parsed)
    sources = src.read_text(encoding="utf-8").splitlines()
    pair_src, pair_tgt = tmp_path / "pairs.de", tmp_path / "pairs.en"
    pair_src.write_text("".join(sources[int(m[1])] + "\n" for m in parsed), encoding="utf-8")
    pair_tgt.write_text("".join(m[2] + "\n" for m in parsed), encoding="utf-8")

    result = mt_cli("score", ckpt, "--src", pair_src, "--tgt", pair_tgt, "--json", env=own_cpu)
    assert result.rc == 0, result.err
    scores = [r["score"] for r in _json_lines(result.out)]
    diffs = [abs(s - float(m[3])) for s, m in zip(scores, parsed)]
    assert len(diffs) == 2 * LINES
    # 5e-5 of rounding plus float noise; a line whose text tokenizes differently from the
    # pieces the search chose may differ more (none or a few; the in-process test checks why).
    close = sum(d < 1e-4 for d in diffs)
    assert close >= 0.95 * len(diffs), sorted(diffs)[-10:]


def test_score_ids_equal_beam_scores_unrounded(tiny_run, flickr):
    """In process: the same token ids give the search's unrounded score; text that tokenizes
    back to the search's ids gives it too."""
    from mt.checkpoint import load_model
    from mt.translation.requests import Plan, Request
    from mt.translation.translator import Translator
    from mt.views.score import Scorer

    loaded = load_model(tiny_run / "best.pt")
    dcfg = loaded.cfg.decode
    dcfg.nbest = 2
    lines = flickr[0].read_text(encoding="utf-8").splitlines()
    translator = Translator(loaded.model, loaded.tokenizer, dcfg, torch.device("cpu"))
    # The search's own output: no stage around it (a line searched again with its numbers
    # masked would carry the masked source's score).
    plan = Plan(protect=False, recase=False, keep_numbers=False)
    translations = translator.translate([Request(x, plan=plan) for x in lines])
    src_ids = loaded.tokenizer.encode_src(lines)
    rows = [
        (i, h, text) for i, t in enumerate(translations) for h, text in zip(t.hypotheses, t.texts)
    ]
    scorer = Scorer(loaded.model, loaded.tokenizer, dcfg, torch.device("cpu"))
    by_ids = scorer.score_ids([src_ids[i] for i, _, _ in rows], [h.tokens for _, h, _ in rows])
    worst = max(abs(s.score - h.score) for s, (_, h, _) in zip(by_ids, rows))
    assert worst < 1e-4, worst

    by_text = scorer.score_lines([lines[i] for i, _, _ in rows], [text for _, _, text in rows])
    same_ids = [loaded.tokenizer.encode_tgt([text])[0] == h.tokens for _, h, text in rows]
    assert sum(same_ids) >= 0.9 * len(rows)  # the common case: text round-trips to the ids
    for s, (_, h, _), same in zip(by_text, rows, same_ids):
        if same:
            assert s.score == pytest.approx(h.score, abs=1e-4)


def test_json_fields_are_the_hand_computed_score(tiny_run, mt_cli, flickr, tmp_path):
    src, tgt = flickr
    ckpt = tiny_run / "best.pt"
    alpha = yaml.safe_load((tiny_run / "config.yaml").read_text(encoding="utf-8"))["decode"][
        "alpha"
    ]
    as_json = mt_cli("score", ckpt, "--src", src, "--tgt", tgt, "--json")
    assert as_json.rc == 0, as_json.err
    records = _json_lines(as_json.out)
    refs = tgt.read_text(encoding="utf-8").splitlines()
    assert len(records) == LINES
    for r, ref in zip(records, refs):
        assert list(r) == ["score", "logprob", "tokens", "token_logprobs"]
        assert r["tokens"][-1] == "</s>" and "</s>" not in r["tokens"][:-1]
        assert "".join(r["tokens"][:-1]).replace("\u2581", " ").strip() == ref.strip()
        assert len(r["token_logprobs"]) == len(r["tokens"])
        assert all(lp <= 0 for lp in r["token_logprobs"])
        assert r["logprob"] == pytest.approx(math.fsum(r["token_logprobs"]), abs=1e-9)
        penalty = ((5 + len(r["tokens"])) / 6) ** alpha  # GNMT, EOS counted
        assert r["score"] == pytest.approx(r["logprob"] / penalty, rel=1e-12)

    # The default output: LOGPROB<TAB>SCORE, the same numbers to 6 decimals.
    out = tmp_path / "scores.tsv"
    plain = mt_cli("score", ckpt, "--src", src, "--tgt", tgt, "--output", out)
    assert plain.rc == 0, plain.err
    assert plain.out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.tsv"]  # no temp file left
    rows = [line.split("\t") for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == LINES
    for (logprob, score), r in zip(rows, records):
        assert float(logprob) == pytest.approx(r["logprob"], abs=2e-6)
        assert float(score) == pytest.approx(r["score"], abs=2e-6)


def test_input_order_survives_sorting_and_batching(tiny_run, mt_cli, flickr, tmp_path):
    """Reversed input under a small token budget (many batches) gives the reversed scores."""
    src, tgt = flickr
    ckpt = tiny_run / "best.pt"
    forward = mt_cli("score", ckpt, "--src", src, "--tgt", tgt, "--json")
    rsrc, rtgt = tmp_path / "r.de", tmp_path / "r.en"
    for path, out in ((src, rsrc), (tgt, rtgt)):
        lines = path.read_text(encoding="utf-8").splitlines()
        out.write_text("\n".join(reversed(lines)) + "\n", encoding="utf-8")
    backward = mt_cli("score", ckpt, "--src", rsrc, "--tgt", rtgt, "--json", "--max-tokens", "64")
    assert forward.rc == 0 and backward.rc == 0, forward.err + backward.err
    fwd, bwd = _json_lines(forward.out), _json_lines(backward.out)[::-1]
    assert [r["tokens"] for r in fwd] == [r["tokens"] for r in bwd]
    for a, b in zip(fwd, bwd):
        assert a["score"] == pytest.approx(b["score"], abs=1e-4)


def test_an_empty_target_is_scored_as_eos_alone(tiny_run, mt_cli, tmp_path):
    src, tgt = tmp_path / "s.de", tmp_path / "t.en"
    src.write_text("Ein Hund rennt.\nZwei Männer.\n", encoding="utf-8")
    tgt.write_text("\nTwo men.\n", encoding="utf-8")
    result = mt_cli("score", tiny_run / "best.pt", "--src", src, "--tgt", tgt, "--json")
    assert result.rc == 0, result.err
    empty, full = _json_lines(result.out)
    assert empty["tokens"] == ["</s>"] and len(empty["token_logprobs"]) == 1
    assert empty["logprob"] < 0 and full["tokens"][-1] == "</s>"


def test_unequal_files_fail_in_one_line_naming_both(tiny_run, mt_cli, tmp_path):
    src, tgt = tmp_path / "s.de", tmp_path / "t.en"
    src.write_text("a\nb\nc\n", encoding="utf-8")
    tgt.write_text("a\nb\n", encoding="utf-8")
    result = mt_cli("score", tiny_run / "best.pt", "--src", src, "--tgt", tgt)
    assert result.rc == 2 and result.out == ""
    assert result.err.count("\n") == 1, result.err
    assert f"{src} has 3 lines but {tgt} has 2" in result.err


def test_invalid_utf8_names_file_and_line(tiny_run, mt_cli, tmp_path):
    src, tgt = tmp_path / "s.de", tmp_path / "t.en"
    src.write_text("a\nb\n", encoding="utf-8")
    tgt.write_bytes(b"a\n\xff\xfe\n")
    result = mt_cli("score", tiny_run / "best.pt", "--src", src, "--tgt", tgt)
    assert result.rc == 2 and result.out == ""
    assert result.err == f"mt: error: {tgt}:2: invalid UTF-8\n"


def test_a_target_longer_than_the_model_names_its_line(tiny_run, mt_cli, tmp_path):
    src, tgt = tmp_path / "s.de", tmp_path / "t.en"
    src.write_text("Ein Hund.\nEin Hund.\n", encoding="utf-8")
    tgt.write_text("A dog.\n" + "dog " * 1100 + "\n", encoding="utf-8")
    out = tmp_path / "out.tsv"
    result = mt_cli("score", tiny_run / "best.pt", "--src", src, "--tgt", tgt, "-o", out)
    assert result.rc == 2, result.err
    assert result.err.startswith(f"mt: error: {tgt}:2: target has ")
    assert result.err.count("\n") == 1
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["s.de", "t.en"]

"""One model for several directions: data.pairs, language tokens, --to, the target-language
guard, per-direction dev scores, resume, and language identification of the output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from support import REPO
from support.inprocess import run_in_process
from support.tasks import MULTI_PAIRS as PAIRS
from support.tasks import TIMES

from mt.data.mixing import pair_weights
from mt.languages import lang_piece
from mt.translation.requests import Request
from mt.translation.session import Session


def test_each_direction_has_its_dev_scores_and_best_is_their_mean(multi_run: Path):
    evals = [
        json.loads(line)
        for line in (multi_run / "metrics.jsonl").open()
        if "valid_loss" in json.loads(line)
    ]
    assert [e["step"] for e in evals] == [60, 120]
    for e in evals:
        per = [e[f"dev_bleu/{p}"] for p in PAIRS]
        assert e["dev_bleu"] == pytest.approx(np.mean(per), abs=1e-3)
        assert all(f"dev_chrf/{p}" in e for p in PAIRS)
    best = torch.load(multi_run / "best.pt", weights_only=True)
    assert best["metrics"]["dev_bleu"] == pytest.approx(max(e["dev_bleu"] for e in evals), abs=1e-3)
    langs = best["tokenizer"]["languages"]
    assert langs["pairs"] == PAIRS and langs["placement"] == "target"
    assert sorted(langs["counts"]) == ["de", "en", "fr"]


def test_language_pieces_are_reserved_and_text_cannot_make_them(multi_run: Path):
    from mt.checkpoint import load_model

    tok = load_model(multi_run / "best.pt").tokenizer
    ids = {lang: tok.lang_id(lang) for lang in ("de", "en", "fr")}
    assert len(set(ids.values())) == 3
    for lang, i in ids.items():
        assert tok.tgt.id_to_piece(i) == lang_piece(lang)
        written = tok.encode_src([f"ein {lang_piece(lang)} Hund"])[0]
        assert i not in written  # the text "<2fr>" is ordinary characters
        assert tok.decode_tgt([i]) == ""


def test_the_guard_keeps_every_piece_in_the_target_language(multi_run: Path):
    from mt.translation.requests import Request
    from mt.translation.session import Session

    session = Session([multi_run / "best.pt"], "cpu")
    lines = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest."]
    for to in ("en", "fr"):
        targets = session.targets(to)
        allowed = targets.of(to).guard
        assert allowed is not None and 0 < int(allowed.sum()) < allowed.numel()
        for t in session.translator(targets=targets).translate([Request(x) for x in lines]):
            assert all(bool(allowed[i]) for i in t.hypotheses[0].tokens), (to, t.text)
    # Without the guard the search is free: at least as many pieces are reachable.
    free = session.targets("fr", target_vocab=False)
    assert free.of("fr").guard is None


def test_mixed_directions_in_one_jsonl_file_equal_each_alone(
    multi_run, tmp_path, capsys, monkeypatch
):
    ckpt = multi_run / "best.pt"
    lines = [("Ein Hund läuft.", "en"), ("A dog runs.", "fr"), ("A dog runs.", "de"), ("", "fr")]
    lines += [("Zwei Männer.", "fr"), ("Un chien court.", "en")]
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps({"src": s, "to": t}) + "\n" for s, t in lines))
    rc, out, err = run_in_process(
        ["translate", ckpt, "--input", jsonl, "--input-format", "jsonl", "--greedy"],
        capsys,
        monkeypatch,
    )
    assert rc == 0, err
    mixed = out.split("\n")[:-1]
    assert len(mixed) == len(lines)
    for (src, to), got in zip(lines, mixed):
        plain = tmp_path / "one.txt"
        plain.write_text(src + "\n")
        rc, alone, err = run_in_process(
            ["translate", ckpt, "--input", plain, "--to", to, "--greedy"], capsys, monkeypatch
        )
        assert rc == 0, err
        assert alone == got + "\n"


@pytest.mark.parametrize(
    "args, needle",
    [
        ([], "say which with --to"),
        (["--to", "cs"], "does not write 'cs'"),
        (["--to", "fr", "--from", "xx"], "does not read 'xx'"),
        (["--to", "fr", "--pivot", "cs"], "does not write 'cs'"),
        (["--to", "en", "--from", "en"], "both 'en'"),
    ],
)
def test_bad_languages_are_one_line_exit_2(multi_run, tmp_path, capsys, monkeypatch, args, needle):
    src = tmp_path / "in.txt"
    src.write_text("Ein Hund.\n")
    rc, out, err = run_in_process(
        ["translate", multi_run / "best.pt", "--input", src, *args], capsys, monkeypatch
    )
    assert rc == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1, err
    assert "en" in err and "fr" in err  # the model's languages are named


@pytest.mark.parametrize(
    "stdin, line, needle",
    [
        (False, {"src": "Ein Hund.", "to": "cs"}, "does not write 'cs'"),
        (True, {"src": "Ein Hund.", "to": "fr", "from": "xx"}, "does not read 'xx'"),
        (False, {"src": "Ein Hund."}, "say which with --to"),
    ],
)
def test_a_bad_language_on_a_jsonl_line_names_the_line(
    multi_run, mt_cli, tmp_path, stdin, line, needle
):
    """Line 3 of a JSONL input asks for a language the model cannot give: one line naming
    FILE:3 (`<stdin>:3` read from stdin), exit 2; lines 1-2 are good."""
    good = [{"src": "Ein Hund läuft.", "to": "en"}, {"src": "A dog runs.", "to": "fr"}]
    text = "".join(json.dumps(x) + "\n" for x in [*good, line])
    args = ["translate", multi_run / "best.pt", "--input-format", "jsonl", "--greedy"]
    if stdin:
        result = mt_cli(*args, stdin=text)
        name = "<stdin>"
    else:
        path = tmp_path / "in.jsonl"
        path.write_text(text, encoding="utf-8")
        result = mt_cli(*args, "--input", path)
        name = str(path)
    assert result.rc == 2, result.err
    assert result.err.startswith(f"mt: error: {name}:3: "), result.err
    assert needle in result.err and result.err.count("\n") == 1, result.err
    assert all(code in result.err for code in ("de", "en", "fr"))  # the model's languages


def test_bilingual_model_needs_no_flag_and_refuses_other_languages(
    tiny_run, tmp_path, capsys, monkeypatch
):
    src = tmp_path / "in.txt"
    src.write_text("Ein Hund.\n")
    ckpt = tiny_run / "best.pt"
    rc0, out0, _ = run_in_process(["translate", ckpt, "--input", src], capsys, monkeypatch)
    rc1, out1, _ = run_in_process(
        ["translate", ckpt, "--input", src, "--to", "en", "--from", "de"], capsys, monkeypatch
    )
    assert rc0 == rc1 == 0 and out0 == out1 and len(out0.splitlines()) == 1
    rc, out, err = run_in_process(
        ["translate", ckpt, "--input", src, "--to", "fr"], capsys, monkeypatch
    )
    assert rc == 2 and "de-en only" in err and len(err.strip().splitlines()) == 1


def test_eval_score_and_pivot_take_the_target_language(
    multi_run, multi30k_dir, tmp_path, capsys, monkeypatch
):
    import gzip

    ckpt = multi_run / "best.pt"
    de = gzip.open(multi30k_dir / "val.de.gz", "rt").read().splitlines()[:8]
    en = gzip.open(multi30k_dir / "val.en.gz", "rt").read().splitlines()[:8]
    (tmp_path / "de").write_text("\n".join(de) + "\n")
    (tmp_path / "en").write_text("\n".join(en) + "\n")
    rc, out, err = run_in_process(
        ["eval", ckpt, "--src", tmp_path / "de", "--ref", tmp_path / "en", "--to", "en", "--json"],
        capsys,
        monkeypatch,
    )
    assert rc == 0, err
    assert 0 <= json.loads(out)["bleu"] <= 100
    rc, out, err = run_in_process(
        ["eval", ckpt, "--src", tmp_path / "de", "--ref", tmp_path / "en"], capsys, monkeypatch
    )
    assert rc == 2 and "--to" in err
    score = ["score", ckpt, "--src", tmp_path / "de", "--tgt", tmp_path / "en"]
    rc, out, err = run_in_process([*score, "--to", "en"], capsys, monkeypatch)
    assert rc == 0, err
    assert len(out.splitlines()) == 8 and all(float(x.split("\t")[0]) < 0 for x in out.splitlines())
    rc, _, err = run_in_process(score, capsys, monkeypatch)
    assert rc == 2 and "--to" in err
    # --pivot en: German -> English -> French, as two calls would do it.
    rc, via, err = run_in_process(
        ["translate", ckpt, "--input", tmp_path / "de", "--to", "fr", "--pivot", "en", "--greedy"],
        capsys,
        monkeypatch,
    )
    assert rc == 0, err
    rc, middle, _ = run_in_process(
        ["translate", ckpt, "--input", tmp_path / "de", "--to", "en", "--greedy"],
        capsys,
        monkeypatch,
    )
    (tmp_path / "mid").write_text(middle)
    rc, direct, _ = run_in_process(
        ["translate", ckpt, "--input", tmp_path / "mid", "--to", "fr", "--greedy"],
        capsys,
        monkeypatch,
    )
    assert via == direct and len(via.splitlines()) == 8


def test_output_language_is_identified_with_the_guard(multi_run, multi30k_dir):
    """lingua (a test extra: its models ship in the package) on zero-shot de->fr output."""
    lingua = pytest.importorskip("lingua")
    import gzip

    from mt.translation.requests import Plan, Request
    from mt.translation.session import Session

    de = gzip.open(multi30k_dir / "val.de.gz", "rt").read().splitlines()[:40]
    session = Session([multi_run / "best.pt"], "cpu")
    detector = lingua.LanguageDetectorBuilder.from_iso_codes_639_1(
        *[lingua.IsoCode639_1.from_str(c) for c in ("de", "en", "fr")]
    ).build()

    def french_lines(guard: bool) -> int:
        tr = session.translator(targets=session.targets("fr", "de", guard))
        texts = [t.text for t in tr.translate([Request(x, plan=Plan(recase=False)) for x in de])]
        found = detector.detect_languages_in_parallel_of(texts)
        return sum(1 for f in found if f is not None and f.iso_code_639_1.name == "FR")

    guarded, free = french_lines(True), french_lines(False)
    assert guarded >= 36, guarded  # 90%
    # The guard must not cost French output. One line of 40 is the noise floor: a 120-step
    # model's zero-shot lines are partly degenerate ("à uneee à unee."), and which of them
    # lingua calls French flips with the CPU's float rounding (an AVX-512 Xeon gave 37
    # guarded against 38 free, the two differing in one line's tail).
    assert guarded >= free - 1, (guarded, free)


def test_pair_weights_follow_the_temperature():
    assert pair_weights([100, 100, 100], 1.0) == pytest.approx([1, 1, 1])
    assert pair_weights([300, 100], 1.0) == pytest.approx([1, 1])
    # T = 2: p ~ sqrt(n / N) -> (sqrt(.75), sqrt(.25)) / sum; weight = p * N / n.
    p = np.sqrt([0.75, 0.25])
    p /= p.sum()
    assert pair_weights([300, 100], 2.0) == pytest.approx(list(p * 400 / np.array([300, 100])))


def _write_three_languages(root: Path) -> None:
    """A synthetic corpus in `aa`, `bb` (aa reversed) and `cc` (aa with each word doubled)."""
    import random

    rng = random.Random(1)
    words = ["ka", "lo", "mi", "nu", "pe", "ri", "so", "tu"]
    root.mkdir(parents=True)
    for name, n in (("train", 300), ("val", 12)):
        aa = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 6))) for _ in range(n)]
        langs = {
            "aa": aa,
            "bb": [" ".join(reversed(s.split())) for s in aa],
            "cc": [" ".join(w + w for w in s.split()) for s in aa],
        }
        for lang, text in langs.items():
            (root / f"{name}.{lang}").write_text("\n".join(text) + "\n")


@pytest.mark.slow  # ~10-30 s; test_resume checks exact resume by default
def test_resume_with_several_directions_is_exact(tmp_path, mt_cli):
    _write_three_languages(tmp_path / "data")
    cfg = {
        "data": {"root": str(tmp_path / "data"), "pairs": ["aa-bb", "bb-aa", "aa-cc"]},
        "tokenizer": {"vocab_size": 40},
        "model": {"d_model": 32, "n_heads": 2, "d_ff": 64, "encoder_layers": 1},
        "train": {
            "device": "cpu",
            "precision": "fp32",
            "threads": 1,
            "seed": 3,
            "max_tokens": 256,
            "warmup": 8,
            "max_steps": 20,
            "log_every": 5,
            "eval_every": 10,
            "keep_last": 0,
            "tensorboard": False,
        },
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    straight, resumed = tmp_path / "a", tmp_path / "b"
    assert mt_cli("train", tmp_path / "c.yaml", "--run-dir", straight).rc == 0
    half = mt_cli("train", tmp_path / "c.yaml", "--run-dir", resumed, "--set", "train.max_steps=10")
    assert half.rc == 0, half.err
    more = mt_cli("train", tmp_path / "c.yaml", "--run-dir", resumed, "--resume")
    assert more.rc == 0, more.err

    def logged(run: Path) -> list[dict]:
        rows = [json.loads(line) for line in (run / "metrics.jsonl").open()]
        return [
            {k: v for k, v in r.items() if k not in TIMES}
            for r in rows
            if "loss" in r or "valid_loss" in r
        ]

    a, b = logged(straight), logged(resumed)
    assert [r["step"] for r in a] == [r["step"] for r in b]
    assert any("dev_bleu/aa-cc" in r for r in a)
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys()
        for key in ra:
            assert rb[key] == pytest.approx(ra[key], rel=1e-5, abs=1e-6), (ra["step"], key)


@pytest.mark.parametrize(
    "value, needle",
    [
        ("[de]", "data.pairs[0] must be two language codes"),
        ("[de-de]", "data.pairs[0] (de-de) names one language"),
        ("[de-en,de-en]", "data.pairs names a pair twice"),
    ],
)
def test_bad_pairs_are_one_line_exit_2(tmp_path, capsys, monkeypatch, value, needle):
    rc, out, err = run_in_process(
        [
            "train",
            REPO / "configs" / "tiny.yaml",
            "--run-dir",
            tmp_path / "r",
            "--set",
            f"data.pairs={value}",
        ],
        capsys,
        monkeypatch,
    )
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists()


@pytest.mark.slow  # a script's or a retry's check of many seconds: `pytest -m slow`
def test_the_timing_script_compares_with_a_bilingual_model_of_the_same_size(
    multi_run, tiny_run, multi30k_dir, tmp_path
):
    """scripts/bench/multilingual.py --bilingual on a few lines: every row timed, the ratio
    printed; a bilingual model of another size (tiny_run: a smaller vocabulary) refused. The
    same-size bilingual model is multi_run's weights without its languages (a shape, for the
    script, not a translator)."""
    import subprocess
    import sys

    data = torch.load(multi_run / "best.pt", weights_only=True)
    data["tokenizer"]["languages"] = None
    data["config"]["data"]["pairs"] = []
    bilingual = tmp_path / "bilingual.pt"
    torch.save(data, bilingual)

    def bench(other: Path) -> subprocess.CompletedProcess:
        args = [sys.executable, "-m", "scripts.bench.multilingual", multi_run / "best.pt"]
        args += ["--src", multi30k_dir / "test_2016_flickr.de.gz", "--to", "en"]
        args += ["--lines", "3", "--rounds", "1", "--beam", "2", "--bilingual", other]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        return subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, cwd=REPO)

    ok = bench(bilingual)
    assert ok.returncode == 0, ok.stderr
    rows = {line.split("|")[1].strip(): line for line in ok.stdout.splitlines() if "x |" in line}
    assert set(rows) == {"guard", "no guard", "bilingual"}
    assert "| 1.000x |" in rows["bilingual"]  # the base of the ratios
    refused = bench(tiny_run / "best.pt")
    assert refused.returncode == 2 and "src_vocab_size is 600" in refused.stderr, refused.stderr


# In this module so that it shares the module's trained run (one training per test worker).
def test_multilingual_run_keeps_statistics_per_language_and_direction(multi_run: Path):
    session = Session([multi_run / "best.pt"], "cpu")
    stats = session.tokenizer.text_stats
    assert stats is not None
    assert set(stats.lengths) == {"de-en", "en-de", "en-fr", "fr-en"}
    assert set(stats.case) == {"de", "en", "fr"}
    assert stats.spellings("de")["mann"] == "Mann" and stats.spellings("en")["man"] == "man"
    translator = session.translator(targets=session.targets("fr", "en"))
    assert translator.length_bounds(Request("x")) == stats.lengths["en-fr"]
    assert translator.length_bounds(Request("x", to="de", frm="en")) == stats.lengths["en-de"]
    assert translator.case_table(Request("x", frm="de"))["mann"] == "Mann"

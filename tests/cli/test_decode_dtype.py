"""What decoding computes in (`--dtype`, decode.dtype; mt/runtime/dtype.py): bf16 on a CPU
through a bf16 copy of the weights and close to fp32, the CUDA half copy built on the CPU, the
session's rule for a checkpoint's setting, and the flag on translate, eval, score and serve.

Closeness is asserted with bounds far above bf16's rounding (8 bits of mantissa) and far below
what a wrong model gives, so the tests pass or fail by the plumbing, not by this CPU's float
path; speed is for scripts/bench/bf16.py."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import pytest
import torch
from support import REPO
from support.inprocess import run_in_process

from mt.checkpoint import load_model
from mt.data.corpus import read_lines
from mt.device import Precision
from mt.errors import MtError
from mt.runtime.dtype import decode_model
from mt.serve.config import ServeConfig
from mt.serve.prometheus import Metrics
from mt.serve.worker import ModelWorker
from mt.translation.requests import Plan, Request
from mt.translation.session import DecodeOptions, Session
from mt.translation.translator import Translator
from mt.views.score import Scorer

CPU = torch.device("cpu")


def _dtypes_seen(model: torch.nn.Module) -> tuple[list[torch.dtype], object]:
    """The dtypes the output projection computes in, recorded while a hook is in place."""
    seen: list[torch.dtype] = []
    handle = model.output.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    return seen, handle


def _translate(tiny_run: Path, lines: list[str], dtype: str):
    loaded = load_model(tiny_run / "best.pt", "cpu")
    cfg = loaded.cfg.decode
    cfg.dtype, cfg.nbest = dtype, 1
    cfg.gemm = "torch"  # fp32's own multiply (not a oneDNN copy): the model stays the caller's
    translator = Translator(loaded.model, loaded.tokenizer, cfg, CPU)
    seen, handle = _dtypes_seen(translator.model)
    out = translator.translate([Request(x, plan=Plan(protect=False, recase=False)) for x in lines])
    handle.remove()
    # fp32 decodes the caller's model; bf16 a copy cast once, and the caller's stays fp32.
    assert (translator.model is loaded.model) == (dtype == "fp32")
    want = torch.bfloat16 if dtype == "bf16" else torch.float32
    assert {p.dtype for p in translator.model.parameters()} == {want}
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())
    return out, set(seen)


def test_bf16_decoding_on_a_cpu_computes_in_bf16_and_stays_near_fp32(tiny_run, multi30k_dir):
    lines = read_lines(multi30k_dir / "test_2016_flickr.de.gz")[:60]
    ref, ref_dtypes = _translate(tiny_run, lines, "fp32")
    out, dtypes = _translate(tiny_run, lines, "bf16")
    assert ref_dtypes == {torch.float32} and dtypes == {torch.bfloat16}
    # The 60-step test model's flat distributions hold many near-ties, which any rounding
    # flips (bf16 kept ~54% of outputs here); a broken decode keeps none.
    same = [i for i in range(len(lines)) if out[i].text == ref[i].text]
    assert len(same) >= 0.3 * len(lines), f"{len(same)}/{len(lines)} identical"
    rel = [
        abs(out[i].hypotheses[0].score / ref[i].hypotheses[0].score - 1)
        for i in same
        if ref[i].hypotheses
    ]
    assert statistics.median(rel) <= 0.01 and max(rel) <= 0.05, (statistics.median(rel), max(rel))


def test_bf16_scores_of_the_same_pairs_are_within_a_percent(tiny_run, multi30k_dir):
    """Forced decoding removes search's near-ties: the same pairs, scored in both dtypes."""
    src = read_lines(multi30k_dir / "test_2016_flickr.de.gz")[:40]
    tgt = read_lines(multi30k_dir / "test_2016_flickr.en.gz")[:40]
    loaded = load_model(tiny_run / "best.pt", "cpu")
    scores = {}
    for dtype in ("fp32", "bf16"):
        loaded.cfg.decode.dtype = dtype
        scorer = Scorer(loaded.model, loaded.tokenizer, loaded.cfg.decode, CPU)
        assert scorer.precision.name == dtype
        scores[dtype] = [s.logprob for s in scorer.score_lines(src, tgt)]
    rel = [abs(b / a - 1) for a, b in zip(scores["fp32"], scores["bf16"])]
    assert len(rel) == 40 and max(rel) <= 0.02, max(rel)
    assert scores["fp32"] != scores["bf16"]  # bf16 did run: its rounding shows


def test_the_half_copy_is_built_the_same_way_on_a_cpu(tiny_run):
    """decode_model's half branch only casts: checked here with a CUDA device *name* too."""
    loaded = load_model(tiny_run / "best.pt", "cpu")
    cuda = torch.device("cuda")
    for name, half, device in (
        ("bf16", torch.bfloat16, cuda),
        ("fp16", torch.float16, cuda),
        ("bf16", torch.bfloat16, CPU),
    ):
        copy = decode_model(loaded.model, Precision(name, "test"), device, int8=False)
        assert copy is not loaded.model and not copy.training
        assert {p.dtype for p in copy.parameters()} == {half}
        assert copy.positions.dtype == half  # the sinusoid buffer too, or fp32 would leak in
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())
    assert decode_model(loaded.model, Precision("fp32", "test"), cuda, int8=False) is loaded.model


def test_a_checkpoints_half_setting_is_for_cuda_a_cpu_decodes_auto(tiny_run, monkeypatch):
    session = Session([tiny_run / "best.pt"], "cpu")
    monkeypatch.setattr(session.cfg.decode, "dtype", "fp16")  # as a GPU recipe's checkpoint
    assert session.decode_config().dtype == "auto"
    assert session.decode_config(DecodeOptions(dtype="bf16")).dtype == "bf16"
    assert Session([tiny_run / "best.pt"], "cpu", dtype="fp32").decode_config().dtype == "fp32"
    with pytest.raises(MtError, match=r"^--dtype fp16 decodes on CUDA only"):
        Session([tiny_run / "best.pt"], "cpu", dtype="fp16")
    bf16 = Session([tiny_run / "best.pt"], "cpu", dtype="bf16")
    with pytest.raises(MtError, match=r"^--dtype bf16 cannot be combined with int8"):
        bf16.translator(DecodeOptions(int8=True))


@pytest.mark.parametrize("command", ["translate", "eval", "score"])
def test_dtype_flag_on_the_decoding_commands(command, tiny_run, tmp_path, capsys, monkeypatch):
    src, ref = tmp_path / "s.de", tmp_path / "r.en"
    src.write_text("Ein Hund rennt.\nZwei Männer spielen.\n", encoding="utf-8")
    ref.write_text("A dog runs.\nTwo men play.\n", encoding="utf-8")
    files = {
        "translate": ["--input", src],
        "eval": ["--src", src, "--ref", ref],
        "score": ["--src", src, "--tgt", ref],
    }[command]
    args = [command, tiny_run / "best.pt", *files, "--device", "cpu"]
    outs = {}
    for dtype in ("fp32", "bf16"):
        rc, outs[dtype], err = run_in_process([*args, "--dtype", dtype], capsys, monkeypatch)
        assert rc == 0, err
    assert len(outs["bf16"].splitlines()) == len(outs["fp32"].splitlines()) > 0
    rc, _, err = run_in_process([*args, "--dtype", "fp16"], capsys, monkeypatch)
    assert rc == 2 and err.strip() == (
        "mt: error: --dtype fp16 decodes on CUDA only; on a CPU use auto, fp32 or bf16"
    )
    rc, _, err = run_in_process([*args, "--dtype", "bf16", "--int8"], capsys, monkeypatch)
    assert rc == 2 and "--dtype bf16 cannot be combined with int8" in err


def test_serve_checks_its_options_before_it_needs_its_extra(tiny_run, capsys, monkeypatch):
    """Without the serve extra (fastapi not importable) a wrong option is still its own line;
    with right options the line names the extra to install."""
    monkeypatch.setitem(sys.modules, "fastapi", None)  # `import fastapi` raises ImportError
    args = ["serve", tiny_run / "best.pt", "--device", "cpu"]
    rc, _, err = run_in_process([*args, "--dtype", "fp16"], capsys, monkeypatch)
    assert rc == 2 and "--dtype fp16 decodes on CUDA only" in err
    rc, _, err = run_in_process(args, capsys, monkeypatch)
    assert rc == 2 and "mt serve needs fastapi: pip install 'mt[serve]'" in err
    assert len(err.strip().splitlines()) == 1


def test_serve_takes_the_dtype_for_every_decode(tiny_run, capsys, monkeypatch):
    rc, _, err = run_in_process(
        ["serve", tiny_run / "best.pt", "--device", "cpu", "--dtype", "fp16"], capsys, monkeypatch
    )
    assert rc == 2 and "--dtype fp16 decodes on CUDA only" in err  # before it listens
    worker = ModelWorker(
        "tiny", ServeConfig(models={"tiny": [tiny_run / "best.pt"]}, dtype="bf16"), Metrics()
    )
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while not worker.ready and worker.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.session is not None, worker.error
        assert worker.session.translator().precision.name == "bf16"
        assert worker.session.scorer().precision.name == "bf16"
    finally:
        worker.stop()


@pytest.mark.slow  # a script's or a retry's check of many seconds: `pytest -m slow`
def test_the_speed_script_gives_each_engine_a_process(tiny_run, multi30k_dir, tmp_path):
    """scripts/bench/bf16.py --isolate: one child process per engine and round, every engine's
    row with its first (cold) pass, the ratios against the first dtype, CTranslate2's stopping
    rule only where there is a beam, two worker processes (":w2") giving fp32's lines, and the
    outputs compared with fp32's line by line."""
    import json
    import os
    import subprocess

    out = tmp_path / "rows.json"
    args = [sys.executable, "-m", "scripts.bench.bf16", "--skip-train", "--isolate"]
    args += ["--checkpoint", tiny_run / "best.pt", "--limit", "3", "--rounds", "1"]
    args += ["--passes", "1", "--beams", "1,2", "--dtypes", "fp32,bf16,fp32+early,fp32:w2"]
    args += ["--no-ct2", "--no-int8", "--threads", "1", "--json", out]
    args += ["--src", multi30k_dir / "test_2016_flickr.de.gz"]
    args += ["--ref", multi30k_dir / "test_2016_flickr.en.gz"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    keys = [(r["engine"], r["beam"]) for r in rows]
    assert keys == [
        ("fp32", 1), ("bf16", 1), ("fp32:w2", 1),
        ("fp32", 2), ("bf16", 2), ("fp32+early", 2), ("fp32:w2", 2),
    ]  # fmt: skip
    assert done.stderr.count("first") == 7  # a child each, reported as it ends
    by = {k: r for k, r in zip(keys, rows)}
    for (engine, _), r in by.items():
        assert r["isolated"] and r["sentences"] == 3 and r["first_pass_s_best"] > 0
        assert r["resolves_to"] == engine.split("+")[0].split(":")[0]
        assert 0 <= r["same_as_fp32"] <= 3 and 0 <= r["bleu"] <= 100
    assert by[("fp32", 1)]["vs_fp32"] == 1.0 and by[("fp32", 1)]["same_as_fp32"] == 3
    assert by[("fp32", 2)]["vs_fp32"] == 1.0 and by[("fp32", 2)]["same_as_fp32"] == 3
    assert by[("fp32:w2", 1)]["same_as_fp32"] == 3 and by[("fp32:w2", 2)]["same_as_fp32"] == 3


@pytest.mark.slow
def test_the_compiled_step_script_compares_with_the_eager_step(tiny_run, multi30k_dir):
    """scripts/bench/compiled_step.py: the step compiled by torch.compile searches the same
    fp32 tokens as the eager step, greedy and beam, and each row reports both rates."""
    import os
    import re
    import subprocess

    args = [sys.executable, "-m", "scripts.bench.compiled_step", tiny_run / "best.pt"]
    args += ["--src", multi30k_dir / "test_2016_flickr.de.gz", "--limit", "6", "--rounds", "1"]
    args += ["--dtypes", "fp32", "--beams", "1,2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(args, capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    rows = re.findall(r"^fp32 beam (\d): eager ([\d.]+), compiled ([\d.]+) .* same tokens: (\w+)$",
                      done.stdout, re.M)  # fmt: skip
    assert [r[0] for r in rows] == ["1", "2"], done.stdout
    assert all(float(r[1]) > 0 and float(r[2]) > 0 and r[3] == "True" for r in rows)

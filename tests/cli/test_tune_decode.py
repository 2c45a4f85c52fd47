"""Decode settings chosen on dev at the end of a run (`train.tune_beam`, `train.tune_alpha`) and
stored in best.pt; `mt translate` and `mt eval` use a checkpoint's stored decode settings
unless a flag overrides them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from support.inprocess import run_mt_here
from support.tasks import reverse_task_config

from mt.config import DecodeConfig, TrainConfig
from mt.train.evaluation import DevSet, EvalSettings, Evaluator
from mt.train.tune import choose, tune_decode
from mt.translation.options import DecodeOptions
from mt.translation.requests import Request
from mt.translation.session import Session
from mt.translation.translator import translate_stream

BEAMS, ALPHAS = [1, 3], [0.0, 2.0]


@pytest.fixture(scope="module")
def tuned_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tune")
    # Trained in bf16: the tuning still decodes as `mt eval` does (fp32 on a CPU), not under
    # the training's autocast, so the dev BLEU it stores is the one `mt eval` measures.
    config = reverse_task_config(
        folder, eval_bleu=True, tune_beam=BEAMS, tune_alpha=ALPHAS, max_steps=40, eval_every=20,
        precision="bf16",
    )  # fmt: skip
    # 3-best output as configured: the stored settings keep it, within the chosen beam.
    result = run_mt_here("train", config, "--run-dir", folder / "run", "--set", "decode.nbest=3")
    assert result.rc == 0, result.err
    return folder / "run"


def eval_bleu(mt_cli, ckpt: Path, *flags: str) -> float:
    data = ckpt.parent.parent / "data"
    result = mt_cli(
        "eval", ckpt, "--src", data / "val.src", "--ref", data / "val.tgt", "--json", *flags
    )
    assert result.rc == 0, result.err
    return json.loads(result.out)["bleu"]


def test_the_best_pair_on_dev_is_stored_in_best_pt(tuned_run, mt_cli):
    records = [json.loads(x) for x in (tuned_run / "metrics.jsonl").read_text().splitlines()]
    tuned = [r for r in records if "tuned_beam" in r]
    assert len(tuned) == 1 and records[-1]["stopped"] == "max_steps"
    grid = tuned[0]["tuned_grid"]
    assert [(g["beam"], g["alpha"]) for g in grid] == [(b, a) for b in BEAMS for a in ALPHAS]
    top = max(g["dev_bleu"] for g in grid)
    chosen = min((g for g in grid if g["dev_bleu"] == top), key=lambda g: g["beam"])
    assert (tuned[0]["tuned_beam"], tuned[0]["tuned_alpha"]) == (chosen["beam"], chosen["alpha"])

    best = torch.load(tuned_run / "best.pt", weights_only=True)
    assert best["tuned_decode"] == grid
    assert best["config"]["decode"]["beam"] == chosen["beam"]
    assert best["config"]["decode"]["alpha"] == chosen["alpha"]
    assert best["config"]["decode"]["nbest"] == min(3, chosen["beam"])
    # The run's own config and its other checkpoints keep the config's decode settings.
    assert torch.load(tuned_run / "last.pt", weights_only=True)["config"]["decode"]["beam"] == 5

    # `mt eval` with no flag decodes as stored: the dev BLEU the tuning measured.
    assert eval_bleu(mt_cli, tuned_run / "best.pt") == pytest.approx(chosen["dev_bleu"], abs=0.01)
    # ... and flags override it: another pair of the grid, one that scored differently.
    other = next(g for g in grid if g["dev_bleu"] != chosen["dev_bleu"])
    flags = ("--beam", str(other["beam"]), "--alpha", str(other["alpha"]))
    got = eval_bleu(mt_cli, tuned_run / "best.pt", *flags)
    assert got == pytest.approx(other["dev_bleu"], abs=0.01)


def with_decode(src: Path, dst: Path, **decode: object) -> Path:
    data = torch.load(src, weights_only=True)
    data["config"]["decode"].update(decode)
    torch.save(data, dst)
    return dst


def nbest_lines(mt_cli, ckpt: Path, *flags: str) -> list[str]:
    result = mt_cli("translate", ckpt, *flags, stdin="ka lo mi nu\nso tu\n")
    assert result.rc == 0, result.err
    return result.out.splitlines()


def test_translate_uses_the_checkpoints_decode_settings_unless_a_flag_overrides(
    tuned_run, mt_cli, tmp_path
):
    flat = with_decode(tuned_run / "best.pt", tmp_path / "a0.pt", beam=3, nbest=3, alpha=0.0)
    long = with_decode(tuned_run / "best.pt", tmp_path / "a2.pt", beam=3, nbest=3, alpha=2.0)
    lines = nbest_lines(mt_cli, flat)
    assert len(lines) == 6 and [x.split(" ||| ")[0] for x in lines] == ["0"] * 3 + ["1"] * 3
    assert len(nbest_lines(mt_cli, flat, "--nbest", "1")) == 2  # the flag wins

    # The stored length penalty changes the scores (log-prob / ((5 + len) / 6) ** alpha);
    # --alpha puts the other one back exactly.
    stretched = nbest_lines(mt_cli, long)
    assert [x.split(" ||| ")[2] for x in stretched] != [x.split(" ||| ")[2] for x in lines]
    assert nbest_lines(mt_cli, long, "--alpha", "0") == lines
    assert nbest_lines(mt_cli, flat, "--alpha", "2") == stretched


def test_tuning_scores_dev_as_mt_eval_does_not_under_the_training_autocast(tiny_run, multi30k_dir):
    """A run trained in bf16 evaluates under bf16 autocast; choosing its decode settings must
    score them as `mt eval` will decode the checkpoint (fp32 on a CPU), or bf16's rounding
    picks among near-ties a setting that is not the best there. Scored against `mt eval`'s
    own output as the references, the tuning's decode scores 100 exactly."""
    src = first_lines(multi30k_dir / "val.de.gz", 150)
    loaded = Session([tiny_run / "best.pt"], "cpu")  # as `mt eval` loads it
    in_memory = Session.from_model(
        loaded.model, loaded.tokenizer, loaded.cfg, loaded.device, dtype="fp32"
    )  # as training holds it
    options = DecodeOptions(beam=3, alpha=1.0, nbest=1, greedy=False, sample=False)
    as_eval = [
        t.text for t in translate_stream(loaded.translator(options), [Request(x) for x in src])
    ]
    settings = EvalSettings(bleu=True, max_tokens=1024, label_smoothing=0.1, lang_token="source")
    dev = DevSet(None, src, as_eval)  # type: ignore[arg-type]  # BLEU only: no token store
    evaluator = Evaluator(in_memory, settings, [dev], precision="bf16")
    assert evaluator.bleu(options) == pytest.approx(100.0)
    # The premise: under the training's bf16 autocast the same decode writes other lines.
    assert evaluator.translate(src, None, options) != as_eval


def test_choose_takes_the_smallest_beam_within_the_tolerance():
    grid = [
        {"beam": 1, "alpha": 0.0, "dev_bleu": 40.1},
        {"beam": 3, "alpha": 0.0, "dev_bleu": 40.6},
        {"beam": 3, "alpha": 1.0, "dev_bleu": 40.7},
        {"beam": 5, "alpha": 0.0, "dev_bleu": 41.0},
        {"beam": 5, "alpha": 1.0, "dev_bleu": 41.0},
    ]
    assert choose(grid, 0.0) == grid[3]  # the best; of equals, the first alpha
    assert choose(grid, 0.25) == grid[3]  # beam 3 is 0.3 below
    assert choose(grid, 0.35) == grid[2]  # within: beam 3, its better alpha
    assert choose(grid, 0.9) == grid[0]  # greedy: 0.9 below the best
    assert choose(grid, 100.0) == grid[0]


def test_tune_within_stores_the_faster_setting_and_eval_reproduces_it(
    tiny_run, multi30k_dir, tmp_path, mt_cli
):
    """On a model trained on Multi30k, the tolerance turns the stored decode from the best pair
    into greedy search, and `mt eval` of the checkpoint scores what the tuning measured."""
    src = first_lines(multi30k_dir / "val.de.gz", 80)
    ref = first_lines(multi30k_dir / "val.en.gz", 80)
    loaded = Session([tiny_run / "best.pt"], "cpu")
    model = Session.from_model(loaded.model, loaded.tokenizer, loaded.cfg, loaded.device, "fp32")
    settings = EvalSettings(bleu=True, max_tokens=1024, label_smoothing=0.1, lang_token="source")
    dev = DevSet(None, src, ref)  # type: ignore[arg-type]  # BLEU only: no token store
    evaluator = Evaluator(model, settings, [dev], precision="fp32")
    records = {}
    for within in (0.0, 100.0):
        ckpt = tmp_path / f"within{within:g}.pt"
        ckpt.write_bytes((tiny_run / "best.pt").read_bytes())
        t = TrainConfig(tune_beam=[4, 1], tune_alpha=[1.0], tune_within=within)
        records[within] = tune_decode(t, DecodeConfig(), ckpt, evaluator, step=1)
        stored = torch.load(ckpt, weights_only=True)["config"]["decode"]
        assert stored["beam"] == records[within]["tuned_beam"]
        (tmp_path / "src").write_text("\n".join(src) + "\n")
        (tmp_path / "ref").write_text("\n".join(ref) + "\n")
        result = mt_cli(
            "eval", ckpt, "--src", tmp_path / "src", "--ref", tmp_path / "ref", "--json"
        )
        assert result.rc == 0, result.err
        bleu = json.loads(result.out)["bleu"]
        assert bleu == pytest.approx(records[within]["tuned_dev_bleu"], abs=0.01)
    grid = records[0.0]["tuned_grid"]
    assert records[0.0]["tuned_dev_bleu"] == max(g["dev_bleu"] for g in grid)
    assert records[0.0]["tuned_beam"] == 4, grid  # the premise: beam 4 scores above greedy
    assert records[100.0]["tuned_beam"] == 1 and records[100.0]["tuned_within"] == 100.0
    assert records[100.0]["tuned_dev_bleu"] == next(g for g in grid if g["beam"] == 1)["dev_bleu"]


def first_lines(path: Path, n: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for _, line in zip(range(n), f)]

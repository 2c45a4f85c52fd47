"""`train.watch`: extra dev sets scored under their own names, and the rule that picks best.pt.

A fine-tuning run of the tiny Multi30k model watches three sets: `same` (the run's own dev set,
so its values must be the dev metrics to the rounding), `tmx` (the same pairs in a TMX file,
read through mt/cat: the same values again) and `general` (the base's training text as plain
files, with a `keep_within` bound). Their values come from the model at each evaluation: the
last one's BLEU on `general` is what `mt eval` gives the run's last checkpoint.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
import yaml
from support.cat_files import multi30k, write_tmx

from mt.config import WatchConfig
from mt.train.best import BestRule, choose

STEPS, EVERY, N = 6, 3, 30


def entry(name: str, src: Path, ref: Path | None = None, **more: object) -> dict:
    """One `train.watch` item."""
    return {"name": name, "src": str(src), "ref": str(ref or ""), **more}


def broken_run(tiny: Path, data: Path, folder: Path, watch: dict, mt_cli):
    """A fine-tuning run watching `watch`, which cannot start."""
    cfg = {
        "data": {"root": str(data), "max_train_examples": 100, "max_valid_examples": 10},
        "train": {"max_steps": 1, "threads": 1, "tensorboard": False, "watch": [watch]},
    }
    (folder / "c.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    out = mt_cli("train", folder / "c.yaml", "--run-dir", folder / "r", "--init-from", tiny)
    assert out.rc != 0 and "Traceback" not in out.err
    return out


def records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def watched(tiny_run, multi30k_dir, tmp_path_factory, mt_cli):
    folder = tmp_path_factory.mktemp("watch")
    write_tmx(folder / "same.tmx", multi30k(multi30k_dir, "val", N), codes=False)
    general = multi30k(multi30k_dir, "train", N)
    for k, lang in enumerate(("de", "en")):
        (folder / f"general.{lang}").write_text("\n".join(p[k] for p in general) + "\n")
    watch = [
        entry("same", multi30k_dir / "val.de.gz", multi30k_dir / "val.en.gz", max_examples=N),
        entry("tmx", folder / "same.tmx"),
        entry("general", folder / "general.de", folder / "general.en", keep_within=0.5),
    ]
    cfg = {
        "data": {
            "root": str(multi30k_dir), "train": "test_2016_flickr", "max_train_examples": 300,
            "max_valid_examples": N,
        },
        "train": {
            "max_steps": STEPS, "eval_every": EVERY, "log_every": EVERY, "threads": 1,
            "tensorboard": False, "keep_last": 0, "lr": 0.001, "warmup": 2, "watch": watch,
        },
    }  # fmt: skip
    (folder / "ft.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    run = folder / "run"
    result = mt_cli(
        "train", folder / "ft.yaml", "--run-dir", run, "--init-from", tiny_run / "best.pt"
    )
    assert result.rc == 0, result.err
    return folder, run, result


def evaluations(run: Path) -> list[dict]:
    return [r for r in records(run) if "valid_loss" in r]


def test_each_watched_set_has_its_own_values_at_every_evaluation_and_the_start(watched):
    _, run, _ = watched
    evals = evaluations(run)
    assert [r["step"] for r in evals] == [0, 3, 6]  # the start (the base) is evaluated too
    for r in evals:
        for name in ("same", "tmx", "general"):
            assert {f"watch_bleu/{name}", f"watch_chrf/{name}", f"watch_loss/{name}"} <= r.keys()
        # The run's own dev set watched under a name: the dev metrics, to the rounding.
        assert r["watch_bleu/same"] == pytest.approx(r["dev_bleu"], abs=1e-4)
        assert r["watch_chrf/same"] == pytest.approx(r["dev_chrf"], abs=1e-4)
        assert r["watch_loss/same"] == pytest.approx(r["valid_loss"], abs=1e-4)
        for key in ("bleu", "chrf", "loss"):  # the same pairs from a TMX file
            assert r[f"watch_{key}/tmx"] == pytest.approx(r[f"watch_{key}/same"], abs=1e-4)
        assert r["watch_loss/general"] != pytest.approx(r["watch_loss/same"], abs=1e-3)
        assert "dev_bleu/general" not in r  # a watched set is in no dev mean
    # The model changes, and so do the watched values.
    assert evals[0]["watch_loss/general"] != evals[-1]["watch_loss/general"]


def test_the_watched_bleu_is_mt_evals_bleu_of_that_checkpoint(watched, mt_cli):
    folder, run, _ = watched
    last = torch.load(run / "last.pt", weights_only=True)
    assert last["step"] == STEPS
    out = mt_cli(
        "eval", run / "last.pt", "--src", folder / "general.de", "--ref", folder / "general.en",
        "--beam", "1", "--json",
    )  # fmt: skip
    assert out.rc == 0, out.err
    final = evaluations(run)[-1]
    assert final["watch_bleu/general"] == pytest.approx(json.loads(out.out)["bleu"], abs=1e-4)


def test_best_pt_follows_the_stated_rule_and_the_run_says_which(watched):
    _, run, result = watched
    rule = BestRule.of([WatchConfig(name="general", src="x", ref="y", keep_within=0.5)])
    evals = evaluations(run)
    want = choose(rule, [(r["step"], r) for r in evals])
    recs = records(run)
    stated = [r for r in recs if "best_rule" in r]
    assert stated[0]["step"] == 0 and stated[-1]["best_step"] == want
    floor = evals[0]["watch_bleu/general"] - 0.5
    assert f"watch_bleu/general >= {floor:.2f}" in stated[-1]["best_rule"]
    assert [r["admitted"] for r in evals] == [r["watch_bleu/general"] >= floor for r in evals]
    assert torch.load(run / "best.pt", weights_only=True)["step"] == want
    assert f"best.pt: step {want}, the highest dev_bleu among" in result.err


def test_a_missing_watch_file_is_one_line_naming_the_entry(
    tiny_run, multi30k_dir, tmp_path, mt_cli
):
    watch = entry("gone", tmp_path / "no.de", tmp_path / "no.en")
    out = broken_run(tiny_run / "best.pt", multi30k_dir, tmp_path, watch, mt_cli)
    assert "train.watch[0] (gone)" in out.err and "no.de" in out.err


def test_line_counts_that_differ_are_one_line(tiny_run, multi30k_dir, tmp_path, mt_cli):
    (tmp_path / "a.de").write_text("eins\nzwei\n")
    with gzip.open(tmp_path / "a.en.gz", "wt") as f:
        f.write("one\n")
    watch = entry("a", tmp_path / "a.de", tmp_path / "a.en.gz")
    out = broken_run(tiny_run / "best.pt", multi30k_dir, tmp_path, watch, mt_cli)
    assert "train.watch[0] (a)" in out.err and "has 2 lines but" in out.err

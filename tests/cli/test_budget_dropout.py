"""`train.dropout_by_epochs` in real runs: the rates chosen from the budget reach the log, the
checkpoints and `--resume`, and a time-bounded run decides after its probe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support.tasks import reverse_task_config

from mt.train.budget import PROBE, SKIP, WINDOW, interpolate

RULE = {"epochs": [1, 20], "dropout": [0.0, 0.38], "attention_dropout": [0.05, 0.24]}


def decisions(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if "budget_epochs" in r]


def model_section(path: Path) -> dict:
    return torch.load(path, weights_only=False)["config"]["model"]


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    return reverse_task_config(tmp_path_factory.mktemp("budget"), dropout_by_epochs=RULE)


def test_a_step_bounded_run_sets_the_rates_its_epochs_call_for(config, tmp_path, mt_cli):
    run = tmp_path / "run"
    result = mt_cli("train", config, "--run-dir", run)
    assert result.rc == 0, result.err
    assert "dropout by budget from max_steps" in result.err
    (record,) = decisions(run)
    assert record["step"] == 0
    epochs = record["budget_epochs"]
    assert 1 < epochs < 20  # 24 updates of a few batches each
    want = {
        "dropout": interpolate(RULE["epochs"], RULE["dropout"], epochs),
        "attention_dropout": interpolate(RULE["epochs"], RULE["attention_dropout"], epochs),
    }
    for key, rate in want.items():
        assert record[key] == pytest.approx(rate, abs=1e-3)
    assert "(train.dropout_by_epochs)" in result.err
    for name in ("last.pt", "best.pt"):
        section = model_section(run / name)
        assert section["dropout"] == record["dropout"], name
        assert section["attention_dropout"] == record["attention_dropout"], name
        assert section["activation_dropout"] == 0.0  # the rule leaves it alone


def test_a_resumed_run_keeps_its_choice(config, tmp_path, mt_cli):
    run = tmp_path / "run"
    half = mt_cli("train", config, "--run-dir", run, "--set", "train.max_steps=12")
    assert half.rc == 0, half.err
    (first,) = decisions(run)
    more = mt_cli("train", config, "--run-dir", run, "--resume")
    assert more.rc == 0, more.err
    assert "dropout by budget kept" in more.err
    assert decisions(run) == [first]  # not chosen again for the longer budget
    assert torch.load(run / "last.pt", weights_only=False)["step"] == 24
    assert model_section(run / "last.pt")["dropout"] == first["dropout"]


def test_a_time_bounded_run_decides_after_its_probe(tmp_path, mt_cli):
    steps = SKIP + PROBE + 6
    config = reverse_task_config(
        tmp_path, dropout_by_epochs=RULE, max_minutes=60, max_steps=steps, eval_every=steps
    )
    result = mt_cli("train", config, "--run-dir", tmp_path / "run")
    assert result.rc == 0, result.err
    (record,) = decisions(tmp_path / "run")  # the review, at 12 minutes, never came
    assert record["step"] == SKIP + PROBE and "review" not in record
    assert "dropout by budget after 120 updates, reviewed at 12 minutes" in result.err
    assert f"the median of {PROBE // WINDOW} windows of {WINDOW} updates" in result.err
    state = torch.load(tmp_path / "run" / "last.pt", weights_only=False)["train_state"]["state"]
    assert state["dropout"] == {k: record[k] for k in RULE if k != "epochs"}
    assert state["dropout_final"] is False  # a resume would still review
    # an hour at this pace reaches far beyond max_steps, which bounds it
    per_epoch = steps / record["budget_epochs"]
    assert 2 <= per_epoch <= 20

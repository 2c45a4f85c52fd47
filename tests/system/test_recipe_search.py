"""scripts/studies/recipe_search.py: trials as overrides, what a row reads from a run, and one
search end to end on the small reverse task (a trial that trains, one the config rejects)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.tasks import reverse_task_config

from mt.config_file import load_config, parse_override
from scripts.studies import recipe_search

REPO = Path(__file__).resolve().parents[2]


def test_trials_become_the_overrides_mt_train_reads(tmp_path):
    path = tmp_path / "trials.yaml"
    path.write_text(
        "ema: {train.ema_decay: 0.999}\ngrid: {train.tune_beam: [4, 5], model.norm: pre}\nbase:\n",
        encoding="utf-8",
    )
    trials = recipe_search.read_trials(path)
    assert [t.name for t in trials] == ["ema", "grid", "base"]
    parsed = [[parse_override(item) for item in t.sets] for t in trials]
    assert parsed == [
        [("train.ema_decay", 0.999)],
        [("train.tune_beam", [4, 5]), ("model.norm", "pre")],
        [],
    ]
    assert trials[2].change() == "(base config)"
    line = recipe_search.parse_trial("deep model.encoder_layers=5 model.decoder_layers=2")
    assert line.name == "deep" and line.sets == ["model.encoder_layers=5", "model.decoder_layers=2"]
    assert recipe_search.budget_sets(10, None) == [
        "train.max_minutes=10",
        "train.max_steps=100000000",
    ]
    assert recipe_search.budget_sets(None, 300) == ["train.max_steps=300", "train.max_minutes=0"]


def test_a_row_reads_dev_bleu_at_the_given_minutes(tmp_path):
    records = [
        {"step": 50, "loss": 5.0, "tgt_tokens_per_s": 1000.0, "elapsed": 100},
        {"step": 100, "loss": 4.0, "tgt_tokens_per_s": 3000.0, "elapsed": 200},
        {"step": 100, "elapsed": 290, "valid_loss": 3.0, "dev_bleu": 10.0},
        {"step": 150, "loss": 3.5, "tgt_tokens_per_s": 2000.0, "elapsed": 500},
        {"step": 200, "elapsed": 650, "valid_loss": 2.5, "dev_bleu": 20.0},
        {"step": 200, "averaged_valid_loss": 2.4, "averaged_dev_bleu": 21.0},
        {"step": 200, "stopped": "max_minutes", "elapsed": 650},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    m = recipe_search.metrics(tmp_path, [4, 5, 11])
    assert m["steps"] == 200 and m["tokens_per_s"] == 2000.0  # the median interval
    assert m["dev_at"] == "4: -, 5: 10.00, 11: 20.00"
    assert m["best_dev"] == 21.0 and m["averaged"] == 21.0


@pytest.mark.slow  # a script's or a retry's check of many seconds: `pytest -m slow`
def test_a_search_appends_one_row_per_trial(tmp_path):
    config = reverse_task_config(tmp_path, eval_bleu=True, eval_every=4, log_every=2)
    out = tmp_path / "recipes.md"
    out.write_text("# Recipes\n\nIntro.\n", encoding="utf-8")
    result = subprocess.run(
        [
            *(sys.executable, "-m", "scripts.studies.recipe_search"),
            config,
            *("--steps", "4", "--set", "data.test=val", "--at", "1"),
            *("--trial", "ema train.ema_decay=0.9", "--trial", "broken model.d_model=7"),
            *("--work", tmp_path / "work", "--out", out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Recipes\n\nIntro.\n")
    table = [x for x in text.splitlines() if x.startswith("| ")]
    assert table[0].startswith("| trial | change |") and len(table) == 4  # header, rule, 2 rows
    ema, broken = (r.strip("| ").split(" | ") for r in table[2:])
    assert ema[:4] == ["ema", "train.ema_decay=0.9", "4 steps", "4"] and ema[-1] == "ok"
    assert float(ema[7]) >= 0 and ema[8] == "beam 5, alpha 0.6"
    logged = (tmp_path / "work" / "ema" / "metrics.jsonl").read_text().splitlines()
    best_dev = max(json.loads(x).get("dev_bleu", -1) for x in logged)
    assert ema[6] == f"{best_dev:.2f}"
    assert broken[0] == "broken" and broken[3] == "0" and broken[7] == "-"
    assert broken[-1].startswith("config: --set model.d_model=7: model.d_model (7) must be")


def test_every_shipped_trial_is_a_valid_recipe():
    """A misspelt key or a value out of bounds in scripts/studies/recipe_trials.yaml fails here,
    not minutes into a search."""
    trials = recipe_search.read_trials(REPO / "scripts" / "studies" / "recipe_trials.yaml")
    assert len(trials) >= 20 and "base" in [t.name for t in trials]
    for recipe in ("multi30k_de_en", "multi30k_en_de"):
        for t in trials:
            cfg = load_config(REPO / "configs" / f"{recipe}.yaml", t.sets)
            for key, value in map(parse_override, t.sets):
                section, name = key.split(".")
                assert getattr(getattr(cfg, section), name) == value, (t.name, key)

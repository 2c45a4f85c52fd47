"""Every checkpoint a run writes carries the run's id: one id per run, kept across --resume,
a new one for a new run (a fine-tuning run included)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from support.tasks import reverse_task_config


def run_ids(run_dir: Path) -> dict[str, str]:
    return {
        p.name: torch.load(p, weights_only=True)["run_id"] for p in sorted(run_dir.glob("*.pt"))
    }


@pytest.mark.slow  # ~10-30 s; test_averaging checks the id is kept by default
def test_run_id_is_one_per_run_and_survives_resume(tmp_path, mt_cli):
    config = reverse_task_config(tmp_path, max_steps=8, eval_every=4, keep_last=2, average_last=2)
    first = tmp_path / "first"
    result = mt_cli("train", config, "--run-dir", first)
    assert result.rc == 0, result.err
    ids = run_ids(first)
    assert set(ids) == {"last.pt", "best.pt", "checkpoint_4.pt", "checkpoint_8.pt", "averaged.pt"}
    (run_id,) = set(ids.values())
    assert re.fullmatch(r"[0-9a-f]{32}", run_id)

    more = mt_cli("train", config, "--run-dir", first, "--resume", "--set", "train.max_steps=12")
    assert more.rc == 0, more.err
    assert torch.load(first / "checkpoint_12.pt", weights_only=True)["step"] == 12
    assert set(run_ids(first).values()) == {run_id}

    tuned = tmp_path / "tuned"
    ft = mt_cli("train", config, "--run-dir", tuned, "--init-from", first / "last.pt")
    assert ft.rc == 0, ft.err
    (other,) = set(run_ids(tuned).values())
    assert other != run_id

"""`mt train` says once, in its log, when the validation NLL has turned up (a model learning its
training set by heart), and carries on: the note stops nothing."""

from __future__ import annotations

import json
import random
import re

import pytest
from support.inprocess import run_mt_here
from support.tasks import reverse_task_config


@pytest.mark.slow  # about 50 s of training: `pytest -m slow`
def test_a_run_that_memorises_its_training_set_is_told_once(tmp_path):
    # 24 pairs whose targets are unrelated to their sources: dev NLL can only fall while the
    # model learns which words are common, then rises as it memorises the 24 targets.
    config = reverse_task_config(tmp_path, max_steps=240, eval_every=10, lr=0.003, warmup=10)
    rng = random.Random(3)
    words = ["ka", "lo", "mi", "nu", "pe", "ri", "so", "tu", "va", "ze"]
    for name, n in (("train", 24), ("val", 20)):
        for side in ("src", "tgt"):
            lines = [" ".join(rng.choices(words, k=rng.randint(3, 6))) for _ in range(n)]
            (tmp_path / "data" / f"{name}.{side}").write_text("\n".join(lines) + "\n")
    result = run_mt_here("train", config, "--run-dir", tmp_path / "run")
    assert result.rc == 0, result.err
    log = result.out + result.err
    assert log.count("note: validation NLL") == 1, log[-2000:]

    evals = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    nll = {r["step"]: r["valid_nll"] for r in evals if "valid_nll" in r}
    assert max(nll) == 240  # the run went on to its last step
    found = re.search(
        r"NLL ([\d.]+) at step (\d+) is above its lowest, ([\d.]+) at step (\d+)", log
    )
    assert found, log[-2000:]
    said, low = int(found[2]), int(found[4])
    # (the log keeps 4 decimals, the note 3)
    assert abs(float(found[1]) - nll[said]) < 6e-4 and abs(float(found[3]) - nll[low]) < 6e-4
    # The lowest NLL up to the note, 1% or more below the NLL said, 3 or more evaluations back.
    assert nll[low] == min(v for s, v in nll.items() if s <= said)
    assert nll[said] >= 1.01 * nll[low]
    assert len([s for s in nll if low < s <= said]) >= 3

"""`mt train --resume` continues a run as if it had never stopped.

One run trains N steps straight; another trains N/2 steps, stops, and resumes to N. With the
same seed on CPU with one thread, the resumed run must log the same losses and end with the same
weights: model, optimizer, the EMA of the weights, dropout RNG and data position all come back
from `last.pt`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support.tasks import TIMES, reverse_task_config

N = 24  # steps; N/2 is where the interrupted run stops and resumes


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    # Dropout stays on (model default 0.1): the resumed run must restore the RNG as well.
    # max_tokens 256 gives several batches per epoch, so N/2 stops mid-epoch. An EMA of the
    # weights (train.ema_decay) is on: the evaluations score the average, so they match only
    # if the average came back too; without it the run takes the same path minus the EMA.
    return reverse_task_config(
        tmp_path_factory.mktemp("resume"), max_steps=N, eval_every=N // 2, ema_decay=0.9
    )


def logged(run_dir: Path) -> list[dict]:
    """Training and evaluation records without the wall-clock fields."""
    records = []
    for line in (run_dir / "metrics.jsonl").open(encoding="utf-8"):
        r = json.loads(line)
        if "loss" in r or "valid_loss" in r:
            records.append({k: v for k, v in r.items() if k not in TIMES})
    return records


def test_resumed_run_matches_uninterrupted_run(config, tmp_path, mt_cli):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    result = mt_cli("train", config, "--run-dir", straight)
    assert result.rc == 0, result.err

    half = mt_cli("train", config, "--run-dir", resumed, "--set", f"train.max_steps={N // 2}")
    assert half.rc == 0, half.err
    assert torch.load(resumed / "last.pt", weights_only=True)["step"] == N // 2
    more = mt_cli("train", config, "--run-dir", resumed, "--resume")
    assert more.rc == 0, more.err

    a, b = logged(straight), logged(resumed)
    assert [r["step"] for r in a if "loss" in r] == list(range(4, N + 1, 4))
    assert [r["step"] for r in b] == [r["step"] for r in a]
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys()
        for key in ra:
            assert rb[key] == pytest.approx(ra[key], rel=1e-5, abs=1e-6), (ra["step"], key)
    last_loss = [r["loss"] for r in b if "loss" in r][-1]
    assert last_loss == pytest.approx([r["loss"] for r in a if "loss" in r][-1], rel=1e-6)

    wa = torch.load(straight / "last.pt", weights_only=True)
    wb = torch.load(resumed / "last.pt", weights_only=True)
    assert wa["step"] == wb["step"] == N
    assert wa["model"].keys() == wb["model"].keys()
    for name, tensor in wa["model"].items():
        torch.testing.assert_close(wb["model"][name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    ema_a, ema_b = wa["train_state"]["ema"], wb["train_state"]["ema"]
    assert len(ema_a) == len(ema_b) > 0
    for x, y in zip(ema_a, ema_b, strict=True):
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-6)


def test_skipped_update_counts_survive_a_resume(tmp_path, mt_cli):
    """Updates skipped for a non-finite gradient are counted for the run, not per process:
    the resumed run logs the run's total, and `max_bad_updates` in a row counts the updates
    skipped before the resume too, so both runs stop at the same step. lr_scale 1e9 makes the
    first update blow the weights up; every later one is then non-finite and skipped.
    """
    config = reverse_task_config(tmp_path, max_steps=40, eval_every=40, log_every=2)
    bad = ("--set", "train.lr_scale=1e9", "--set", "train.max_bad_updates=8")
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    first = mt_cli("train", config, "--run-dir", straight, *bad)
    assert first.rc == 3 and "8 updates in a row" in first.err
    half = mt_cli("train", config, "--run-dir", resumed, *bad, "--set", "train.max_steps=4")
    assert half.rc == 0, half.err
    more = mt_cli("train", config, "--run-dir", resumed, *bad, "--resume")
    assert more.rc == 3 and "8 updates in a row" in more.err
    a = [(r["step"], r.get("skipped_updates")) for r in logged(straight) if "loss" in r]
    b = [(r["step"], r.get("skipped_updates")) for r in logged(resumed) if "loss" in r]
    assert a == b and all(skipped == step - 1 for step, skipped in a), (a, b)
    steps = [torch.load(d / "last.pt", weights_only=True)["step"] for d in (straight, resumed)]
    assert steps[0] == steps[1] < 40


def test_a_fine_tuning_run_with_keep_resumes_exactly(tmp_path, mt_cli):
    """`finetune.keep: kl` holds the base in memory; `last.pt` holds only the trained model, so
    the resumed run reads the base again from `train.init_from` (given to neither the config
    nor the resuming command: the run's own config records it) and adds the same term: the
    same losses, KL values and weights as the run that never stopped. A watched set is on too:
    its start values (the base's, evaluated before the first step) come back from `last.pt`."""
    config = reverse_task_config(tmp_path, max_steps=8, eval_every=8)
    base = tmp_path / "base"
    assert mt_cli("train", config, "--run-dir", base).rc == 0
    data = tmp_path / "data"
    watch = f"[{{name: general, src: {data / 'val.src'}, ref: {data / 'val.tgt'}}}]"
    keep = (
        *("--set", "finetune.keep=kl", "--set", "finetune.keep_weight=2"),
        *("--set", "train.eval_every=6", "--set", f"train.watch={watch}"),
        *("--set", "train.max_steps=24"),
    )
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    init = ("--init-from", base / "best.pt")
    assert mt_cli("train", config, "--run-dir", straight, *init, *keep).rc == 0
    half = mt_cli(
        "train", config, "--run-dir", resumed, *init, *keep, "--set", "train.max_steps=12"
    )
    assert half.rc == 0, half.err
    more = mt_cli("train", config, "--run-dir", resumed, "--resume", *keep)
    assert more.rc == 0, more.err
    assert "toward the frozen base" in more.err

    a, b = logged(straight), logged(resumed)
    assert [r["step"] for r in a if "valid_loss" in r] == [0, 6, 12, 18, 24]
    assert [r["step"] for r in b] == [r["step"] for r in a]
    kls = [r["keep_kl"] for r in a if "loss" in r]
    assert len(kls) == 6 and all(k > 0 for k in kls)
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys()
        for key in ra:
            assert rb[key] == pytest.approx(ra[key], rel=1e-5, abs=1e-6), (ra["step"], key)
    wa = torch.load(straight / "last.pt", weights_only=True)
    wb = torch.load(resumed / "last.pt", weights_only=True)
    assert wa["train_state"]["state"]["watch_start"] == wb["train_state"]["state"]["watch_start"]
    for name, tensor in wa["model"].items():
        torch.testing.assert_close(wb["model"][name], tensor, rtol=1e-5, atol=1e-6, msg=name)

"""`torchrun --nproc_per_node=2 -m mt train` (DDP, gloo on CPU) follows a single process that
sees the same global batch: rank r takes batches r, r+2, ..., one process with accum_steps=2
takes batches (2k, 2k+1) per update, so the losses and weights must agree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.processes import free_port
from support.tasks import reverse_task_config

K = 12


def losses(run_dir: Path) -> dict[int, float]:
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "loss" in r:
            out[r["step"]] = r["loss"]
    return out


@pytest.mark.slow
def test_two_process_ddp_matches_single_process(tmp_path, mt_cli):
    if shutil.which("torchrun") is None and not Path(sys.executable).with_name("torchrun").exists():
        pytest.skip("torchrun not installed")
    # No dropout: the two runs draw different random numbers, everything else must agree.
    # 64 tokens per batch: well over 2K batches per epoch, so no update crosses an epoch end
    # (where one process would take a lone last batch that the two ranks drop).
    config = reverse_task_config(tmp_path, max_steps=K, eval_every=K, max_tokens=64)
    single = mt_cli(
        "train",
        config,
        "--run-dir",
        tmp_path / "single",
        "--set",
        "train.accum_steps=2",
        "--set",
        "model.dropout=0.0",
    )
    assert single.rc == 0, single.err
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    ddp = subprocess.run(
        [
            torchrun,
            "--nproc_per_node=2",
            f"--master_port={free_port()}",
            "-m",
            "mt",
            "train",
            str(config),
            "--run-dir",
            str(tmp_path / "ddp"),
            "--set",
            "model.dropout=0.0",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=600,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    return ddp.stderr
    a, b = losses(tmp_path / "single"), losses(tmp_path / "ddp")
    assert sorted(a) == sorted(b) == list(range(4, K + 1, 4))
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-4), step
    wa = torch.load(tmp_path / "single" / "last.pt", weights_only=True)["model"]
    wb = torch.load(tmp_path / "ddp" / "last.pt", weights_only=True)["model"]
    for name, tensor in wa.items():
        torch.testing.assert_close(wb[name], tensor, rtol=1e-4, atol=1e-5, msg=name)
    # Only rank 0 writes: one metrics line per log step, not two.
    assert (
        len(
            [
                x
                for x in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()
                if '"loss"' in x
            ]
        )
        == K // 4
    )


@pytest.mark.slow
def test_two_process_ddp_trains_an_adapter_as_one_process_does(tmp_path, mt_cli):
    """The same for a LoRA adapter on a frozen base: DDP syncs the adapter's gradients alone
    (the base has none), and rank 0 writes adapter files."""
    if shutil.which("torchrun") is None and not Path(sys.executable).with_name("torchrun").exists():
        pytest.skip("torchrun not installed")
    config = reverse_task_config(tmp_path, max_steps=K, eval_every=K, max_tokens=64)
    nodrop = ("--set", "model.dropout=0.0")
    assert mt_cli("train", config, "--run-dir", tmp_path / "base", *nodrop).rc == 0
    lora = ("--init-from", str(tmp_path / "base" / "last.pt"), "--set", "finetune.adapter=lora")
    single = mt_cli(
        "train", config, "--run-dir", tmp_path / "single", *lora, *nodrop,
        "--set", "train.accum_steps=2",
    )  # fmt: skip
    assert single.rc == 0, single.err
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    ddp = subprocess.run(
        [torchrun, "--nproc_per_node=2", f"--master_port={free_port()}", "-m", "mt", "train",
         str(config), "--run-dir", str(tmp_path / "ddp"), *lora, *nodrop],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=600,
    )  # fmt: skip
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    return ddp.stderr
    a, b = losses(tmp_path / "single"), losses(tmp_path / "ddp")
    assert sorted(a) == sorted(b) == list(range(4, K + 1, 4))
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-4), step
    wa = torch.load(tmp_path / "single" / "last.pt", weights_only=True)
    wb = torch.load(tmp_path / "ddp" / "last.pt", weights_only=True)
    assert "adapter" in wb and wa["model"].keys() == wb["model"].keys()
    for name, tensor in wa["model"].items():
        assert name.endswith(("lora_a", "lora_b")), name
        torch.testing.assert_close(wb["model"][name], tensor, rtol=1e-4, atol=1e-5, msg=name)


def records(run_dir: Path) -> dict[int, dict]:
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "loss" in r:
            out[r["step"]] = r
    return out


@pytest.mark.slow
def test_ddp_fine_tuning_with_keep_matches_single_process(tmp_path, mt_cli):
    """`finetune.keep: kl` under torchrun: each rank holds its own frozen base, the KL term
    goes into the gradient DDP averages, and its logged value is summed over the ranks, so
    the two-process run follows the one-process run with the same global batch (loss, KL and
    weights). A watched set is scored by rank 0 alone, before the first step too."""
    if shutil.which("torchrun") is None and not Path(sys.executable).with_name("torchrun").exists():
        pytest.skip("torchrun not installed")
    config = reverse_task_config(tmp_path, max_steps=K, eval_every=K, max_tokens=64)
    data = tmp_path / "data"
    watch = f"[{{name: general, src: {data / 'val.src'}, ref: {data / 'val.tgt'}}}]"
    keep = [
        *("--set", "finetune.keep=kl", "--set", "finetune.keep_weight=3"),
        *("--set", f"train.watch={watch}", "--set", "train.lr_scale=4"),
    ]
    fine_tune_both_ways(tmp_path, config, mt_cli, keep)
    a, b = records(tmp_path / "single"), records(tmp_path / "ddp")
    assert sorted(a) == sorted(b) == list(range(4, K + 1, 4))
    for step in a:
        assert a[step]["keep_kl"] > 0
        for key in ("loss", "keep_kl"):
            assert b[step][key] == pytest.approx(a[step][key], rel=1e-4), (step, key)
    wa = torch.load(tmp_path / "single" / "last.pt", weights_only=True)["model"]
    wb = torch.load(tmp_path / "ddp" / "last.pt", weights_only=True)["model"]
    for name, tensor in wa.items():
        torch.testing.assert_close(wb[name], tensor, rtol=1e-4, atol=1e-5, msg=name)
    evals = [json.loads(x) for x in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in evals if "watch_loss/general" in r] == [0, K]


@pytest.mark.slow
def test_ddp_fine_tuning_with_replay_translates_once_and_matches_single_process(tmp_path, mt_cli):
    """`finetune.replay_sources` under torchrun: each rank translates its share of the chunks,
    all wait for the whole, and the two-process run trains on the same replayed corpus as the
    one-process run with the same global batch (same translations, same losses)."""
    if shutil.which("torchrun") is None and not Path(sys.executable).with_name("torchrun").exists():
        pytest.skip("torchrun not installed")
    config = reverse_task_config(tmp_path, max_steps=K, eval_every=K, max_tokens=64)
    sources = tmp_path / "data" / "train.src"
    replay = [
        *("--set", f"finetune.replay_sources={sources}", "--set", "finetune.replay_beam=2"),
        *("--set", "finetune.replay_weight=0.5", "--set", "train.lr_scale=4"),
    ]
    stderr = fine_tune_both_ways(tmp_path, config, mt_cli, replay)
    (one,) = [p for p in (tmp_path / "single" / "replay").iterdir() if p.is_dir()]
    (two,) = [p for p in (tmp_path / "ddp" / "replay").iterdir() if p.is_dir()]
    assert one.name == two.name  # the same base, search and lines: the same key
    assert (two / "text.tgt").read_bytes() == (one / "text.tgt").read_bytes()
    assert "(share 0/2)" in stderr or "(share 1/2)" in stderr
    a, b = losses(tmp_path / "single"), losses(tmp_path / "ddp")
    assert sorted(a) == sorted(b) and a
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-4), step


def fine_tune_both_ways(tmp_path: Path, config: Path, mt_cli, extra: list[str]) -> str:
    """Fine-tune the reverse task's base (trained here, no dropout) with `extra`: in one process
    with two accumulated batches (run dir `single`) and under torchrun with two (`ddp`); returns
    torchrun's stderr."""
    no_dropout = ("--set", "model.dropout=0.0")
    base = mt_cli("train", config, "--run-dir", tmp_path / "base", *no_dropout)
    assert base.rc == 0, base.err
    args = [*extra, "--init-from", str(tmp_path / "base" / "best.pt"), *no_dropout]
    single = mt_cli(
        "train", config, "--run-dir", tmp_path / "single", "--set", "train.accum_steps=2", *args
    )
    assert single.rc == 0, single.err
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    ddp = subprocess.run(
        [torchrun, "--nproc_per_node=2", f"--master_port={free_port()}", "-m", "mt", "train",
         str(config), "--run-dir", str(tmp_path / "ddp"), *args],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600,
    )  # fmt: skip
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    return ddp.stderr

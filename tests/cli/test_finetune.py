"""`mt train --init-from CKPT`: fine-tuning through the real command line on Multi30k.

The base is the shared tiny run (`tiny_run`, trained on the first 2,000 training pairs). Each
fine-tuning run trains a few steps on another slice (pairs 10,000-10,599) with a config that
has no model or tokenizer section, as a user's fine-tuning config would: the model and the
tokenizer must come from the checkpoint, the weights must start where the base stopped, and the
frozen parts must not move.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
import yaml

STEPS = 6


@pytest.fixture(scope="module")
def slice_dir(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Text files `ft.{de,en}` (600 pairs the base never saw) and `dev.{de,en}` (40 pairs)."""
    root = tmp_path_factory.mktemp("ft_data")
    for lang in ("de", "en"):
        with gzip.open(multi30k_dir / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()[10_000:10_600]
        (root / f"ft.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        with gzip.open(multi30k_dir / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()[:40]
        (root / f"dev.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def ft_config(folder: Path, data: Path, **train: object) -> Path:
    """A fine-tuning config: data and training settings only, plus one dropout change."""
    cfg = {
        "data": {"root": str(data), "train": "ft", "valid": "dev"},
        "model": {"attention_dropout": 0.1},  # the base has 0.0; dropout keys may differ
        "train": {
            "device": "cpu",
            "precision": "fp32",
            "threads": 1,
            "seed": 3,
            "max_tokens": 2048,
            "schedule": "inverse_sqrt",
            "lr": 0.001,
            "warmup": 10,
            "max_steps": STEPS,
            "log_every": 1,
            "eval_every": 1000,
            "eval_bleu": False,
            "keep_last": 0,
            **train,
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ft.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def losses(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if "loss" in r]


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["model"]


@pytest.fixture(scope="module")
def frozen_run(tiny_run: Path, slice_dir: Path, tmp_path_factory, mt_cli) -> tuple[Path, str]:
    """A fine-tuning run from the tiny base with embeddings and encoder frozen; and its stderr."""
    folder = tmp_path_factory.mktemp("ft")
    config = ft_config(folder, slice_dir, freeze=["embeddings", "encoder"])
    run_dir = folder / "run"
    result = mt_cli("train", config, "--run-dir", run_dir, "--init-from", tiny_run / "last.pt")
    assert result.rc == 0, result.err
    return run_dir, result.err


def test_the_checkpoints_tokenizer_and_model_are_used(frozen_run, tiny_run):
    run_dir, err = frozen_run
    assert (run_dir / "spm.model").read_bytes() == (tiny_run / "spm.model").read_bytes()
    assert "tokenizer: unigram" not in err  # the line of a tokenizer being trained
    assert "the config's tokenizer settings are not" in err  # its vocab_size (8000) is ignored
    recorded = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    base = yaml.safe_load((tiny_run / "config.yaml").read_text(encoding="utf-8"))
    assert recorded["model"] == {**base["model"], "attention_dropout": 0.1}
    assert recorded["tokenizer"] == base["tokenizer"]
    assert recorded["train"]["init_from"] == str(tiny_run / "last.pt")
    first = json.loads((run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert first["init_from"] == str(tiny_run / "last.pt")
    assert first["init_step"] == 60 and first["freeze"] == ["embeddings", "encoder"]


def test_training_starts_at_step_1_from_the_base_models_loss(frozen_run, tiny_run):
    run_dir, _ = frozen_run
    records = losses(run_dir)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert records[0]["lr"] == pytest.approx(0.001 / 10)  # a fresh warmup: step 1 of 10
    base = losses(tiny_run)
    scratch_first, base_last = base[0]["loss"], base[-1]["loss"]  # steps 1-10, 51-60
    assert scratch_first - base_last > 1.0  # the base learnt something worth keeping
    first = records[0]["loss"]  # one batch of pairs the base never saw
    assert first < base_last + 0.5
    assert first < scratch_first - 1.0
    optimizer = torch.load(run_dir / "last.pt", weights_only=True)["train_state"]["optimizer"]
    assert {int(s["step"]) for s in optimizer["state"].values()} == {STEPS}  # fresh Adam


def test_frozen_parameters_do_not_move_and_the_others_do(frozen_run, tiny_run):
    run_dir, _ = frozen_run
    before, after = weights(tiny_run / "last.pt"), weights(run_dir / "last.pt")
    frozen = [k for k in before if k.startswith(("encoder.", "src_embed.", "tgt_embed."))]
    assert "output.weight" in before and len(frozen) > 10
    for name in [*frozen, "output.weight"]:  # tied: the output projection is the embedding
        assert torch.equal(after[name], before[name]), name
    decoder = [k for k in before if k.startswith("decoder.")]  # post-norm: no decoder_norm
    assert decoder and all(not torch.equal(after[k], before[k]) for k in decoder)
    assert set(before) == {*frozen, *decoder, "output.weight"}
    optimizer = torch.load(run_dir / "last.pt", weights_only=True)["train_state"]["optimizer"]
    assert len(optimizer["param_groups"][0]["params"]) == len(decoder)  # frozen ones left out


def test_resume_continues_the_fine_tuning_run(frozen_run, tiny_run, mt_cli):
    run_dir, _ = frozen_run
    config = run_dir.parent / "ft.yaml"
    result = mt_cli(
        "train", config, "--run-dir", run_dir, "--resume", "--set", f"train.max_steps={STEPS + 2}"
    )
    assert result.rc == 0, result.err
    assert [r["step"] for r in losses(run_dir)] == list(range(1, STEPS + 3))
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    assert sum("init_from" in json.loads(line) for line in lines) == 1
    before, after = weights(tiny_run / "last.pt"), weights(run_dir / "last.pt")
    assert torch.equal(after["encoder.0.attn.qkv.weight"], before["encoder.0.attn.qkv.weight"])


def test_init_keep_optimizer_continues_the_base_runs_step(tiny_run, slice_dir, tmp_path, mt_cli):
    config = ft_config(tmp_path, slice_dir, max_steps=62, init_keep_optimizer=True)
    result = mt_cli(
        "train", config, "--run-dir", tmp_path / "run", "--init-from", tiny_run / "last.pt"
    )
    assert result.rc == 0, result.err
    assert [r["step"] for r in losses(tmp_path / "run")] == [61, 62]
    optimizer = torch.load(tmp_path / "run" / "last.pt", weights_only=True)["train_state"]
    assert {int(s["step"]) for s in optimizer["optimizer"]["state"].values()} == {62}


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("mt: error: "), err
    return lines[0]


def test_a_contradicting_model_key_is_one_line(tiny_run, slice_dir, tmp_path, mt_cli):
    config = ft_config(tmp_path, slice_dir)
    result = mt_cli(
        "train",
        config,
        "--run-dir",
        tmp_path / "run",
        "--init-from",
        tiny_run / "last.pt",
        "--set",
        "model.d_model=128",
    )
    assert result.rc == 2
    line = one_error_line(result.err)
    assert "model.d_model is 128" in line and "64" in line and "last.pt" in line
    assert not (tmp_path / "run" / "spm.model").exists()


def test_a_missing_checkpoint_is_one_line(slice_dir, tmp_path, mt_cli):
    config = ft_config(tmp_path, slice_dir)
    missing = tmp_path / "nope" / "last.pt"
    result = mt_cli("train", config, "--run-dir", tmp_path / "run", "--init-from", missing)
    assert result.rc == 2
    assert str(missing) in one_error_line(result.err)


def test_an_unknown_freeze_item_is_one_line(tiny_run, slice_dir, tmp_path, mt_cli):
    config = ft_config(tmp_path, slice_dir)
    result = mt_cli(
        "train",
        config,
        "--init-from",
        tiny_run / "last.pt",
        "--set",
        "train.freeze=[encoder, decodr]",
    )
    assert result.rc == 2
    line = one_error_line(result.err)
    assert "train.freeze[1]" in line and "decodr" in line


def test_freeze_without_a_checkpoint_is_one_line(slice_dir, tmp_path, mt_cli):
    config = ft_config(tmp_path, slice_dir, freeze=["encoder"])
    result = mt_cli("train", config, "--run-dir", tmp_path / "run")
    assert result.rc == 2
    assert "train.freeze needs train.init_from" in one_error_line(result.err)


def test_mt_prepare_of_a_fine_tuning_run_uses_the_checkpoints_tokenizer(
    tiny_run, slice_dir, tmp_path, mt_cli
):
    """Prepared ahead (a CPU node), then trained: no tokenizer is trained at either point."""
    config = ft_config(tmp_path, slice_dir, init_from=str(tiny_run / "last.pt"))
    run_dir = tmp_path / "run"
    prepared = mt_cli("prepare", config, "--run-dir", run_dir)
    assert prepared.rc == 0, prepared.err
    assert (run_dir / "spm.model").read_bytes() == (tiny_run / "spm.model").read_bytes()
    trained = mt_cli("train", config, "--run-dir", run_dir)
    assert trained.rc == 0, trained.err
    assert (run_dir / "last.pt").is_file()


def test_init_shrink_starts_a_shallower_model_from_the_checkpoints_layers(
    tiny_run, slice_dir, tmp_path, mt_cli
):
    """A 2+1 model from the 2+2 base: its one decoder layer is the base's first (frozen here,
    with the tables, so it must still be the base's after training), its encoder the base's
    two, trained on; more decoder layers than the base's are refused in one line."""
    config = ft_config(tmp_path, slice_dir, init_shrink=True, freeze=["embeddings", "decoder"])
    run = tmp_path / "run"
    args = ("--init-from", tiny_run / "last.pt", "--set", "model.decoder_layers=1")
    result = mt_cli("train", config, "--run-dir", run, *args)
    assert result.rc == 0, result.err
    assert "decoder layers [0] of its 2" in result.err
    base, shrunk = weights(tiny_run / "last.pt"), weights(run / "last.pt")
    assert not any(k.startswith("decoder.1.") for k in shrunk)
    for key in [k for k in shrunk if k.startswith(("decoder.0.", "tgt_embed"))]:
        assert torch.equal(shrunk[key], base[key]), key
    moved = [k for k in shrunk if k.startswith("encoder.1.")]
    assert moved and any(not torch.equal(shrunk[k], base[k]) for k in moved)
    stored = torch.load(run / "last.pt", weights_only=False)["config"]["model"]
    assert (stored["encoder_layers"], stored["decoder_layers"]) == (2, 1)
    grown = mt_cli(
        "train", config, "--run-dir", tmp_path / "grown", "--init-from", tiny_run / "last.pt",
        "--set", "model.decoder_layers=3",
    )  # fmt: skip
    assert grown.rc == 2
    assert "model.decoder_layers is 3" in one_error_line(grown.err)

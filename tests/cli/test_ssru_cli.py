"""A model with SSRU decoder layers (`model.decoder_self: ssru`) through the real commands: it
trains on a Multi30k slice, translates one line per input line in each search
and int8, keeps the setting in its checkpoint, and `mt export` refuses it in one line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from tests.conftest import train_tiny

SETS = {
    "model.decoder_self": "ssru", "train.max_steps": 30, "train.eval_every": 30,
    "train.log_every": 10, "train.threads": 1, "data.max_valid_examples": 20,
    "train.eval_bleu": "false",
}  # fmt: skip


@pytest.fixture(scope="module")
def ssru_run(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tiny(tmp_path_factory.mktemp("ssru") / "run", multi30k_dir, SETS)


def test_it_trains_and_keeps_the_setting(ssru_run: Path):
    ckpt = torch.load(ssru_run / "best.pt", map_location="cpu", weights_only=False)
    assert ckpt["config"]["model"]["decoder_self"] == "ssru"
    assert any(k.endswith("self_attn.proj.weight") for k in ckpt["model"])
    assert not any("decoder.0.self_attn.qkv" in k for k in ckpt["model"])
    losses = [
        json.loads(line)["loss"]
        for line in (ssru_run / "metrics.jsonl").read_text().splitlines()
        if '"loss"' in line and '"step"' in line
    ]
    assert len(losses) >= 3 and losses[-1] < losses[0]


@pytest.mark.parametrize("flags", [("--greedy",), ("--beam", "3"), ("--greedy", "--int8")])
def test_it_translates_a_line_per_line(ssru_run: Path, multi30k_dir: Path, mt_cli, flags):
    with gzip.open(multi30k_dir / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(12)]
    result = mt_cli("translate", ssru_run / "best.pt", *flags, stdin="".join(lines))
    assert result.rc == 0, result.err
    assert len(result.out.splitlines()) == 12


def test_export_refuses_it_in_one_line(ssru_run: Path, mt_cli, tmp_path: Path):
    result = mt_cli("export", ssru_run / "best.pt", tmp_path / "x", "--to", "ctranslate2")
    assert result.rc != 0 and "Traceback" not in result.err
    assert "SSRU" in result.err and len(result.err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()

"""The WMT14 base recipe loads and trains: its config through `mt train` on a local slice.

The real data comes from the `datasets` hub, which tests cannot reach; a `save_to_disk` folder
with the same splits and `translation` column, built from Multi30k, stands in for it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mt.config import DataConfig
from mt.config_file import load_config
from mt.data.corpus import read_parallel

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "configs" / "wmt14_en_de_base.yaml"


def test_recipe_is_the_papers_base_model():
    cfg = load_config(RECIPE)
    m, t = cfg.model, cfg.train
    assert (m.d_model, m.n_heads, m.d_ff, m.encoder_layers, m.decoder_layers) == (
        512,
        8,
        2048,
        6,
        6,
    )
    assert (cfg.tokenizer.vocab_size, cfg.tokenizer.joint, m.tie_embeddings) == (32000, True, True)
    assert (t.schedule, t.warmup, t.label_smoothing) == ("noam", 4000, 0.1)
    assert t.optimizer_betas == [0.9, 0.98]
    assert 24_000 <= t.max_tokens * t.accum_steps <= 26_000  # ~25k tokens per update
    assert (cfg.data.format, cfg.data.root, cfg.data.hf_subset) == ("hf", "wmt14", "de-en")
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("en", "de")


@pytest.mark.slow  # a base-size model; the hub loader's local path is tested in test_data.py
def test_recipe_trains_a_step_on_a_local_slice(tmp_path, multi30k_dir, mt_cli):
    import datasets

    splits = {}
    for split, name, n in (("train", "train", 300), ("validation", "val", 6), ("test", "val", 6)):
        de, en = read_parallel(DataConfig(root=str(multi30k_dir)), name, limit=n)
        rows = [{"de": d, "en": e} for d, e in zip(de, en)]
        splits[split] = datasets.Dataset.from_dict({"translation": rows})
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "wmt14"))

    run = tmp_path / "run"
    result = mt_cli(
        "train",
        RECIPE,
        "--run-dir",
        run,
        *("--set", f"data.root={tmp_path / 'wmt14'}", "--set", "tokenizer.vocab_size=1000"),
        *("--set", "train.max_steps=1", "--set", "train.max_tokens=1024"),
        *("--set", "train.accum_steps=1", "--set", "train.threads=2"),
        *("--set", "train.log_every=1", "--set", "train.average_last=0"),
        *("--set", "train.keep_last=0"),
        *("--set", "decode.max_len_b=5"),
    )
    assert result.rc == 0, result.err
    ckpt = torch.load(run / "last.pt", weights_only=True)
    assert ckpt["step"] == 1
    assert (
        ckpt["config"]["model"]["d_model"] == 512 and ckpt["config"]["model"]["encoder_layers"] == 6
    )
    n_params = sum(v.numel() for k, v in ckpt["model"].items() if "sinus" not in k)
    assert n_params > 40_000_000  # the base shape even with the slice's small vocabulary
    first = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert first["step"] == 1 and 0 < first["loss"] < 20

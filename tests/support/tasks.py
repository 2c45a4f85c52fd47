"""The small tasks the tests train on, and what their runs hold: a synthetic reverse task and
its config (for tests that train again and again: resume, crashes, DDP), a `mt train` started
as a child to be signalled or killed, a five-sentence task trained for two steps (the extreme
options and the ensembles), the LoRA fine-tuning config and the Multi30k slices of the adapter
tests, and the directions of the tiny multilingual run (`multi_run` in conftest.py, which
trains it once a session).
"""

from __future__ import annotations

import gzip
import os
import random
import subprocess
import sys
from pathlib import Path

import yaml

MULTI_PAIRS = ["de-en", "en-de", "en-fr", "fr-en"]  # of `multi_run`; de-fr is zero-shot
# Keys of metrics.jsonl records that measure time, which no two runs share.
TIMES = ("elapsed", "tgt_tokens_per_s", "eval_seconds", "tensorboard_seconds")


# -- a small synthetic task for tests that train repeatedly (resume, crashes, DDP) ----------------


def write_reverse_task(root: Path, n_train: int = 400) -> None:
    """Sentences over 10 pseudo-words and their reversal, as text files `{train,val}.{src,tgt}`."""
    rng = random.Random(0)
    words = ["ka", "lo", "mi", "nu", "pe", "ri", "so", "tu", "va", "ze"]
    root.mkdir(parents=True, exist_ok=True)
    for name, n in (("train", n_train), ("val", 20)):
        src = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 7))) for _ in range(n)]
        tgt = [" ".join(reversed(s.split())) for s in src]
        for lang, lines in (("src", src), ("tgt", tgt)):
            (root / f"{name}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")


def reverse_task_config(folder: Path, **train: object) -> Path:
    """A config for a 1+1-layer model on the reverse task in `folder`; `train` overrides."""
    write_reverse_task(folder / "data")
    cfg = {
        "data": {"root": str(folder / "data"), "src_lang": "src", "tgt_lang": "tgt"},
        "tokenizer": {"vocab_size": 32},
        "model": {"d_model": 32, "n_heads": 2, "d_ff": 64, "encoder_layers": 1},
        "train": {
            "device": "cpu",
            "precision": "fp32",
            "threads": 1,
            "seed": 7,
            "max_tokens": 256,  # several batches per epoch
            "warmup": 8,
            "max_steps": 24,
            "log_every": 4,
            "eval_every": 12,
            "eval_bleu": False,
            "keep_last": 0,
            **train,
        },
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def start_training(config: Path, run: Path, *extra: str) -> subprocess.Popen:
    """`mt train` as its own process group (so a test can signal or kill it), one thread."""
    return subprocess.Popen(
        [sys.executable, "-m", "mt", "train", str(config), "--run-dir", str(run), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        start_new_session=True,
    )


# -- five sentences, two steps: a run to push each option to its extremes ------------------------

FIVE_SENTENCES = ["ka lo mi", "lo mi nu ka", "mi nu", "nu ka lo mi nu", "ka ka lo"]


def write_five_sentence_task(folder: Path) -> Path:
    """The five-sentence corpus and a config that trains a 16-wide model for two steps."""
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    for name in ("train", "val"):
        for lang in ("src", "tgt"):
            (data / f"{name}.{lang}").write_text("".join(s + "\n" for s in FIVE_SENTENCES))
    (folder / "input.txt").write_text("ka lo mi\nmi nu\nlo ka\n")
    config = {
        "data": {"root": str(data), "src_lang": "src", "tgt_lang": "tgt"},
        "tokenizer": {"vocab_size": 32},
        "model": {"d_model": 16, "n_heads": 2, "d_ff": 32, "encoder_layers": 1},
        "train": {
            "device": "cpu",
            "threads": 1,
            "loader_workers": 0,
            "max_steps": 2,
            "warmup": 2,
            "log_every": 1,
            "eval_every": 2,
        },
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


# -- adapters on the tiny model (mt/adapt) -------------------------------------------------------


def adapter_config(folder: Path, data: Path, **finetune: object) -> Path:
    """A LoRA fine-tuning config on `data/{ft,dev}.{de,en}`: data, adapter and training only,
    as a user's would be (the model and tokenizer come from the base)."""
    cfg = {
        "data": {"root": str(data), "train": "ft", "valid": "dev"},
        "finetune": {"adapter": "lora", "lora_rank": 4, **finetune},
        "train": {
            "device": "cpu",
            "precision": "fp32",
            "threads": 1,
            "seed": 3,
            "max_tokens": 2048,
            "schedule": "constant",
            "lr": 0.01,
            "warmup": 2,
            "max_steps": 10,
            "log_every": 5,
            "eval_every": 5,
            "eval_bleu": False,
            "keep_last": 1,
            "loader_workers": 0,
            "tensorboard": False,
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "adapter.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def multi30k_slice(multi30k_dir: Path, folder: Path, start: int, n: int = 400) -> Path:
    """`ft.{de,en}`: Multi30k training pairs start..start+n; `dev.{de,en}`: 30 dev pairs."""
    folder.mkdir(parents=True, exist_ok=True)
    for lang in ("de", "en"):
        with gzip.open(multi30k_dir / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()[start : start + n]
        (folder / f"ft.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        with gzip.open(multi30k_dir / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()[:30]
        (folder / f"dev.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder

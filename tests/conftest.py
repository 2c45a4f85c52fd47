"""Shared fixtures: a small thread budget and the Multi30k slice the data tests read."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from inprocess import CliResult, run_mt_here

from mt.device import read_cpu_flags

# Tiny models gain nothing from many threads, and the test machines run other jobs.
torch.set_num_threads(1)
# The machine's own CPU flags, read before the stand-in below hides them (`own_cpu`).
OWN_CPU_FLAGS = " ".join(sorted(read_cpu_flags()))
# `auto` precision chooses as on a CPU without native bf16 (mt/device.py), here and in every
# `mt` the tests start, so no training fixture passes or fails by the CPU it runs on; the bf16
# paths are tested by name (tests/unit/test_precision.py, tests/cli/test_decode_dtype.py), and
# the equalities the docs promise under the CPU's own flags (`own_cpu`). Set MT_CPU_FLAGS
# yourself (e.g. "avx512_bf16") to run the suite as a native-bf16 CPU would.
os.environ.setdefault("MT_CPU_FLAGS", "")
# What the span ban learns of a vocabulary is kept on disk between runs (mt/spans/kept.py): the
# tests keep it in a folder of their own, not the user's cache, and start with none.
os.environ.setdefault("MT_SPAN_CACHE", tempfile.mkdtemp(prefix="mt-span-cache-"))

REPO = Path(__file__).resolve().parent.parent
# Keys of metrics.jsonl records that measure time, which no two runs share.
TIMES = ("elapsed", "tgt_tokens_per_s", "eval_seconds", "tensorboard_seconds")


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    """Folder with Multi30k `train.de.gz`/`train.en.gz` (env MT_DATA, else ../shared/data)."""
    # Resolved now: a test may change its working directory, and CI's MT_DATA is relative.
    root = Path(os.environ.get("MT_DATA") or REPO.parent / "shared" / "data" / "multi30k").resolve()
    if not (root / "train.de.gz").is_file() and not (root / "train.de").is_file():
        pytest.skip(f"Multi30k not found in {root} (set MT_DATA)")
    return root


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With MT_TEST_FAILURES=FILE, each failure's full report is appended to FILE the moment it
    happens: a run cut by a time limit (scripts/gpu_check.sh on a lent GPU) still leaves every
    traceback so far, which pytest itself prints only at the end."""
    path = os.environ.get("MT_TEST_FAILURES")
    if path and report.failed:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"=== {report.nodeid} ({report.when}) FAILED\n{report.longreprtext}\n")
            for name, text in report.sections:
                f.write(f"--- {name}\n{text}\n")


# -- the training-pair filter, spelled out for one pair ------------------------------------------


def keep_pair(src: list[int], tgt: list[int], max_len: int, max_ratio: float) -> bool:
    """The length and ratio rule `mt.data.build.drop_reasons` vectorises, for one pair whose
    `src` ends with EOS (`tgt` has none): the reference the data tests check it against."""
    ls, lt = len(src), len(tgt) + 1
    return ls <= max_len and lt <= max_len and max(ls, lt) <= max_ratio * min(ls, lt)


# -- the command line: in this process by default, a real child where the process is tested ----


def _run_mt(
    *args: object,
    stdin: bytes | str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> CliResult:
    """`python -m mt ARGS` in a child process, so exit codes and stderr are the real ones."""
    data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
    proc = subprocess.run(
        [sys.executable, "-m", "mt", *map(str, args)],
        input=data,
        stdin=subprocess.DEVNULL if data is None else None,
        capture_output=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        cwd=cwd,
        timeout=600,
    )
    return CliResult(
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr.decode("utf-8", "replace"),
    )


def run_in_process(
    args: list[object], capsys, monkeypatch, stdin: bytes | str | None = None
) -> tuple[int, str, str]:
    """`mt ARGS` through the real entry point, in this process: (exit code, stdout, stderr).
    `capsys` and `monkeypatch` are kept for the callers; the runner restores what it changes."""
    result = run_mt_here(*args, stdin=stdin)
    return result.rc, result.out, result.err


@pytest.fixture(scope="session")
def mt_cli() -> Callable[..., CliResult]:
    """Runs `mt ARGS` (keywords: stdin, env, cwd) in this process and returns a CliResult:
    what a command does, without an interpreter start (tests/inprocess.py)."""
    return run_mt_here


@pytest.fixture(scope="session")
def own_cpu() -> dict[str, str]:
    """The environment (for `mt_cli`'s `env`) under which `mt` sees this machine's own CPU flags
    rather than the suite's stand-in: a decode's `auto` as a user's would choose it here."""
    return {"MT_CPU_FLAGS": OWN_CPU_FLAGS}


@pytest.fixture(scope="session")
def mt_process() -> Callable[..., CliResult]:
    """Runs `python -m mt ARGS` as a real child process, for tests of what only a process
    shows: its exit status and streams as the OS sees them, its start (imports, no traceback on
    the real stderr), signals and pipes."""
    return _run_mt


@pytest.fixture(scope="session")
def tiny_run(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory of configs/tiny.yaml trained briefly on Multi30k through `mt train`."""
    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    result = run_mt_here(
        "train",
        REPO / "configs" / "tiny.yaml",
        "--run-dir",
        run_dir,
        *("--set", "train.max_steps=60", "--set", "train.eval_every=30"),
        *("--set", "train.log_every=10", "--set", "train.threads=1"),
        *("--set", "data.max_valid_examples=40"),
        env={"MT_DATA": str(multi30k_dir.resolve())},
    )
    assert result.rc == 0, result.err
    return run_dir


@pytest.fixture(scope="session")
def tiny_terms_run(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """configs/tiny.yaml trained briefly with `data.terms` (a third of the lines annotated
    with target terms) on a 600-pair slice for 10 steps: a model whose tokenizer takes terms."""
    run_dir = tmp_path_factory.mktemp("terms") / "run"
    sets = {
        "data.terms.share": 0.3,
        "data.terms.skip_common": 60,
        "data.max_train_examples": 600,
        "data.max_valid_examples": 10,
        "train.max_steps": 10,
        "train.eval_every": 10,
        "train.log_every": 5,
        "train.threads": 1,
        "train.tensorboard": "false",
    }
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    result = run_mt_here(
        "train",
        REPO / "configs" / "tiny.yaml",
        "--run-dir",
        run_dir,
        *args,
        env={"MT_DATA": str(multi30k_dir.resolve())},
    )
    assert result.rc == 0, result.err
    return run_dir


MULTI_PAIRS = ["de-en", "en-de", "en-fr", "fr-en"]


@pytest.fixture(scope="session")
def multi_run(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model trained on four directions of a Multi30k slice (de-fr is zero-shot)."""
    run_dir = tmp_path_factory.mktemp("multi") / "run"
    sets = {
        "data.pairs": "[" + ",".join(MULTI_PAIRS) + "]",
        "data.max_train_examples": 1500,
        "data.max_valid_examples": 20,
        "tokenizer.vocab_size": 1000,
        "train.max_steps": 120,
        "train.eval_every": 60,
        "train.log_every": 20,
        "train.threads": 1,
        "train.tensorboard": "false",
    }
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    result = run_mt_here(
        "train",
        REPO / "configs" / "tiny.yaml",
        "--run-dir",
        run_dir,
        *args,
        env={"MT_DATA": str(multi30k_dir.resolve())},
    )
    assert result.rc == 0, result.err
    return run_dir


# -- a small synthetic task for tests that train repeatedly (resume, crashes, DDP) ----------------


def write_reverse_task(root: Path, n_train: int = 400) -> None:
    """Sentences over 10 pseudo-words and their reversal, as text files `{train,val}.{src,tgt}`."""
    import random

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
    import yaml

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


# -- adapters on the tiny model (mt/adapt) -------------------------------------------------------


def adapter_config(folder: Path, data: Path, **finetune: object) -> Path:
    """A LoRA fine-tuning config on `data/{ft,dev}.{de,en}`: data, adapter and training only,
    as a user's would be (the model and tokenizer come from the base)."""
    import yaml

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
    import gzip

    folder.mkdir(parents=True, exist_ok=True)
    for lang in ("de", "en"):
        with gzip.open(multi30k_dir / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()[start : start + n]
        (folder / f"ft.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        with gzip.open(multi30k_dir / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()[:30]
        (folder / f"dev.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def tiny_adapters(
    tiny_run: Path, multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Two LoRA adapters of the tiny model's best.pt, trained 10 steps each on two other
    slices of Multi30k: their run directories by name ("legal", "ui")."""
    root = tmp_path_factory.mktemp("adapters")
    runs = {}
    for name, start in (("legal", 10_000), ("ui", 20_000)):
        data = multi30k_slice(multi30k_dir, root / f"{name}_data", start)
        config = adapter_config(root / name, data)
        run = root / name / "run"
        result = run_mt_here("train", config, "--run-dir", run, "--init-from", tiny_run / "best.pt")
        assert result.rc == 0, result.err
        runs[name] = run
    return runs

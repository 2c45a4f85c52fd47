"""Shared fixtures: a small thread budget and the Multi30k slice the data tests read."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from support import REPO
from support.browser import chromium
from support.browser import missing as browser_missing
from support.inprocess import CliResult, run_mt_here
from support.once import built_once
from support.tasks import MULTI_PAIRS, adapter_config, multi30k_slice

from mt.device import read_cpu_flags

# Tiny models gain nothing from many threads, and the test machines run other jobs.
torch.set_num_threads(1)
# ... nor does an `mt` command run inside a test process (run_mt_here), which sizes its own
# pool from OMP_NUM_THREADS (mt.device.choose_threads): without it each takes every usable
# core, and beside the other xdist worker its threads wait on each other. Tests of the thread
# choice pass their own environment.
os.environ.setdefault("OMP_NUM_THREADS", "1")
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


@pytest.fixture(scope="session")
def mt_cli() -> Callable[..., CliResult]:
    """Runs `mt ARGS` (keywords: stdin, env, cwd) in this process and returns a CliResult:
    what a command does, without an interpreter start (tests/support/inprocess.py)."""
    return run_mt_here


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium, a 1200x1400 window, for the tests of a page (skipped where no browser
    can start: tests/support/browser.py says why); a module may override it with a window of
    its own."""
    if why := browser_missing():
        pytest.skip(why)
    driver = chromium("1200,1400")
    yield driver
    driver.quit()


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

    def build(folder: Path) -> Path:
        result = run_mt_here(
            "train",
            REPO / "configs" / "tiny.yaml",
            "--run-dir",
            folder / "run",
            *("--set", "train.max_steps=60", "--set", "train.eval_every=30"),
            *("--set", "train.log_every=10", "--set", "train.threads=1"),
            *("--set", "data.max_valid_examples=40"),
            env={"MT_DATA": str(multi30k_dir.resolve())},
        )
        assert result.rc == 0, result.err
        return folder / "run"

    return built_once(tmp_path_factory, "tiny", build)


def train_tiny(run_dir: Path, multi30k_dir: Path, sets: dict[str, object]) -> Path:
    """configs/tiny.yaml trained through `mt train` into `run_dir` with `sets` as --set items."""
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


@pytest.fixture(scope="session")
def tiny_terms_run(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """configs/tiny.yaml trained briefly with `data.terms` (a third of the lines annotated
    with target terms) on a 600-pair slice for 10 steps: a model whose tokenizer takes terms."""
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
    build = lambda folder: train_tiny(folder / "run", multi30k_dir, sets)  # noqa: E731
    return built_once(tmp_path_factory, "terms", build)


@pytest.fixture(scope="session")
def multi_run(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model trained on four directions of a Multi30k slice (de-fr is zero-shot)."""
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
    build = lambda folder: train_tiny(folder / "run", multi30k_dir, sets)  # noqa: E731
    return built_once(tmp_path_factory, "multi", build)


# -- adapters on the tiny model (mt/adapt) -------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_adapters(
    tiny_run: Path, multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Two LoRA adapters of the tiny model's best.pt, trained 10 steps each on two other
    slices of Multi30k: their run directories by name ("legal": the projections, "ui": the
    projections and the embedding tables)."""
    targets = {"legal": ["q", "k", "v", "out", "ffn"], "ui": ["q", "k", "v", "out", "ffn", "embed"]}

    def build(root: Path) -> Path:
        for name, start in (("legal", 10_000), ("ui", 20_000)):
            data = multi30k_slice(multi30k_dir, root / f"{name}_data", start)
            config = adapter_config(root / name, data, lora_targets=targets[name])
            run = root / name / "run"
            base = tiny_run / "best.pt"
            result = run_mt_here("train", config, "--run-dir", run, "--init-from", base)
            assert result.rc == 0, result.err
        return root

    root = built_once(tmp_path_factory, "adapters", build)
    return {name: root / name / "run" for name in targets}

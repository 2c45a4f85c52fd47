"""What scripts/bench/data.py measures on: the synthetic corpus, the code of one checkout (this
tree or an older commit) and the commands it runs, and the tokenizer trained once for all runs."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scripts.common import REPO, git, read_lines, say
from scripts.measure import Child, MeasureError

CONFIG = "configs/multi30k_de_en.yaml"


# -- the synthetic corpus ----------------------------------------------------------------------


def make_corpus(multi30k: Path, work: Path, pairs: int, seed: int, chunk: int = 100_000) -> Path:
    """`{work}/corpus-{pairs}-seed{seed}` with train/val/test files, reused when complete.

    Lines are generated and compressed a chunk at a time, so memory is Multi30k plus one chunk
    whatever `pairs` is. The folder is written under a temporary name and renamed at the end:
    an interrupted run leaves no half corpus that a later run would trust.
    """
    folder = work / f"corpus-{pairs}-seed{seed}"
    if (folder / "corpus.json").is_file():
        say(f"corpus: reusing {folder}")
        return folder
    de = read_lines(multi30k / "train.de.gz")
    en = read_lines(multi30k / "train.en.gz")
    if len(de) != len(en):
        raise SystemExit(f"{multi30k}: train.de.gz and train.en.gz differ in length")
    work.mkdir(parents=True, exist_ok=True)
    tmp = work / f".{folder.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    say(f"corpus: writing {pairs:,} pairs from {len(de):,} Multi30k pairs -> {folder}")
    with (
        gzip.open(tmp / "train.de.gz", "wb", compresslevel=1) as f_de,
        gzip.open(tmp / "train.en.gz", "wb", compresslevel=1) as f_en,
    ):
        report = pairs // 10
        for done in range(0, pairs, chunk):
            n = min(chunk, pairs - done)
            i = rng.integers(0, len(de), n).tolist()
            j = rng.integers(0, len(de), n).tolist()
            f_de.write(("\n".join(de[a] + " " + de[b] for a, b in zip(i, j)) + "\n").encode())
            f_en.write(("\n".join(en[a] + " " + en[b] for a, b in zip(i, j)) + "\n").encode())
            if report <= done + n < pairs:
                say(f"corpus: {done + n:,} pairs written")
                report += pairs // 10
    for split in ("val", "test_2016_flickr"):
        for lang in ("de", "en"):
            src = multi30k / f"{split}.{lang}.gz"
            if src.is_file():
                shutil.copyfile(src, tmp / src.name)
    info = {"pairs": pairs, "seed": seed, "from": str(multi30k)}
    (tmp / "corpus.json").write_text(json.dumps(info) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    say(f"corpus: {pairs:,} pairs in {time.perf_counter() - start:.1f} s")
    return folder


# -- one checkout ------------------------------------------------------------------------------


@dataclass
class Checkout:
    """Code to measure: this working tree, or an older commit in a temporary worktree."""

    label: str
    root: Path
    revision: str
    legacy: bool  # no `mt prepare`: preparation is a cold `mt train` to its first step
    extra: list[str] = field(default_factory=list)  # --set overrides for this checkout only
    results: dict[str, Any] = field(default_factory=dict)

    def env(self, corpus: Path) -> dict[str, str]:
        env = dict(os.environ)
        # PYTHONPATH and the working directory both point at the checkout: `python -m mt` puts
        # the working directory first on sys.path, ahead of the editable install of the repo.
        env["PYTHONPATH"] = str(self.root)
        env["MT_DATA"] = str(corpus)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def mt(
        self, command: str, run_dir: Path, corpus: Path, sets: list[str], threads: int = 2
    ) -> list[str]:
        """`mt COMMAND` arguments on the de-en recipe with this corpus and thread count."""
        base = [command, str(self.root / CONFIG), "--run-dir", str(run_dir)]
        defaults = [f"data.root={corpus}", f"train.threads={threads}"]
        return base + [a for s in defaults + self.extra + sets for a in ("--set", s)]

    def child(self, args: list[str], corpus: Path, log: Path, torchrun: int = 0) -> Child:
        """`python -m mt ARGS`, or under `torchrun --standalone` with `torchrun` processes."""
        launch = [sys.executable, "-m", "mt", *args]
        if torchrun:
            run = ["torch.distributed.run", "--standalone", f"--nproc_per_node={torchrun}", "-m"]
            launch = [sys.executable, "-m", *run, "mt", *args]
        return Child(launch, self.root, self.env(corpus), log)

    def check_import(self, corpus: Path) -> None:
        """Fail early if `python -m mt` would import another checkout's code."""
        out = subprocess.run(
            [sys.executable, "-c", "import mt; print(mt.__file__)"],
            cwd=self.root,
            env=self.env(corpus),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.strip()
        if not Path(out).resolve().is_relative_to(self.root.resolve()):
            raise SystemExit(f"{self.label}: python -m mt imports {out}, not {self.root}")


def train_store(cache: Path) -> Path:
    found = [p for p in cache.glob("train-*") if p.is_dir()]
    if not found:
        raise MeasureError(f"{cache}: no train-* store")
    return max(found, key=lambda p: p.stat().st_mtime)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def reset_run_dir(run_dir: Path, keep: tuple[str, ...] = ("spm.model", "cache")) -> None:
    """Leave only the tokenizer and the caches: the state of a prepared, never-trained run."""
    for p in run_dir.iterdir():
        if p.name in keep:
            continue
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()


def training_pairs(log: Path) -> int | None:
    m = re.search(r"([\d,]+) training pairs", log.read_text(errors="replace"))
    return int(m.group(1).replace(",", "")) if m else None


def cold_train(c: Checkout, run_dir: Path, corpus: Path, threads: int, timeout: float) -> Child:
    """`mt train` from a run dir holding only spm.model, killed at its first logged step."""
    sets = ["train.max_steps=1", "train.log_every=1", "train.eval_every=1000000"]
    log = run_dir.parent / f"{run_dir.name}-logs" / "cold.log"
    child = c.child(c.mt("train", run_dir, corpus, sets, threads), corpus, log)
    try:
        child.first_step_s = child.wait_first_step(run_dir / "metrics.jsonl", timeout)
    finally:
        child.kill()
    return child


# -- tokenizer, machine, revisions -------------------------------------------------------------


def tokenizer_once(
    current: Checkout, work: Path, corpus: Path, limit: int, timeout: float
) -> tuple[Path, dict[str, Any]]:
    """One spm.model for every run, from `mt prepare` on the first `limit` pairs; reused."""
    folder = work / f"tokenizer-{corpus.name}-{limit}"
    info_path = folder / "tokenizer.json"
    if info_path.is_file() and (folder / "spm.model").is_file():
        say(f"tokenizer: reusing {folder / 'spm.model'}")
        return folder / "spm.model", json.loads(info_path.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    log = folder / "prepare.log"
    args = current.mt("prepare", folder, corpus, [f"data.max_train_examples={limit}"])
    child = current.child(args, corpus, log)
    child.wait(timeout)
    m = re.search(
        r"trained on ([\d,]+) sampled pairs \(sampling ([\d.]+) s, training ([\d.]+) s",
        log.read_text(errors="replace"),
    )
    if not m:
        raise SystemExit(f"{log}: no tokenizer line found")
    info = {
        "pairs_sampled": int(m.group(1).replace(",", "")),
        "sampling_s": float(m.group(2)),
        "training_s": float(m.group(3)),
        "from_first_pairs": limit,
        "command_s": child.seconds,
    }
    shutil.rmtree(folder / "cache", ignore_errors=True)  # only the tokenizer is wanted
    info_path.write_text(json.dumps(info) + "\n")
    say(
        f"tokenizer: sampling {info['sampling_s']:.1f} s, training {info['training_s']:.1f} s "
        f"on {info['pairs_sampled']:,} pairs"
    )
    return folder / "spm.model", info


def current_revision() -> str:
    head = git("rev-parse", "--short=12", "HEAD")
    dirty = git("status", "--porcelain", "--", "mt")
    return f"{head} + uncommitted changes in mt/" if dirty else head


def has_prepare(root: Path) -> bool:
    """Whether a checkout's CLI has `mt prepare` (the data rewrite added it)."""
    files = [root / "mt" / "cli.py", *sorted((root / "mt" / "cli").glob("*.py"))]
    return any(f.is_file() and "def prepare(" in f.read_text() for f in files)


def default_multi30k() -> Path:
    if os.environ.get("MT_DATA"):
        return Path(os.environ["MT_DATA"])
    for folder in (REPO / "data" / "multi30k", REPO.parent / "shared" / "data" / "multi30k"):
        if (folder / "train.de.gz").is_file():
            return folder
    return REPO / "data" / "multi30k"

"""Shared fixtures: a small thread budget and the Multi30k slice the data tests read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# Tiny models gain nothing from many threads, and the test machines run other jobs.
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    """Folder with Multi30k `train.de.gz`/`train.en.gz` (env MT_DATA, else ../shared/data)."""
    root = Path(os.environ.get("MT_DATA") or REPO.parent / "shared" / "data" / "multi30k")
    if not (root / "train.de.gz").is_file() and not (root / "train.de").is_file():
        pytest.skip(f"Multi30k not found in {root} (set MT_DATA)")
    return root

"""How a run starts, decided once (mt/train/setup.py): fresh, init_from, resume or restart, from
the flag, the run directory and torchrun's environment, before any data or model is made."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mt.config import Config
from mt.device import Precision, Threads, usable_cores
from mt.errors import MtError
from mt.train import setup
from mt.train.distributed import Dist
from mt.train.resume import JOB_FILE

FP32 = Precision("fp32", "asked")
CPU = setup.Process(Threads(1, usable_cores()), Dist(), torch.device("cpu"), FP32)


@pytest.fixture(autouse=True)
def outside_torchrun(monkeypatch):
    for key in ("TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(key, raising=False)


def start(run_dir: Path, flag: bool, cfg: Config | None = None) -> setup.Start:
    return setup.decide_start(cfg or Config(), run_dir, flag, CPU)


def test_a_new_run_directory_starts_fresh(tmp_path):
    s = start(tmp_path, False)
    assert (s.how, s.resume, s.resumed, s.init) == ("fresh", False, False, None)
    # --resume with nothing to resume from starts fresh too, but may use the directory.
    s = start(tmp_path, True)
    assert (s.how, s.resume, s.resumed) == ("fresh", True, False)


def test_resume_needs_the_flag_or_a_restart(tmp_path, monkeypatch):
    (tmp_path / "last.pt").write_bytes(b"")
    s = start(tmp_path, True)
    assert (s.how, s.resume, s.resumed, s.last) == ("resume", True, True, tmp_path / "last.pt")
    assert start(tmp_path, False).how == "fresh"  # then refused: the directory holds a run
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # torchrun restarted the workers
    s = start(tmp_path, False)
    assert (s.how, s.resume, s.resumed) == ("restart", True, True)


def test_a_relaunched_job_of_the_same_id_is_a_restart(tmp_path, monkeypatch):
    (tmp_path / "last.pt").write_bytes(b"")
    (tmp_path / JOB_FILE).write_text("job-7\n", encoding="utf-8")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-8")
    assert start(tmp_path, False).how == "fresh"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-7")
    assert start(tmp_path, False).how == "restart"


def test_init_from_starts_from_the_checkpoint(tmp_path, tiny_run: Path):
    cfg = Config()
    cfg.train.init_from = str(tiny_run / "best.pt")
    s = start(tmp_path, False, cfg)
    assert s.how == "init_from" and s.init is not None and not s.resumed
    assert s.init.path == tiny_run / "best.pt" and s.init.step > 0
    assert cfg.model.d_model == 64  # the checkpoint's model (configs/tiny.yaml), not the default
    cfg = Config()
    cfg.train.freeze = ["encoder"]
    with pytest.raises(MtError, match="train.freeze needs train.init_from"):
        start(tmp_path, False, cfg)

"""The small HF-format models of tests/support/hf_models.py as session fixtures for the import
tests (built once per test run, in a temporary folder the xdist workers share:
tests/support/once.py), and their `mt import`s."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.hf_models import build_m2m, build_marian, build_nllb, read_slice
from support.once import built_once

__all__ = ["read_slice", "short_sources"]  # the tests' Multi30k readers, beside the fixtures


@pytest.fixture(scope="session")
def marian_dir(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small Marian model's folder, shared by the import tests of every module."""
    build = lambda folder: build_marian(multi30k_dir, folder / "marian")  # noqa: E731
    return built_once(tmp_path_factory, "marian", build)


@pytest.fixture(scope="session")
def imported(marian_dir: Path, mt_cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """That model imported through `mt import`."""

    def build(folder: Path) -> Path:
        result = mt_cli("import", marian_dir, "-o", folder / "opus.pt")
        assert result.rc == 0, result.err
        assert "imported" in result.err
        return folder / "opus.pt"

    return built_once(tmp_path_factory, "opus", build)


@pytest.fixture(scope="session")
def m2m_dir(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small M2M-100 model's folder (de -> en, de -> fr)."""
    build = lambda folder: build_m2m(multi30k_dir, folder / "m2m")  # noqa: E731
    return built_once(tmp_path_factory, "m2m", build)


@pytest.fixture(scope="session")
def m2m_imported(m2m_dir: Path, mt_cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    def build(folder: Path) -> Path:
        result = mt_cli("import", m2m_dir, "-o", folder / "m2m.pt", "--src-lang", "de")
        assert result.rc == 0, result.err
        return folder / "m2m.pt"

    return built_once(tmp_path_factory, "m2m-imported", build)


@pytest.fixture(scope="session")
def nllb_dir(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small M2M-100 with NLLB's tokenizer (deu_Latn -> eng_Latn, fra_Latn)."""
    build = lambda folder: build_nllb(multi30k_dir, folder / "nllb")  # noqa: E731
    return built_once(tmp_path_factory, "nllb", build)


@pytest.fixture(scope="session")
def nllb_imported(nllb_dir: Path, mt_cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Imported with no language flag: the tokenizer config's src_lang is the default."""

    def build(folder: Path) -> Path:
        result = mt_cli("import", nllb_dir, "-o", folder / "nllb.pt")
        assert result.rc == 0, result.err
        return folder / "nllb.pt"

    return built_once(tmp_path_factory, "nllb-imported", build)


def short_sources(multi30k_dir: Path, folder: Path, count: int) -> Path:
    """A file of `count` dev sentences of at most 12 words (the size of those the small models
    were trained on), which the parity tests translate with mt and with HF."""
    lines = [s for s in read_slice(multi30k_dir, "val", "de", 400) if len(s.split()) <= 12]
    path = folder / "val.de"
    path.write_text("\n".join(lines[:count]) + "\n", encoding="utf-8")
    return path

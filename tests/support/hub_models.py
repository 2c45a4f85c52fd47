"""The small HF-format models of tests/support/hf_models.py as session fixtures for the import
tests (built once per test session, in a temporary folder), and their `mt import`s."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.hf_models import build_m2m, build_marian, build_nllb, read_slice

__all__ = ["read_slice", "short_sources"]  # the tests' Multi30k readers, beside the fixtures


@pytest.fixture(scope="session")
def marian_dir(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small Marian model's folder, shared by the import tests of every module."""
    return build_marian(multi30k_dir, tmp_path_factory.mktemp("hf") / "marian")


@pytest.fixture(scope="session")
def imported(marian_dir: Path, mt_cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """That model imported through `mt import`."""
    out = tmp_path_factory.mktemp("mt") / "opus.pt"
    result = mt_cli("import", marian_dir, "-o", out)
    assert result.rc == 0, result.err
    assert "imported" in result.err
    return out


@pytest.fixture(scope="session")
def m2m_dir(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small M2M-100 model's folder (de -> en, de -> fr)."""
    return build_m2m(multi30k_dir, tmp_path_factory.mktemp("hf") / "m2m")


@pytest.fixture(scope="session")
def m2m_imported(m2m_dir: Path, mt_cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mt") / "m2m.pt"
    result = mt_cli("import", m2m_dir, "-o", out, "--src-lang", "de")
    assert result.rc == 0, result.err
    return out


@pytest.fixture(scope="session")
def nllb_dir(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small M2M-100 with NLLB's tokenizer (deu_Latn -> eng_Latn, fra_Latn)."""
    return build_nllb(multi30k_dir, tmp_path_factory.mktemp("hf") / "nllb")


@pytest.fixture(scope="session")
def nllb_imported(nllb_dir: Path, mt_cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Imported with no language flag: the tokenizer config's src_lang is the default."""
    out = tmp_path_factory.mktemp("mt") / "nllb.pt"
    result = mt_cli("import", nllb_dir, "-o", out)
    assert result.rc == 0, result.err
    return out


def short_sources(multi30k_dir: Path, folder: Path, count: int) -> Path:
    """A file of `count` dev sentences of at most 12 words (the size of those the small models
    were trained on), which the parity tests translate with mt and with HF."""
    lines = [s for s in read_slice(multi30k_dir, "val", "de", 400) if len(s.split()) <= 12]
    path = folder / "val.de"
    path.write_text("\n".join(lines[:count]) + "\n", encoding="utf-8")
    return path

"""Config mistakes through the real command line: one line that says what to fix.

A misspelt key gets the closest known key of its section, a bad `--set` value is blamed on the
`--set` item (not on the file, which is fine), and a missing corpus points at MT_DATA.
"""

from __future__ import annotations

from pathlib import Path

from support import REPO

TINY = REPO / "configs" / "tiny.yaml"


def error_line(result) -> str:
    assert result.rc == 2, (result.rc, result.err)
    assert "Traceback" not in result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    return lines[0]


def test_misspelt_key_in_the_file_suggests_the_known_one(tmp_path, mt_process):
    """In a real child: the exit status and the one stderr line the shell sees."""
    config = tmp_path / "c.yaml"
    config.write_text("train:\n  max_step: 10\n", encoding="utf-8")
    line = error_line(mt_process("train", config, "--run-dir", tmp_path / "run"))
    assert line.startswith(f"mt: error: {config}: unknown key 'train.max_step'")
    assert line.endswith("did you mean train.max_steps?")


def test_misspelt_set_key_suggests_the_known_one(tmp_path, mt_cli):
    result = mt_cli("train", TINY, "--run-dir", tmp_path / "run", "--set", "train.max_step=10")
    line = error_line(result)
    assert line.startswith("mt: error: --set train.max_step=10 ")
    assert "unknown key 'train.max_step'" in line
    assert line.endswith("did you mean train.max_steps?")
    section = mt_cli("train", TINY, "--set", "trian.max_steps=10")
    assert error_line(section).endswith("did you mean train?")


def test_bad_set_value_is_blamed_on_the_set_item(tmp_path, mt_cli):
    result = mt_cli("train", TINY, "--run-dir", tmp_path / "run", "--set", "train.warmup=0")
    assert error_line(result) == "mt: error: --set train.warmup=0: train.warmup must be > 0"
    typed = mt_cli("train", TINY, "--set", "train.max_steps=fifty")
    assert error_line(typed) == (
        "mt: error: --set train.max_steps=fifty: train.max_steps must be an integer, got 'fifty'"
    )


def test_blame_goes_to_the_file_or_to_the_item_that_breaks_it(tmp_path, mt_cli):
    config = tmp_path / "c.yaml"
    config.write_text("train:\n  warmup: 0\n", encoding="utf-8")
    file_error = mt_cli("train", config, "--set", "train.max_steps=5")
    assert error_line(file_error) == f"mt: error: {config}: train.warmup must be > 0"
    # The first item fixes the file; the second breaks another key.
    fixed_then_broken = mt_cli(
        "train", config, "--set", "train.warmup=5", "--set", "train.max_steps=0"
    )
    assert error_line(fixed_then_broken) == (
        "mt: error: --set train.max_steps=0: train.max_steps must be > 0"
    )


def test_missing_corpus_names_mt_data_and_the_data_readme(tmp_path, mt_cli):
    nowhere = tmp_path / "nowhere"
    result = mt_cli("train", TINY, "--run-dir", tmp_path / "run", env={"MT_DATA": str(nowhere)})
    line = error_line(result)
    assert line.startswith(f"mt: error: {nowhere}/train.de: file not found")
    assert "MT_DATA" in line and "data/README.md" in line
    assert Path(REPO / "data" / "README.md").is_file()

"""Bad input through the real command line: one line on stderr, exit 2, nothing damaged.

Each row of CASES builds its input files in a fresh folder and names the words the error must
contain (the file, line or key a user needs to find the problem). For every row the test checks
the exit code, that stderr is exactly one `mt: error:` line without a traceback, and that the
user's files are byte for byte what they were before.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

SENTENCES = ["ka lo mi", "lo mi nu ka", "mi nu", "nu ka lo mi nu", "ka ka lo"]


def write_corpus(root: Path, src: list[str] | bytes, tgt: list[str] | bytes) -> None:
    """`train` and `val` splits of a small `src`/`tgt` corpus (bytes are written as they are)."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("train", "val"):
        for lang, lines in (("src", src), ("tgt", tgt)):
            data = lines if isinstance(lines, bytes) else "".join(s + "\n" for s in lines).encode()
            (root / f"{name}.{lang}").write_bytes(data)


def write_config(folder: Path, **sections: dict) -> Path:
    """A valid small config reading `folder/data`, with `sections` merged over it."""
    config = {
        "data": {"root": str(folder / "data"), "src_lang": "src", "tgt_lang": "tgt"},
        "tokenizer": {"vocab_size": 32},
        "model": {"d_model": 16, "n_heads": 2, "d_ff": 32, "encoder_layers": 1},
        "train": {"max_steps": 2, "warmup": 2, "threads": 1, "device": "cpu"},
    }
    for section, values in sections.items():
        config[section] = {**config.get(section, {}), **values}
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def train_args(folder: Path, run_dir: Path | None = None, **sections: dict) -> list[object]:
    """`mt train` on a valid corpus with a config changed by `sections`."""
    write_corpus(folder / "data", SENTENCES, SENTENCES)
    return ["train", write_config(folder, **sections), "--run-dir", run_dir or folder / "run"]


class Armed:
    """Unpickling this creates `marker`: proof that a loader ran code from the file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


class Foreign:
    """A harmless object of a class mt does not know."""

    def __init__(self) -> None:
        self.weights = [1.0, 2.0]


def _missing_config(d: Path, ckpt: Path):
    return ["train", d / "nope.yaml"], None


def _missing_data(d: Path, ckpt: Path):
    (d / "data").mkdir()
    return ["train", write_config(d), "--run-dir", d / "run"], None


def _empty_corpus(d: Path, ckpt: Path):
    write_corpus(d / "data", [], [])
    return ["train", write_config(d), "--run-dir", d / "run"], None


def _line_counts_differ(d: Path, ckpt: Path):
    write_corpus(d / "data", SENTENCES, SENTENCES[:4])
    return ["train", write_config(d), "--run-dir", d / "run"], None


def _invalid_utf8_in_corpus(d: Path, ckpt: Path):
    src = b"ka lo mi\nlo mi nu\nmi \xff nu\nnu ka\nka ka\n"  # line 3
    write_corpus(d / "data", src, SENTENCES)
    return ["train", write_config(d), "--run-dir", d / "run"], None


def _invalid_utf8_on_stdin(d: Path, ckpt: Path):
    return ["translate", ckpt, "--greedy"], b"Ein Mann.\nZwei \xc3\x28 Hunde.\nDrei.\n"


def _invalid_utf8_in_input_file(d: Path, ckpt: Path):
    (d / "in.de").write_bytes(b"Ein Mann.\nZwei \xff Hunde.\n")  # line 2
    return ["translate", ckpt, "--input", d / "in.de", "--output", d.parent / "out.en"], None


def _unknown_key(d: Path, ckpt: Path):
    return train_args(d, model={"d_modle": 32}), None


def _wrong_type(d: Path, ckpt: Path):
    return train_args(d, model={"d_model": "big"}), None


def _heads_do_not_divide(d: Path, ckpt: Path):
    return train_args(d, model={"d_model": 18, "n_heads": 4}), None


def _warmup_zero(d: Path, ckpt: Path):
    return train_args(d, train={"warmup": 0}), None


def _set_unknown_key(d: Path, ckpt: Path):
    return [*train_args(d), "--set", "train.max_stepz=5"], None


def _truncated_checkpoint(d: Path, ckpt: Path):
    data = ckpt.read_bytes()
    (d / "cut.pt").write_bytes(data[: len(data) // 2])
    return ["translate", d / "cut.pt"], "Ein Mann.\n"


def _random_bytes(d: Path, ckpt: Path):
    (d / "noise.pt").write_bytes(random.Random(0).randbytes(4096))
    return ["translate", d / "noise.pt"], "Ein Mann.\n"


def _other_program(d: Path, ckpt: Path):
    torch.save({"state_dict": {"w": torch.zeros(2)}, "epoch": 3}, d / "other.pt")
    return ["translate", d / "other.pt"], "Ein Mann.\n"


def _newer_version(d: Path, ckpt: Path):
    data = torch.load(ckpt, weights_only=True)
    data["version"] = 99
    torch.save(data, d / "future.pt")
    return ["translate", d / "future.pt"], "Ein Mann.\n"


def _pickled_code(d: Path, ckpt: Path):
    data = torch.load(ckpt, weights_only=True)
    data["metrics"] = Armed(d.parent / "MARKER")  # outside `d`: not an input file
    torch.save(data, d / "armed.pt")
    # The file is armed: loading it without protection would run the code.
    control = d.parent / "control"
    control.mkdir()
    torch.save(Armed(control / "MARKER"), control / "armed.pt")
    torch.load(control / "armed.pt", weights_only=False)
    assert (control / "MARKER").exists()
    return ["translate", d / "armed.pt"], "Ein Mann.\n"


def _custom_object(d: Path, ckpt: Path):
    data = torch.load(ckpt, weights_only=True)
    data["config"] = Foreign()
    torch.save(data, d / "custom.pt")
    return ["translate", d / "custom.pt"], "Ein Mann.\n"


def _beam_zero(d: Path, ckpt: Path):
    return ["translate", ckpt, "--beam", "0"], "Ein Mann.\n"


def _nbest_above_beam(d: Path, ckpt: Path):
    return ["translate", ckpt, "--beam", "2", "--nbest", "3"], "Ein Mann.\n"


def _run_dir_under_a_file(d: Path, ckpt: Path):
    (d / "some_file").write_text("not a folder\n")
    return train_args(d, run_dir=d / "some_file" / "sub"), None


def _run_dir_read_only(d: Path, ckpt: Path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders; the run-dir-under-a-file case covers it")
    args = train_args(d)
    (d / "run").mkdir(mode=0o500)
    return args, None


def _run_dir_has_a_run(d: Path, ckpt: Path):
    args = train_args(d)
    (d / "run").mkdir()
    shutil.copy(ckpt, d / "run" / "last.pt")
    return args, None


@dataclass
class Case:
    build: Callable[[Path, Path], tuple[list[object], bytes | str | None]]
    expect: list[str]  # words the error line must contain ({d}: the case's folder)
    needs_checkpoint: bool = False


CASES = {
    "missing config": Case(_missing_config, ["{d}/nope.yaml", "not found"]),
    "missing data file": Case(_missing_data, ["{d}/data/train.src", "not found"]),
    "empty corpus": Case(_empty_corpus, ["{d}/data/train.src", "empty corpus"]),
    "line counts differ": Case(_line_counts_differ, ["train.src has 5 lines", "train.tgt has 4"]),
    "invalid utf-8 in corpus": Case(
        _invalid_utf8_in_corpus, ["{d}/data/train.src:3:", "invalid UTF-8"]
    ),
    "invalid utf-8 on stdin": Case(_invalid_utf8_on_stdin, ["<stdin>:2:", "UTF-8"], True),
    "invalid utf-8 in --input": Case(
        _invalid_utf8_in_input_file, ["{d}/in.de:2:", "invalid UTF-8"], True
    ),
    "unknown key": Case(_unknown_key, ["{d}/config.yaml", "model.d_modle"]),
    "wrong type": Case(_wrong_type, ["{d}/config.yaml", "model.d_model", "integer"]),
    "d_model not divisible by heads": Case(
        _heads_do_not_divide, ["{d}/config.yaml", "model.d_model", "model.n_heads"]
    ),
    "warmup 0": Case(_warmup_zero, ["{d}/config.yaml", "train.warmup"]),
    "--set unknown key": Case(_set_unknown_key, ["--set", "train.max_stepz", "{d}/config.yaml"]),
    "truncated checkpoint": Case(_truncated_checkpoint, ["{d}/cut.pt", "truncated"], True),
    "random bytes": Case(_random_bytes, ["{d}/noise.pt", "not a readable checkpoint"]),
    "other program's checkpoint": Case(_other_program, ["{d}/other.pt", "not an mt checkpoint"]),
    "newer format version": Case(_newer_version, ["{d}/future.pt", "99", "newer"], True),
    "pickled code": Case(_pickled_code, ["{d}/armed.pt", "refused"], True),
    "custom object": Case(_custom_object, ["{d}/custom.pt", "refused"], True),
    "--beam 0": Case(_beam_zero, ["--beam", "0"], True),
    "--nbest above beam": Case(_nbest_above_beam, ["--nbest", "3", "beam"], True),
    "run dir under a file": Case(_run_dir_under_a_file, ["{d}/some_file/sub", "not writable"]),
    "run dir read-only": Case(_run_dir_read_only, ["{d}/run", "not writable"]),
    "run dir already has last.pt": Case(_run_dir_has_a_run, ["{d}/run", "--resume"], True),
}


def file_hashes(folder: Path) -> dict[Path, str]:
    files = [p for p in sorted(folder.rglob("*")) if p.is_file()]
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_error_line(name, tmp_path, mt_cli, request):
    case = CASES[name]
    ckpt = request.getfixturevalue("tiny_run") / "last.pt" if case.needs_checkpoint else None
    d = tmp_path / "in"
    d.mkdir()
    args, stdin = case.build(d, ckpt)
    before = file_hashes(d)

    result = mt_cli(*args, stdin=stdin)

    assert result.rc == 2, result.err
    assert "Traceback" not in result.err, result.err
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mt: error: "), result.err
    for word in case.expect:
        assert word.format(d=d) in lines[0], lines[0]
    assert result.out == ""
    after = file_hashes(d)
    assert {p: after.get(p) for p in before} == before  # the user's files are untouched
    assert not (tmp_path / "MARKER").exists()  # nothing in a checkpoint was executed
    assert not list(tmp_path.rglob("*.tmp-*"))  # no half-written file left behind
    assert not (tmp_path / "out.en").exists()


def test_a_100k_character_line_gives_one_output_line(tiny_run, mt_cli):
    words = "Ein Mann fährt Fahrrad und zwei Hunde spielen im Schnee".split()
    line = " ".join(words[i % len(words)] for i in range(20_000))[:100_000]
    result = mt_cli("translate", tiny_run / "best.pt", stdin=line + "\n")
    assert result.rc == 0, result.err
    assert result.out.count("\n") == 1 and result.out.endswith("\n")
    assert "truncated" in result.err  # the user is told the model could not see it all
    assert "Traceback" not in result.err

"""The shell examples of README.md and docs/ run, as a user copies them, on the tiny model.

Every ```bash block is extracted. A block whose commands cannot run here says so in the
Markdown, right above it: `<!-- example: skip (why) -->` (a 30-minute recipe, a server, a
package of another extra), so the skip is visible to a reader and to this test. The others are
run in a folder where the paths the manual uses lead to the tiny model trained for the tests
(`runs/multi30k_de_en/`, `runs/tiny/`, `CKPT`, `best.pt`, `A.pt`, `B.pt` are its files,
`test.de` and friends are Multi30k lines, `$MT_DATA` a slice of Multi30k), and each must exit 0,
or with the code a trailing `# exit N` comment names, without a traceback. Blocks in transcript
form (`$ command` lines followed by output) run their `$` lines; the output shown came from the
larger models the text names and is not compared. `mt` runs in this process through its entry
point (no interpreter start per command), with stdin fed from the `echo`/`printf` before a
pipe; any other program in an unmarked block fails the test, so each needs a marker.
"""

from __future__ import annotations

import glob
import gzip
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.inprocess import run_in_process

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!--\s*example:\s*(\w+)(.*?)-->")
EXPECTED_EXIT = re.compile(r"#\s*exit (\d+)")


@dataclass
class Example:
    where: str  # "README.md:41"
    commands: list[str]
    skip: str  # the marker's reason, "" when the block runs


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def extract(path: Path) -> list[Example]:
    """The ```bash blocks of one Markdown file, with the marker above each (if any)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    examples, i = [], 0
    while i < len(lines):
        if lines[i].strip() != "```bash":
            i += 1
            continue
        start = i
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        above = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.search(above)
        skip = ""
        if marker:
            assert marker.group(1) == "skip", f"{path.name}:{start + 1}: unknown marker {above}"
            skip = marker.group(2).strip() or "no reason given"
        name = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
        where = f"{name}:{start + 1}"
        examples.append(Example(where, commands(lines[start + 1 : end]), skip))
        i = end + 1
    return examples


def commands(body: list[str]) -> list[str]:
    """The commands of a block: its `$ ` lines in a transcript, else every line that is not a
    comment, with backslash continuations joined."""
    if any(line.startswith("$ ") for line in body):
        return [line[2:] for line in body if line.startswith("$ ")]
    joined, out = "", []
    for line in body:
        if not line.strip() or (line.lstrip().startswith("#") and not joined):
            continue
        joined += line.rstrip().removesuffix("\\") + (" " if line.rstrip().endswith("\\") else "")
        if not line.rstrip().endswith("\\"):
            out.append(joined.strip())
            joined = ""
    return out


ALL = [e for path in markdown_files() for e in extract(path)]


def test_examples_are_found_and_every_skip_says_why():
    runnable = [e for e in ALL if not e.skip]
    assert len(runnable) >= 10, [e.where for e in runnable]
    assert any(e.where.startswith("README.md") for e in runnable)
    for e in ALL:
        assert e.skip != "no reason given", f"{e.where}: a skip marker needs its reason"


def test_a_marker_and_transcripts_are_read(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- example: skip (trains for 30 minutes) -->\n```bash\nmt train big.yaml\n```\n\n"
        "```bash\n$ echo x | mt translate CKPT\nan output line\n"
        "$ mt eval --hyp a --ref b  # exit 1\n```\n\n"
        "```bash\n# a comment\nmt translate CKPT \\\n    --greedy\n```\n",
        encoding="utf-8",
    )
    found = extract(page)
    assert [(e.commands, e.skip) for e in found] == [
        (["mt train big.yaml"], "(trains for 30 minutes)"),
        (["echo x | mt translate CKPT", "mt eval --hyp a --ref b  # exit 1"], ""),
        (["mt translate CKPT      --greedy"], ""),
    ]


# -- the folder the examples run in ----------------------------------------------------------------


def head_gz(src: Path, dst: Path, n: int) -> None:
    with gzip.open(src, "rt", encoding="utf-8") as f, gzip.open(dst, "wt", encoding="utf-8") as g:
        g.writelines(next(f) for _ in range(n))


@pytest.fixture(scope="module")
def sandbox(tiny_run: Path, multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working folder where the manual's paths name the tiny model's files (linked one by
    one, so nothing an example writes lands in the shared run directory)."""
    home = tmp_path_factory.mktemp("examples")
    tiny_run, multi30k_dir = tiny_run.resolve(), multi30k_dir.resolve()  # MT_DATA may be relative
    for name in ("configs", "docs", "scripts"):
        (home / name).symlink_to(REPO / name)
    for run in ("multi30k_de_en", "tiny", "multi30k_en_de"):
        folder = home / "runs" / run
        folder.mkdir(parents=True)
        for f in tiny_run.iterdir():
            if f.is_file():
                (folder / f.name).symlink_to(f)
    for name in ("CKPT", "best.pt", "A.pt", "B.pt"):
        (home / name).symlink_to(tiny_run / "best.pt")
    data = home / "data"
    data.mkdir()
    for lang in ("de", "en"):
        for split in ("train", "val"):
            (data / f"{split}.{lang}.gz").symlink_to(multi30k_dir / f"{split}.{lang}.gz")
        head_gz(
            multi30k_dir / f"test_2016_flickr.{lang}.gz", data / f"test_2016_flickr.{lang}.gz", 8
        )
        with gzip.open(data / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            text = f.read()
        for name in ("test", "dev", "ex"):
            (home / f"{name}.{lang}").write_text(text, encoding="utf-8")
    (home / "test.hyp").write_text((home / "test.en").read_text(encoding="utf-8"))
    return home


def run_command(command: str, home: Path, env: dict[str, str], capsys, monkeypatch):
    """One example command: (exit code, stderr)."""
    expected = EXPECTED_EXIT.search(command)
    command = re.sub(r"\s+#.*$", "", command) if "#" in command else command
    left, bar, right = command.rpartition(" | ")
    mt_part = right if bar else command
    stdin = b""
    if bar:
        words = shlex.split(left)
        assert words and words[0] in ("echo", "printf"), f"only echo/printf feed a pipe: {left}"
        stdin = subprocess.run(
            ["bash", "-c", left], capture_output=True, cwd=home, env=env, check=True, timeout=30
        ).stdout
    words = [os.path.expandvars(w) for w in shlex.split(mt_part)]
    if words[:1] == ["export"]:
        name, _, value = words[1].partition("=")
        if name != "MT_DATA":  # the folder's own MT_DATA stands in for any path given
            env[name] = value
        return 0, "", int(expected.group(1)) if expected else 0
    assert words[:1] == ["mt"], f"not an mt command (mark the block to skip it): {command}"
    args: list[str] = []
    for w in words[1:]:
        args += sorted(glob.glob(w, root_dir=home)) or [w] if "*" in w else [w]
    rc, _, err = run_in_process(args, capsys, monkeypatch, stdin=stdin)
    return rc, err, int(expected.group(1)) if expected else 0


@pytest.mark.parametrize("example", [e for e in ALL if not e.skip], ids=lambda e: e.where)
def test_example_runs_on_the_tiny_model(example: Example, sandbox: Path, capsys, monkeypatch):
    env = {**os.environ, "MT_DATA": str(sandbox / "data"), "OMP_NUM_THREADS": "1"}
    monkeypatch.chdir(sandbox)
    monkeypatch.setenv("MT_DATA", env["MT_DATA"])
    for command in example.commands:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        rc, err, want = run_command(command, sandbox, env, capsys, monkeypatch)
        assert "Traceback" not in err, f"{example.where}: {command}\n{err}"
        assert rc == want, f"{example.where}: {command}\nexit {rc}, wanted {want}\n{err}"

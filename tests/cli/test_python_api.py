"""The Python face (`import mt`): the manual page's examples run as a user copies them, and each
function gives what its command gives on the tiny model, since both go through the same code.

docs/python-api.md's ```python blocks are executed in order in one namespace (a later block uses
the `model` of an earlier one), in a folder where `runs/tiny` is the tiny model the tests train
and `configs/` the repository's, with MT_DATA at Multi30k.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.inprocess import run_in_process

import mt

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "python-api.md"


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line of the fence, code) of each ```python block of a Markdown file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            blocks.append((i + 1, "\n".join(lines[i + 1 : end]) + "\n"))
            i = end
        i += 1
    return blocks


def test_blocks_are_read_with_their_lines(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n```python\nx = 1\ny = 2\n```\n```bash\nls\n```\n```python\nz\n```\n")
    assert python_blocks(page) == [(2, "x = 1\ny = 2\n"), (9, "z\n")]


@pytest.fixture(scope="module")
def sandbox(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working folder whose `runs/tiny` links the tiny model's files one by one."""
    home = tmp_path_factory.mktemp("python-api")
    (home / "configs").symlink_to(REPO / "configs")
    folder = home / "runs" / "tiny"
    folder.mkdir(parents=True)
    for f in tiny_run.resolve().iterdir():
        if f.is_file():
            (folder / f.name).symlink_to(f)
    return home


def test_the_page_examples_run(sandbox: Path, multi30k_dir: Path, monkeypatch, capsys):
    blocks = python_blocks(PAGE)
    assert len(blocks) >= 5  # translate (2), score, train, errors
    monkeypatch.chdir(sandbox)
    monkeypatch.setenv("MT_DATA", str(multi30k_dir.resolve()))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    namespace: dict[str, object] = {"__name__": "__main__"}
    printed = []  # what each block printed, as lines
    capsys.readouterr()
    for line, code in blocks:
        exec(compile(code, f"{PAGE.name}:{line}", "exec"), namespace)  # noqa: S102
        printed.append(capsys.readouterr().out.splitlines())
    translated, _, scored, trained, error = printed
    assert len(translated) == 1 and translated[0].strip()
    assert re.fullmatch(r"-\d+\.\d\d -\d+\.\d\d \[\('.+\)\]", scored[0]), scored
    assert trained[-1].strip()  # the new model's translation (the run's evaluations above it)
    assert error == ["beam must be in [1, 1,024], got 0"]
    assert (sandbox / "runs" / "tiny-python" / "best.pt").is_file()
    assert namespace["run"] == Path("runs/tiny-python")


def first_lines(multi30k_dir: Path, lang: str, n: int) -> list[str]:
    with gzip.open(multi30k_dir / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


@pytest.fixture(scope="module")
def model(tiny_run: Path):
    return mt.load(tiny_run, device="cpu")


def test_translate_gives_what_mt_translate_gives(
    model, tiny_run: Path, multi30k_dir: Path, tmp_path, capsys, monkeypatch
):
    lines = first_lines(multi30k_dir, "de", 6) + ["Der Hund %s läuft <b>schnell</b>.", ""]
    src = tmp_path / "src.de"
    src.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    for flags, options in ([], {}), (["--beam", "2", "--alpha", "1.0"], {"beam": 2, "alpha": 1.0}):
        rc, out, err = run_in_process(
            ["translate", tiny_run, "--input", src, "--device", "cpu", *flags], capsys, monkeypatch
        )
        assert rc == 0, err
        assert mt.translate(model, lines, **options) == out.splitlines()
        assert mt.translate(model, lines[0], **options) == out.splitlines()[0]


def test_score_gives_what_mt_score_gives(
    model, tiny_run: Path, multi30k_dir: Path, tmp_path, capsys, monkeypatch
):
    src, tgt = first_lines(multi30k_dir, "de", 5), first_lines(multi30k_dir, "en", 5)
    for name, lines in (("s.de", src), ("t.en", tgt)):
        (tmp_path / name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    args = ["score", tiny_run, "--src", tmp_path / "s.de", "--tgt", tmp_path / "t.en", "--json"]
    rc, out, err = run_in_process([*args, "--device", "cpu"], capsys, monkeypatch)
    assert rc == 0, err
    want = [json.loads(line) for line in out.splitlines()]
    got = mt.score(model, src, tgt)
    assert [(s.score, s.logprob, s.tokens, s.token_logprobs) for s in got] == [
        (w["score"], w["logprob"], w["tokens"], w["token_logprobs"]) for w in want
    ]
    assert all(s.tokens[-1] == "</s>" and s.logprob < 0 for s in got)


def test_a_users_mistake_is_one_line(model):
    with pytest.raises(mt.MtError, match=r"^unknown decode setting 'bean'; known: beam, "):
        mt.translate(model, "Ein Hund.", bean=3)
    with pytest.raises(mt.MtError, match=r"^2 sources but 1 targets$"):
        mt.score(model, ["a", "b"], ["c"])
    with pytest.raises(mt.MtError, match=r"^sample draws one output per line"):
        mt.translate(model, "Ein Hund.", sample=True, beam=3)
    with pytest.raises(mt.MtError, match="config file not found"):
        mt.fit("no-such.yaml")


def test_import_mt_does_not_import_torch():
    """The CLI's --help and a script's `import mt` stay fast: the names load on first use."""
    code = (
        "import sys, mt\n"
        "assert set(mt.__all__) <= set(dir(mt)), dir(mt)\n"
        "mt.MtError\n"
        "assert 'torch' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        mt.nothing  # noqa: B018

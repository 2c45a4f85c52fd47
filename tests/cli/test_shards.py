"""`mt translate` and `mt score` over many processes: chunks of line ranges, shared out by
`--shard K/N` or by torchrun, merged into exactly the one-process output."""

from __future__ import annotations

import gzip
import os
import subprocess

import pytest
from support import REPO
from support.inprocess import run_in_process
from support.processes import free_port, torchrun

N_LINES = 230  # not a multiple of the chunk: the last chunk is short


@pytest.fixture(scope="module")
def lines(multi30k_dir, tmp_path_factory):
    """Multi30k dev sources and references, with an empty line among them."""
    folder = tmp_path_factory.mktemp("shards")
    for lang in ("de", "en"):
        with gzip.open(multi30k_dir / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            text = [next(f).rstrip("\n") for _ in range(N_LINES)]
        text[7] = ""
        (folder / f"in.{lang}").write_text("\n".join(text) + "\n", encoding="utf-8")
    return folder


def mt(args, capsys, monkeypatch):
    rc, out, err = run_in_process(args, capsys, monkeypatch)
    assert rc == 0, err
    return err


@pytest.mark.parametrize("search", [["--greedy"], ["--beam", "3", "--nbest", "2"]])
def test_shards_equal_one_process_and_skip_finished_chunks(
    tiny_run, lines, tmp_path, capsys, monkeypatch, search
):
    ckpt = tiny_run / "best.pt"
    common = [ckpt, "--input", lines / "in.de", "--device", "cpu", "--buffer-lines", "20", *search]
    mt(["translate", *common, "--output", tmp_path / "one.txt"], capsys, monkeypatch)
    out = tmp_path / "sharded.txt"
    sharded = ["translate", *common, "--output", out, "--chunk-lines", "40"]
    # 6 chunks over 3 shares; shares 2 and 0 first, then 2 again as a restarted job would.
    for k in (2, 0):
        err = mt([*sharded, "--shard", f"{k}/3"], capsys, monkeypatch)
        assert "2 chunks written" in err and not out.exists()
    parts = sorted(p.name for p in (tmp_path / "sharded.txt.parts").iterdir())
    assert parts == ["00000000", "00000002", "00000003", "00000005", "job.json"]
    err = mt([*sharded, "--shard", "2/3"], capsys, monkeypatch)
    assert "0 chunks written, 2 found done" in err
    err = mt([*sharded, "--shard", "1/3"], capsys, monkeypatch)
    assert f"merged 6 chunks into {out}" in err
    assert out.read_bytes() == (tmp_path / "one.txt").read_bytes()
    assert not (tmp_path / "sharded.txt.parts").exists()


def test_chunks_of_another_job_are_refused(tiny_run, lines, tmp_path, capsys, monkeypatch):
    base = [tiny_run / "best.pt", "--input", lines / "in.de", "--output", tmp_path / "o.txt"]
    base += ["--device", "cpu", "--buffer-lines", "20", "--shard", "0/2"]
    mt(["translate", *base, "--greedy"], capsys, monkeypatch)
    rc, _, err = run_in_process(["translate", *base, "--beam", "2"], capsys, monkeypatch)
    assert rc == 2 and "holds chunks of another job" in err, err
    rc, _, err = run_in_process(
        ["translate", *base, "--greedy", "--chunk-lines", "30"], capsys, monkeypatch
    )
    assert rc == 2 and "multiple of the buffer lines (20)" in err, err


def test_sharded_score_equals_one_process(tiny_run, lines, tmp_path, capsys, monkeypatch):
    common = ["score", tiny_run / "best.pt", "--src", lines / "in.de", "--tgt", lines / "in.en"]
    common += ["--device", "cpu", "--buffer-lines", "25", "--json"]
    mt([*common, "--output", tmp_path / "one.jsonl"], capsys, monkeypatch)
    for k in range(2):
        mt([*common, "--output", tmp_path / "two.jsonl", "--shard", f"{k}/2"], capsys, monkeypatch)
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()


def test_torchrun_translate_equals_one_process(tiny_run, lines, tmp_path, capsys, monkeypatch):
    common = [tiny_run / "best.pt", "--input", lines / "in.de", "--device", "cpu"]
    common += ["--buffer-lines", "16", "--beam", "2"]
    mt(["translate", *common, "--output", tmp_path / "one.txt"], capsys, monkeypatch)
    args = [torchrun(), "--nproc_per_node=2", "--rdzv-backend=c10d"]
    args += [f"--rdzv-endpoint=127.0.0.1:{free_port()}", "-m", "mt", "translate"]
    proc = subprocess.run(
        [*args, *map(str, common), "--output", str(tmp_path / "two.txt")],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("chunks written") == 2  # one line per process
    assert (tmp_path / "two.txt").read_bytes() == (tmp_path / "one.txt").read_bytes()

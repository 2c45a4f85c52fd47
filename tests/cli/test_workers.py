"""`decode.workers`: decoding spread over forked processes of one thread each
(mt.runtime.workers), on a model trained on Multi30k: the same lines out as one process, in
order, across buffers; a worker's error or death is one line in the parent."""

from __future__ import annotations

import gzip
import json
import os
import signal
import threading

import pytest

from mt.errors import MtError
from mt.runtime.workers import WorkerPool, shares, spread
from mt.translation.requests import Plan, Request
from mt.translation.session import DecodeOptions, Session
from mt.translation.translator import translate_stream

N = 60


@pytest.fixture(scope="module")
def german(multi30k_dir) -> list[str]:
    with gzip.open(multi30k_dir / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        return [next(f).strip() for _ in range(N)]


def test_shares_cover_every_line_once_within_the_budget(tiny_run, german):
    translator = Session([tiny_run / "last.pt"], "cpu").translator(DecodeOptions(max_tokens=300))
    requests = [Request(s) for s in german]
    parts = shares(translator, requests, 2)
    assert sorted(i for p in parts for i in p) == list(range(N))
    sizes = [len(x) for x in translator.tokenizer.encode_src(german)]
    padded = [len(p) * max(sizes[i] for i in p) for p in parts]
    assert all(n <= 300 for n in padded) and len(parts) >= 2 * 2
    totals = [sum(sizes[i] for i in p) for p in parts]
    assert totals == sorted(totals, reverse=True)  # the largest share is given out first


def test_workers_translate_as_one_process_does(tiny_run, mt_cli, german):
    lines = german[:25] + [""] + german[25:]  # an empty line stays one empty output line
    text = "\n".join(lines) + "\n"
    common = ("--device", "cpu", "--buffer-lines", "20", "--max-tokens", "300")
    one = mt_cli("translate", tiny_run / "last.pt", *common, stdin=text)
    two = mt_cli("translate", tiny_run / "last.pt", *common, "--workers", "2", stdin=text)
    assert one.rc == 0 and two.rc == 0, one.err + two.err
    assert len(two.out.splitlines()) == len(lines) and two.out.splitlines()[25] == ""
    assert two.out == one.out


def test_eval_with_workers_scores_the_same(tiny_run, mt_cli, german, tmp_path, multi30k_dir):
    src, ref = tmp_path / "src.de", tmp_path / "ref.en"
    src.write_text("\n".join(german) + "\n")
    with gzip.open(multi30k_dir / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        ref.write_text("".join(next(f) for _ in range(N)))
    args = ("eval", tiny_run / "last.pt", "--src", src, "--ref", ref, "--json", "--device", "cpu")
    one, two = mt_cli(*args), mt_cli(*args, "--workers", "2", "--max-tokens", "300")
    assert one.rc == 0 and two.rc == 0, one.err + two.err
    assert '"bleu"' in two.out and two.out == one.out


def test_a_user_error_in_a_worker_is_the_parents_one_line(tiny_run):
    options = DecodeOptions(workers=2, greedy=True)
    translator = Session([tiny_run / "last.pt"], "cpu").translator(options)
    asked = [Request("Ein Hund.", constraints=["dog"])]  # constraints need beam search
    with pytest.raises(MtError) as alone:
        translator.translate(asked)
    with spread(translator) as pool, pytest.raises(MtError) as spread_out:
        assert isinstance(pool, WorkerPool)
        pool.translate(asked)
    assert str(spread_out.value) == str(alone.value)


def test_a_killed_worker_stops_the_run_with_one_line(tiny_run, german):
    translator = Session([tiny_run / "last.pt"], "cpu").translator(DecodeOptions(workers=2))
    with WorkerPool(translator, 2) as pool:
        procs = list(pool._procs)
        assert len(pool.translate([Request(s) for s in german[:4]])) == 4
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].join(timeout=10)
        with pytest.raises(MtError, match=r"a decoding worker stopped \(exit codes -9\)"):
            list(translate_stream(pool, german, Plan()))
    # closing ended the survivor too: no worker outlives the pool
    assert [p.is_alive() for p in procs] == [False, False] and procs[1].exitcode is not None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--workers", "0"), "--workers must be"),
        (("--workers", "2", "--sample"), "--workers > 1 cannot be combined with --sample"),
    ],
)
def test_bad_worker_settings_are_one_line(tiny_run, mt_cli, flags, message):
    result = mt_cli("translate", tiny_run / "last.pt", "--device", "cpu", *flags, stdin="Hallo\n")
    assert result.rc != 0 and message in result.err
    assert "Traceback" not in result.err and result.out == ""


def test_a_buffer_comes_out_before_the_next_comes_in(tiny_run, german):
    """A live pipe: the first buffer's lines are answered while the input waits for them."""
    options = DecodeOptions(workers=2, buffer_lines=3)
    translator = Session([tiny_run / "last.pt"], "cpu").translator(options)
    answered = threading.Event()

    def live():  # the rest of the input comes only once the first lines are answered
        yield from german[:3]
        if not answered.wait(timeout=60):
            raise MtError("the first buffer was not written before more input came")
        yield from german[3:7]

    with spread(translator) as pool:
        out = translate_stream(pool, live(), Plan())
        first = [next(out) for _ in range(3)]
        answered.set()
        rest = list(out)
    assert len(first) == 3 and len(rest) == 4
    assert [t.text for t in first + rest] == [
        t.text for t in translator.translate([Request(s) for s in german[:7]])
    ]


def test_a_bad_line_stops_the_run_where_one_process_stops(tiny_run, mt_cli, german):
    """The lines of the buffers before a malformed one are written, then the same one line."""
    lines = (
        [json.dumps({"src": s}) for s in german[:5]]
        + ["{not json"]
        + [json.dumps({"src": s}) for s in german[5:8]]
    )
    text = "\n".join(lines) + "\n"
    common = ("--device", "cpu", "--input-format", "jsonl", "--buffer-lines", "2")
    one = mt_cli("translate", tiny_run / "last.pt", *common, stdin=text)
    two = mt_cli("translate", tiny_run / "last.pt", *common, "--workers", "2", stdin=text)
    assert one.rc == two.rc != 0 and "<stdin>:6" in two.err and "Traceback" not in two.err
    assert two.out == one.out and len(two.out.splitlines()) == 4
    assert two.err.strip().splitlines()[-1] == one.err.strip().splitlines()[-1]

"""A search flag the caller gives wins over the checkpoint's default search, on every door.

A checkpoint names a default search: an OPUS-MT folder without `num_beams` in its generation
config imported as greedy, and a user's config may say `decode.greedy: true`. The tiny Multi30k
run of conftest.py is copied with `greedy: true` written into its decode settings; on that copy
`--beam 4` must decode exactly as `--beam 4` on the original (beam search), in `mt translate`,
`mt eval`, `mt attention` and a server's request options, and flags that contradict each other
(`--greedy --beam 4`) are one line and exit 2 (a request's: a 422).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import httpx
import pytest
from support.processes import start_server

from mt.checkpoint import load, save
from mt.errors import MtError
from mt.translation.options import DecodeOptions
from mt.translation.session import Session

LINES = 40


@pytest.fixture(scope="module")
def greedy_copy(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny run's best.pt, its default search turned to greedy."""
    data = load(tiny_run / "best.pt")
    data["config"]["decode"]["greedy"] = True
    out = tmp_path_factory.mktemp("greedy") / "greedy.pt"
    save(data, out)
    return out


@pytest.fixture(scope="module")
def flickr(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("flickr")
    paths = []
    for lang in ("de", "en"):
        with gzip.open(multi30k_dir / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = [next(f) for _ in range(LINES)]
        path = folder / f"test.{lang}"
        path.write_text("".join(lines), encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1]


@pytest.fixture(scope="module")
def outputs(tiny_run: Path, greedy_copy: Path, flickr, mt_cli) -> dict[str, list[str]]:
    """`mt translate` of the slice: the original at beam 4, the greedy copy plain and at beam 4."""
    src, _ = flickr
    runs = {
        "beam4": (tiny_run / "best.pt", "--beam", "4"),
        "greedy": (tiny_run / "best.pt", "--greedy"),
        "copy": (greedy_copy,),
        "copy_beam4": (greedy_copy, "--beam", "4"),
    }
    out = {}
    for name, (ckpt, *flags) in runs.items():
        result = mt_cli("translate", ckpt, *flags, "--input", src)
        assert result.rc == 0, result.err
        out[name] = result.out.splitlines()
        assert len(out[name]) == LINES
    return out


def test_translate_beam_flag_wins_over_a_greedy_checkpoint(outputs):
    assert outputs["copy"] == outputs["greedy"]  # the copy's own default is greedy
    assert outputs["copy_beam4"] == outputs["beam4"]
    # The two searches differ on this slice, or the equalities above would show nothing.
    assert outputs["beam4"] != outputs["greedy"]


def test_translate_nbest_means_beam_search(greedy_copy, tiny_run, flickr, mt_cli):
    src, _ = flickr
    ours = mt_cli("translate", greedy_copy, "--beam", "4", "--nbest", "2", "--input", src)
    theirs = mt_cli(
        "translate", tiny_run / "best.pt", "--beam", "4", "--nbest", "2", "--input", src
    )
    assert ours.rc == theirs.rc == 0, ours.err
    assert ours.out == theirs.out and ours.out.count("\n") == 2 * LINES


@pytest.mark.parametrize("command", ["translate", "eval"])
def test_contradictory_flags_are_one_line_and_exit_2(command, greedy_copy, flickr, mt_cli):
    src, ref = flickr
    extra = {
        "translate": ("--input", src),
        "eval": ("--src", src, "--ref", ref),
    }[command]
    result = mt_cli(command, greedy_copy, *extra, "--greedy", "--beam", "4", stdin="Ein Hund.\n")
    assert result.rc == 2, result.err
    err = result.err.strip()
    assert len(err.splitlines()) == 1 and "--greedy and --beam 4 contradict" in err, err
    assert "Traceback" not in result.err


def test_eval_beam_flag_wins_over_a_greedy_checkpoint(greedy_copy, tiny_run, flickr, mt_cli):
    src, ref = flickr
    scores = {}
    for name, ckpt in (("copy", greedy_copy), ("original", tiny_run / "best.pt")):
        result = mt_cli("eval", ckpt, "--src", src, "--ref", ref, "--beam", "4", "--json")
        assert result.rc == 0, result.err
        scores[name] = json.loads(result.out)
    assert scores["copy"] == scores["original"]
    plain = mt_cli("eval", greedy_copy, "--src", src, "--ref", ref, "--json")
    greedy = mt_cli("eval", tiny_run / "best.pt", "--src", src, "--ref", ref, "--greedy", "--json")
    assert json.loads(plain.out) == json.loads(greedy.out) != scores["original"]


def test_attention_beam_flag_wins_over_a_greedy_checkpoint(
    greedy_copy, tiny_run, outputs, flickr, mt_cli, tmp_path
):
    """The page holds the translation and its attention: the same page from both, for a line
    whose beam output is not its greedy one."""
    lines = flickr[0].read_text(encoding="utf-8").splitlines()
    line = next(x for x, b, g in zip(lines, outputs["beam4"], outputs["greedy"]) if b != g)
    pages = {}
    for name, ckpt, flags in (
        ("copy", greedy_copy, ("--beam", "4")),
        ("original", tiny_run / "best.pt", ("--beam", "4")),
        ("copy_plain", greedy_copy, ()),
    ):
        page = tmp_path / f"{name}.html"
        result = mt_cli("attention", ckpt, "--src", line, *flags, "--html", page)
        assert result.rc == 0, result.err
        pages[name] = page.read_text(encoding="utf-8")
    assert pages["copy"] == pages["original"] != pages["copy_plain"]


def test_the_session_rule_names_each_setting_as_its_caller_does(greedy_copy):
    """The server's requests name settings `options.X`; sampling is a search flag too."""
    session = Session([greedy_copy], "cpu", name=lambda key: "options." + key.split(".")[-1])
    assert session.cfg.decode.greedy
    cfg = session.decode_config(DecodeOptions(beam=4))
    assert (cfg.beam, cfg.greedy, cfg.sample) == (4, False, False)
    cfg = session.decode_config(DecodeOptions(sample=True))
    assert (cfg.greedy, cfg.sample) == (False, True)
    cfg = session.decode_config(DecodeOptions(beam=1))
    assert cfg.greedy and cfg.beam == 1  # beam 1 asks for no beam: the default stands
    with pytest.raises(MtError, match=r"^options.greedy and options.nbest 3 contradict"):
        session.decode_config(DecodeOptions(greedy=True, nbest=3))


def test_serve_request_options_win_over_a_greedy_checkpoint(greedy_copy, outputs, flickr, tmp_path):
    src, _ = flickr
    lines = src.read_text(encoding="utf-8").splitlines()[:8]
    server = start_server(greedy_copy, "--device", "cpu", log=tmp_path / "server.log")
    try:
        answers = {}
        for name, options in (("plain", {}), ("beam4", {"beam": 4})):
            body = {"items": [{"src": x} for x in lines], "options": options}
            reply = httpx.post(server.url + "/v1/translate", json=body, timeout=120)
            assert reply.status_code == 200, reply.text
            answers[name] = [t["translation"] for t in reply.json()["items"]]
        bad = {"items": [{"src": lines[0]}], "options": {"greedy": True, "beam": 4}}
        reply = httpx.post(server.url + "/v1/translate", json=bad, timeout=60)
    finally:
        assert server.stop() == 0
    assert answers["plain"] == outputs["greedy"][:8]
    assert answers["beam4"] == outputs["beam4"][:8]
    assert reply.status_code == 422 and "options.greedy and options.beam 4" in reply.text, (
        reply.text
    )

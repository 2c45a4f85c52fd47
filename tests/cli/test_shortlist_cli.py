"""`mt shortlist` and `--shortlist K` on the tiny Multi30k run: the shortlist is counted from a
slice of the training text into a checkpoint copy, decoding with it writes only each batch's
candidates, one line per input line, the free decode's output wherever the candidates hold it,
and prefixes, constraints and protected spans still hold; `mt export` writes its vocabulary
map."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from mt.checkpoint import load
from mt.translation.options import DecodeOptions
from mt.translation.requests import Request
from mt.translation.session import Session

LINES = 40


def _slice(src: Path, dst: Path, n: int, skip: int = 0) -> Path:
    with gzip.open(src, "rt", encoding="utf-8") as f:
        lines = [line for i, line in zip(range(skip + n), f) if i >= skip]
    dst.write_text("".join(lines), encoding="utf-8")
    return dst


@pytest.fixture(scope="module")
def shortlisted(tiny_run, mt_cli, multi30k_dir, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("shortlist")
    de = _slice(multi30k_dir / "train.de.gz", folder / "de.txt", 5000)
    en = _slice(multi30k_dir / "train.en.gz", folder / "en.txt", 5000)
    out = folder / "short.pt"
    args = ("--source", de, "--target", en, "-o", out, "--k", "20", "--frequent", "5")
    result = mt_cli("shortlist", tiny_run, *args)
    assert result.rc == 0, result.err
    assert "a shortlist of 5,000 pairs" in result.err and "5 frequent" in result.err
    return out


@pytest.fixture(scope="module")
def flickr(multi30k_dir, tmp_path_factory) -> list[str]:
    path = tmp_path_factory.mktemp("flickr") / "test.de"
    return _slice(multi30k_dir / "test_2016_flickr.de.gz", path, LINES).read_text().splitlines()


def test_stored_beside_the_same_model(shortlisted, tiny_run) -> None:
    data, old = load(shortlisted), load(tiny_run / "best.pt")
    assert data["model"].keys() == old["model"].keys()
    stored = data["shortlist"]
    assert stored["k"] == 20 and stored["lines"] == 5000 and len(stored["frequent"]) == 5
    session = Session([shortlisted], "cpu")
    assert session.shortlist is not None
    assert session.shortlist.src_vocab == session.tokenizer.src_vocab_size
    # "ein" brings "a" among its few best: the Dice ranking works on real text.
    tok = session.tokenizer
    ein = tok.src.piece_to_id("\u2581ein")
    a = tok.tgt.piece_to_id("\u2581a")
    row = session.shortlist.targets[
        session.shortlist.offsets[ein] : session.shortlist.offsets[ein + 1]
    ]
    assert a in row[:5].tolist()


def _alone(session: Session, ks: list[int], lines: list[str], beam: bool = False):
    """Each line translated in a batch of its own, free and with the shortlist at each K of
    `ks`: per K, (free tokens, shortlisted tokens, that batch's candidates) per line."""
    opts = dict(greedy=not beam, beam=1 if not beam else 4)
    free = session.translator(DecodeOptions(**opts))
    short = {k: session.translator(DecodeOptions(shortlist=k, **opts)) for k in ks}
    out: dict[int, list] = {k: [] for k in ks}
    for line in lines:
        src = torch.tensor([session.tokenizer.encode_src([line])[0]])
        a = free.translate([Request(line)])[0].hypotheses[0].tokens
        for k in ks:
            cands = set(session.shortlist.candidates(src, k).tolist())
            b = short[k].translate([Request(line)])[0].hypotheses[0].tokens
            out[k].append((a, b, cands))
    return out


def test_greedy_writes_only_candidates_and_the_free_output_where_they_hold_it(
    shortlisted, flickr
) -> None:
    session = Session([shortlisted], "cpu")
    found = _alone(session, [3, 20], flickr[:20])
    held = 0
    for free, short, cands in found[3]:
        assert set(short) <= cands
        if set(free) <= cands:
            held += 1
            assert short == free
    assert 0 < held < 20  # both cases met: a narrow shortlist misses some words
    assert sum(free == short for free, short, _ in found[20]) >= 15


def test_beam_writes_only_candidates(shortlisted, flickr) -> None:
    session = Session([shortlisted], "cpu")
    for _, short, cands in _alone(session, [3], flickr[:8], beam=True)[3]:
        assert set(short) <= cands


def test_one_line_per_input_line(mt_cli, shortlisted, flickr, tmp_path) -> None:
    text = "\n".join(flickr[:10] + ["", "  "] + flickr[10:]) + "\n"
    for flags in (["--greedy"], ["--beam", "3", "--nbest", "2"]):
        result = mt_cli("translate", shortlisted, "--shortlist", "20", *flags, stdin=text)
        assert result.rc == 0, result.err
        per = 2 if "--nbest" in flags else 1
        assert len(result.out.splitlines()) == per * (LINES + 2)


def test_prefixes_constraints_and_spans_through_a_shortlist(mt_cli, shortlisted) -> None:
    lines = [
        {"src": "Ein Hund rennt über die Wiese.", "prefix": "Zebras"},
        {"src": "Ein Mann fährt Fahrrad.", "constraints": ["saxophone"]},
    ]
    text = "".join(json.dumps(x) + "\n" for x in lines)
    result = mt_cli(
        "translate", shortlisted, "--shortlist", "3", "--input-format", "jsonl", stdin=text
    )
    assert result.rc == 0, result.err
    first, second = result.out.splitlines()
    assert first.startswith("Zebras")
    assert "saxophone" in second
    protected = mt_cli(
        "translate", shortlisted, "--shortlist", "3", "--protect", "--greedy",
        stdin="Ein Hund mit %s und {0} auf <b>der</b> Wiese.\n",
    )  # fmt: skip
    assert protected.rc == 0, protected.err
    out = protected.out.strip()
    assert "%s" in out and "{0}" in out and "<b>" in out and "</b>" in out


def test_no_shortlist_is_one_line(mt_cli, tiny_run) -> None:
    result = mt_cli("translate", tiny_run, "--shortlist", "5", stdin="Ein Hund.\n")
    assert result.rc == 2
    assert "has no lexical shortlist for --shortlist; build one with mt shortlist" in result.err
    bad = mt_cli("translate", tiny_run, "--shortlist", "-1", stdin="Ein Hund.\n")
    assert bad.rc == 2 and "--shortlist must be in [0, 100,000]" in bad.err


def test_export_writes_the_vocabulary_map(mt_cli, shortlisted, tmp_path, flickr) -> None:
    ctranslate2 = pytest.importorskip("ctranslate2", reason="needs the [export] extra")
    out = tmp_path / "ct2"
    result = mt_cli("export", shortlisted, out, "--to", "ctranslate2")
    assert result.rc == 0, result.err
    lines = (out / "vmap.txt").read_text(encoding="utf-8").splitlines()
    session = Session([shortlisted], "cpu")
    short, tok = session.shortlist, session.tokenizer
    assert lines[0] == "\t" + " ".join(tok.tgt.id_to_piece(int(t)) for t in short.frequent)
    rows = dict(line.split("\t") for line in lines[1:])
    ein = rows["\u2581ein"].split()
    assert 1 <= len(ein) <= 21 and "\u2581a" in ein
    translator = ctranslate2.Translator(str(out))
    pieces = [tok.src.encode(line, out_type=str) for line in flickr[:5]]
    found = translator.translate_batch(pieces, use_vmap=True, beam_size=2)
    assert all(r.hypotheses[0] for r in found)

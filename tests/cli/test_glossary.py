"""Glossaries through `mt translate` and `mt eval` on the tiny model and Multi30k lines: the
lines with a term change and write it, every other line is byte-identical."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mt.data.corpus import read_lines
from mt.glossary import Glossary
from mt.glossary.accuracy import term_accuracy
from mt.translation.requests import Plan, Request
from mt.translation.session import Session

# Targets the tiny model never writes unaided: every line holding a term must change.
PAIRS = [("Mann", "gent"), ("Frau", "lady"), ("Hund", "hound"), ("Gruppe von Menschen", "crowd")]
TSV = "de\ten\n" + "".join(f"{s}\t{t}\n" for s, t in PAIRS)
CSV = "".join(f"{s},{t}\n" for s, t in PAIRS)
TBX = (
    '<?xml version="1.0"?>\n<tbx type="TBX-Basic" style="dca" xml:lang="en"><text><body>\n'
    + "".join(
        f'<conceptEntry id="c{i}"><langSec xml:lang="de"><termSec><term>{s}</term></termSec>'
        f'</langSec><langSec xml:lang="en"><termSec><term>{t}</term></termSec></langSec>'
        "</conceptEntry>\n"
        for i, (s, t) in enumerate(PAIRS)
    )
    + "</body></text></tbx>\n"
)
TMX = (
    '<?xml version="1.0"?>\n<tmx version="1.4"><header srclang="de"/><body>\n'
    + "".join(
        f'<tu><tuv xml:lang="de"><seg>{s}</seg></tuv><tuv xml:lang="en"><seg>{t}</seg></tuv></tu>\n'
        for s, t in PAIRS
    )
    + "</body></tmx>\n"
)
N = 40


@pytest.fixture(scope="module")
def lines(multi30k_dir: Path) -> list[str]:
    return [x.strip() for x in read_lines(multi30k_dir / "test_2016_flickr.de.gz")[:N]]


@pytest.fixture(scope="module")
def refs(multi30k_dir: Path) -> list[str]:
    return [x.strip() for x in read_lines(multi30k_dir / "test_2016_flickr.en.gz")[:N]]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, lines: list[str]) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("glossary")
    out = {}
    for ext, text in (("tsv", TSV), ("csv", CSV), ("tbx", TBX), ("tmx", TMX)):
        out[ext] = root / f"terms.{ext}"
        out[ext].write_text(text, encoding="utf-8")
    out["src"] = root / "src.de"
    out["src"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def plain(tiny_run: Path, files, mt_cli) -> list[str]:
    result = mt_cli("translate", tiny_run, "-i", files["src"], "--device", "cpu")
    assert result.rc == 0, result.err
    return result.out.splitlines()


GLOSSARY = Glossary.from_pairs(PAIRS, "de", tgt_lang="en")


def test_the_lines_with_terms_change_and_no_other(tiny_run, files, mt_cli, lines, plain):
    with_terms = [bool(GLOSSARY.find(x)) for x in lines]
    assert 10 <= sum(with_terms) < N  # Multi30k: a man, a woman, a dog in many lines
    outs = {}
    for ext in ("tsv", "csv", "tbx", "tmx"):
        args = ["translate", tiny_run, "-i", files["src"], "--device", "cpu"]
        result = mt_cli(*args, "--glossary", files[ext], "--glossary-hard")
        assert result.rc == 0, result.err
        outs[ext] = result.out.splitlines()
    assert outs["tsv"] == outs["csv"] == outs["tbx"] == outs["tmx"]  # one glossary, 4 files
    got = outs["tsv"]
    assert len(got) == N
    for src, has, before, after in zip(lines, with_terms, plain, got):
        if not has:
            assert after == before, src  # byte-identical
            continue
        assert after != before, src
        for m in GLOSSARY.find(src):
            assert m.entry.tgt in after, (src, after)
    # the guard (default) changes only lines with terms too, and writes them as often
    result = mt_cli("translate", tiny_run, "-i", files["src"], "--glossary", files["tsv"])
    guarded = result.out.splitlines()
    # decoding processes get the glossary with each share of requests: the same lines
    spread = mt_cli(*args, "--glossary", files["tsv"], "--workers", "2")
    assert spread.rc == 0 and spread.out.splitlines() == guarded, spread.err
    for src, has, before, after in zip(lines, with_terms, plain, guarded):
        assert has or after == before
        assert all(m.entry.tgt in after for m in GLOSSARY.find(src)), (src, after)
    assert term_accuracy(GLOSSARY, lines, plain).lemma == 0.0  # none of these words unaided
    # A term twice in a source ("Mann ... Männern") is one constraint: written once at least.
    assert term_accuracy(GLOSSARY, lines, got).lemma >= 80.0
    assert term_accuracy(GLOSSARY, lines, guarded).lemma >= 80.0


def test_inflected_and_multi_word_terms_in_the_translator(tiny_run):
    translator = Session([tiny_run / "best.pt"], "cpu").translator()
    g = Glossary.from_pairs([("roter Hund", "crimson hound"), ("Hund", "dog")], "de", tgt_lang="en")
    plan = Plan(glossary_hard=True)
    srcs = ["Zwei roten Hunde laufen.", "Ein Hund.", "Eine Katze."]
    done = translator.translate([Request(x, plan=plan, glossary=g) for x in srcs])
    without = translator.translate([Request(x, plan=plan) for x in srcs])
    assert "crimson hound" in done[0].text and "dog" not in done[0].text.split()
    assert "dog" in done[1].text
    assert done[2].text == without[2].text


def test_a_term_in_a_protected_span_is_not_constrained(tiny_run):
    translator = Session([tiny_run / "best.pt"], "cpu").translator()
    g = Glossary.from_pairs([("Hund", "hound")], "de", tgt_lang="en")
    src = "Siehe https://example.org/Hund jetzt."
    plan = Plan(glossary_hard=True)
    done = translator.translate([Request(src, plan=plan, glossary=g)])[0]
    without = translator.translate([Request(src, plan=plan)])[0]
    assert done.text == without.text and "https://example.org/Hund" in done.text


def test_glossary_errors_are_one_line(tiny_run, files, mt_cli, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("de\ten\nHund\thound\nKatze\n", encoding="utf-8")
    base = ["translate", tiny_run, "-i", files["src"], "--device", "cpu"]
    for extra, message in (
        (["--glossary", bad], f"{bad}:3: expected 2 columns"),
        (["--glossary", tmp_path / "none.tsv"], "none.tsv: glossary file not found"),
        (["--glossary-hard"], "--glossary-hard needs --glossary FILE"),
        (["--glossary", files["tsv"], "--greedy"], "a glossary needs the constrained beam"),
        (["--glossary", files["tsv"], "--input-format", "html"], "cannot be combined"),
    ):
        result = mt_cli(*base, *extra)
        assert result.rc == 2 and message in result.err, result.err
        assert "Traceback" not in result.err and result.out == ""
    fr = tmp_path / "fr.tsv"
    fr.write_text("de\tfr\nHund\tchien\n", encoding="utf-8")
    result = mt_cli(*base, "--glossary", fr)
    assert result.rc == 2 and "fr.tsv:1: the glossary is de-fr but the model translates de-en" in (
        result.err
    )


def test_eval_reports_term_accuracy_and_gates_on_it(tiny_run, files, mt_cli, lines, refs, plain):
    ref = files["src"].with_name("ref.en")
    ref.write_text("\n".join(refs) + "\n", encoding="utf-8")
    hyp = files["src"].with_name("hyp.en")
    hyp.write_text("\n".join(plain) + "\n", encoding="utf-8")
    base = ["eval", "--src", files["src"], "--ref", ref, "--glossary", files["tsv"], "--json"]
    given = mt_cli(*base, "--hyp", hyp)  # an output scored for its terms
    assert given.rc == 0, given.err
    report = json.loads(given.out)["terms"]
    want = term_accuracy(GLOSSARY, lines, plain, refs)
    assert report == want.as_dict()
    assert report["lemma"] == 0.0 and report["lines"] == sum(bool(GLOSSARY.find(x)) for x in lines)
    # the references use "man", "woman", "dog": what the glossary's own words would score
    ref_acc = term_accuracy(GLOSSARY, lines, refs)
    assert ref_acc.lemma < 20.0
    gated = mt_cli(*base, "--hyp", hyp, "--min-term-accuracy", "50")
    assert gated.rc == 1 and "term accuracy 0.00% is below --min-term-accuracy 50" in gated.err
    decoded = mt_cli(*base[:-1], tiny_run, "--device", "cpu", "--glossary-hard")
    assert decoded.rc == 0, decoded.err
    assert "lemma-matched" in decoded.out and "BLEU" in decoded.out
    lemma = float(decoded.out.split("terms: ")[1].split("%")[0])
    assert lemma >= 80.0  # from 0.0 unaided
    assert mt_cli(*base[:-1], tiny_run, "--min-term-accuracy", "50").rc == 0

"""`mt translate --protect` and `--input-format html` end to end, on the tiny trained run."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import torch
from support.span_inputs import KINDS, inject_text  # as scripts/bench/protect.py injects

from mt.checkpoint import load_model
from mt.data.corpus import read_lines
from mt.errors import MtError
from mt.spans.markup import parse_fragment
from mt.translation.requests import Plan, Request
from mt.translation.translator import Translator

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def injected(multi30k_dir: Path) -> list[tuple[str, list[str]]]:
    rng = random.Random(3)
    lines = read_lines(multi30k_dir / "val.de.gz")[:200]
    return [inject_text(s, k, rng) for k, s in enumerate(lines)]


def test_every_kind_of_span_is_kept_exactly(tiny_run, mt_cli, injected, tmp_path) -> None:
    src = tmp_path / "in.de"
    src.write_text("".join(line + "\n" for line, _ in injected), encoding="utf-8")
    kinds = {k % len(KINDS) for k in range(len(injected))}
    assert len(kinds) == len(KINDS)  # every kind is in the sample
    for flags in ([], ["--greedy"]):
        r = mt_cli("translate", tiny_run / "best.pt", "-i", src, *flags)
        assert r.rc == 0, r.err
        outs = r.out.split("\n")[:-1]
        assert len(outs) == len(injected)
        for (line, spans), out in zip(injected, outs):
            for s in set(spans):
                assert out.count(s) == line.count(s), (line, out, s)


def test_no_protect_is_the_unprotected_path(tiny_run, mt_cli, injected, tmp_path) -> None:
    lines = [line for line, _ in injected[:40]]
    src = tmp_path / "in.de"
    src.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    off = mt_cli("translate", tiny_run / "best.pt", "-i", src, "--no-protect", "--device", "cpu")
    loaded = load_model(tiny_run / "best.pt")
    tr = Translator(loaded.model, loaded.tokenizer, loaded.cfg.decode, torch.device("cpu"))
    today = [
        t.text
        for t in tr.translate([Request(x, plan=Plan(protect=False, recase=False)) for x in lines])
    ]
    assert off.rc == 0 and off.out == "".join(x + "\n" for x in today)
    # Clean lines: --protect changes nothing.
    clean = tmp_path / "clean.de"
    clean.write_text("Ein Hund läuft.\nZwei Männer spielen Fußball.\n50 % der Leute\n")
    a = mt_cli("translate", tiny_run / "best.pt", "-i", clean)
    b = mt_cli("translate", tiny_run / "best.pt", "-i", clean, "--no-protect")
    assert a.rc == b.rc == 0 and a.out == b.out


def test_lines_of_spans_only_and_jsonl(tiny_run, mt_cli) -> None:
    r = mt_cli("translate", tiny_run / "best.pt", stdin="{0}\n<b>%s</b>: $HOME\n\n")
    assert r.rc == 0 and r.out == "{0}\n<b>%s</b>: $HOME\n\n"
    # A request with constraints of its own: masked, constrained, restored.
    line = '{"src": "Ein Hund mit %s und %s läuft.", "constraints": ["dog"]}\n'
    r = mt_cli("translate", tiny_run / "best.pt", "--input-format", "jsonl", stdin=line)
    assert r.rc == 0, r.err
    assert r.out.count("%s") == 2


HTML = [
    'Klicken Sie <b>hier</b>, um die <a href="https://inkscape.org/de/">Seite</a> zu öffnen.',
    "Ein <b>Mann <i>mit</i> einem</b> Hund<br/> läuft &amp; springt.",
    '<span translate="no">Ein Hund</span> läuft <script>var x = "<b>";</script> schnell.',
    "<p>Zwei <em></em>Hunde <!-- kein Text --> im Wasser</p>",
    '<img src="x.png" alt="Ein Hund"/>',
]


def test_html_keeps_every_tag_and_nests(tiny_run, mt_cli) -> None:
    r = mt_cli("translate", tiny_run / "best.pt", "--input-format", "html", stdin="\n".join(HTML))
    assert r.rc == 0, r.err
    outs = r.out.split("\n")[:-1]
    assert len(outs) == len(HTML)
    for src, out in zip(HTML, outs):
        parse_fragment(out, "output")  # well-formed, or this raises
        assert sorted(re.findall(r"<[^<>]+>", out)) == sorted(re.findall(r"<[^<>]+>", src))
    assert '<a href="https://inkscape.org/de/">' in outs[0]
    assert '<span translate="no">Ein Hund</span>' in outs[2]
    assert '<script>var x = "<b>";</script>' in outs[2]
    assert outs[4] == HTML[4]  # nothing to translate


def test_malformed_html_is_one_line_naming_the_line(tiny_run, mt_cli) -> None:
    r = mt_cli(
        "translate", tiny_run / "best.pt", "--input-format", "html", stdin="Ein Hund\nEin <b>Hund\n"
    )
    assert r.rc == 2 and "Traceback" not in r.err
    assert r.err.strip().splitlines() == ["mt: error: <stdin>:2: <b> is not closed"]
    for line, says in (
        ("Ein <b>Hund</i>", "x.html:7: </i> found where </b> was expected"),
        ("ein Hund</b>", "x.html:7: </b> closes no open tag"),
        ("<script>x", "x.html:7: <script> is not closed"),
    ):
        with pytest.raises(MtError) as err:
            parse_fragment(line, "x.html:7")
        assert str(err.value) == says

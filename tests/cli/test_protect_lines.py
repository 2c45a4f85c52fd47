"""Lines that once broke `mt translate`: elements holding no word, and a line that fails for a
reason no check foresaw, which must cost that line only (tiny trained run, real CLI)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from support.inprocess import run_in_process

from mt.spans import find_spans
from mt.translation.translator import Translator

WORDLESS = [
    '<span color="$color">$number_or_percent</span> Kosten zur Einberufung',
    "<b><i>%d</i></b> Einträge",
    "<i></i>Text",
    '<a href="URL">URL</a>',
    '<a href="http://x.de">http://x.de</a> öffnen',
    "Ein Hund <b></b><i></i> läuft.",
    "<b>%s</b><i>{0}</i>",
    "<b><i></i></b>",
    "Datei <b>%s</b>: <i>&amp;</i>.",
]


def _spans(text: str) -> Counter:
    return Counter(s.text for s in find_spans(text))


@pytest.mark.parametrize(
    "flags",
    [[], ["--greedy"], ["--nbest", "2"], ["--input-format", "html"]],
    ids=["beam", "greedy", "nbest", "html"],
)
def test_elements_without_words_translate(tiny_run, tmp_path, capsys, monkeypatch, flags) -> None:
    src = tmp_path / "in.de"
    src.write_text("".join(x + "\n" for x in WORDLESS), encoding="utf-8")
    out = tmp_path / "out.en"
    rc, _, err = run_in_process(
        ["translate", tiny_run / "best.pt", "-i", src, "-o", out, *flags], capsys, monkeypatch
    )
    assert rc == 0, err
    lines = out.read_text(encoding="utf-8").split("\n")[:-1]
    nbest = 2 if "--nbest" in flags else 1
    assert len(lines) == nbest * len(WORDLESS)
    for k, line in enumerate(lines):
        source = WORDLESS[k // nbest]
        text = line.split(" ||| ")[1] if nbest > 1 else line
        assert _spans(text) == _spans(source), (source, text)
    # An element holding only spans stays one piece, as written.
    assert "<b><i>%d</i></b>" in lines[nbest]
    assert "<i></i>" in lines[2 * nbest]


def _fail_on(monkeypatch, word: str) -> None:
    """Translator._search_requests (each round of search) raising for any batch holding
    `word`: a bug that one line triggers inside the real search path."""
    real = Translator._search_requests

    def flaky(self, requests, alignment, protect):
        if any(word in r.src for r in requests):
            raise RuntimeError(f"cannot handle {word}")
        return real(self, requests, alignment, protect)

    monkeypatch.setattr(Translator, "_search_requests", flaky)


@pytest.mark.parametrize("fmt", ["text", "html"])
def test_a_failing_line_costs_only_itself(tiny_run, tmp_path, capsys, monkeypatch, fmt) -> None:
    lines = ["Ein Hund läuft.", "Zwei %s Männer.", "Kaputt <b>hier</b>", "Eine Frau singt."]
    src = tmp_path / "in.de"
    src.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    out = tmp_path / "out.en"
    args = ["translate", tiny_run / "best.pt", "-i", src, "-o", out, "--input-format", fmt]
    rc, _, err = run_in_process(args, capsys, monkeypatch)
    assert rc == 0, err
    good = out.read_text(encoding="utf-8").split("\n")
    _fail_on(monkeypatch, "Kaputt")
    rc, _, err = run_in_process(args, capsys, monkeypatch)
    assert rc == 1
    assert f"{src}:3: could not translate this line (RuntimeError: cannot handle Kaputt)" in err
    assert "1 line(s) could not be translated" in err and "Traceback" not in err
    got = out.read_text(encoding="utf-8").split("\n")
    assert len(got) == len(good) == len(lines) + 1
    assert got[2] == "" and got[:2] == good[:2] and got[3] == good[3]


def test_a_failing_line_on_stdin_and_in_jsonl(tiny_run, capsys, monkeypatch) -> None:
    _fail_on(monkeypatch, "Kaputt")
    rc, out, err = run_in_process(
        ["translate", tiny_run / "best.pt", "--output-format", "jsonl"],
        capsys,
        monkeypatch,
        stdin="Ein Hund.\nKaputt\nEine Frau.\n",
    )
    assert rc == 1 and "<stdin>:2: could not translate" in err
    records = [json.loads(x) for x in out.splitlines()]
    assert len(records) == 3
    assert records[1]["translation"] == "" and "RuntimeError" in records[1]["error"]
    assert records[0]["translation"] and "error" not in records[0] and "error" not in records[2]

"""Placeholder syntaxes by program: gettext's format flags, GCC, Qt, ICU, Python, and
meta-variables, each with the ordinary text its rule must not fire on."""

from __future__ import annotations

import json

import pytest
from support.inprocess import run_in_process

from mt.errors import MtError
from mt.spans import find_spans
from mt.translation.requests import parse_jsonl_line, po_requests

GCC = ["gcc-internal-format"]
FOUND = [
    ("Fehler bei %<sysctl%> für %<kern.osversion%>: %m", GCC,
     ["%<", "%>", "%<", "%>", "%m"]),
    ("%qE ist keine Funktion", GCC, ["%qE"]),
    ("%qD als %qT deklariert", GCC, ["%qD", "%qT"]),
    ("Größe %wu überschreitet %3$wu", GCC, ["%wu", "%3$wu"]),
    ("%qE hat %wd Elemente", None, ["%qE", "%wd"]),  # the default knows q and w too
    ("Datei %1 von %L2 kopiert", None, ["%1", "%L2"]),
    ("Datei %1 von %2", ["qt-format"], ["%1", "%2"]),
    ("{count, plural, one {# Datei} other {# Dateien}} gelöscht", None,
     ["{count, plural, one {# Datei} other {# Dateien}}"]),
    ("Am {d, date, short} um {t, time}", None, ["{d, date, short}", "{t, time}"]),
    ("Wert %(name)s ist %(count)d", ["python-format"], ["%(name)s", "%(count)d"]),
    ("Wert {name!r:>10} und {0[key]}", ["python-brace-format"], ["{name!r:>10}", "{0[key]}"]),
    ("Leer {} und {:>8} und {!r}", ["python-brace-format"], ["{}", "{:>8}", "{!r}"]),
    ("<b>fett</b> und <docbook>x</docbook>", None, ["<b>", "</b>", "<docbook>", "</docbook>"]),
    ('<ref id="x"> und <Pfad/>', None, ['<ref id="x">', "<Pfad/>"]),
]  # fmt: skip

# Text a rule could fire on, with the flags under which it must not.
ORDINARY = [
    ("Der Wert %m ist", None),  # %m is GCC's (strerror), not C's
    ("50%off und 100% sicher", GCC),  # ... yet GCC's rule needs no digit or % before
    ("Preis 5%1 Rabatt", None),  # Qt's %1 not after a digit
    ("Zeile %10", ["c-format"]),  # a C string holds no Qt placeholder
    ("a {} b und { } c", None),  # {} only where a brace format says so
    ("Wert {0} und {name}", ["c-format"]),  # a C string holds no braces
    ("{name, Vorname} und {a, b, c}", None),  # ICU needs a known argument type
    ("Aufruf: cp <Quelle> <Ziel>", None),  # meta-variables, translated
    ("Spieler <Spieler> verlässt das Spiel", None),
    ("if a < b and c > d", None),
    ("%(name)s", ["c-format"]),  # python's named form is not C's
]

META = [
    "Aufruf: %s <Pfad>",
    "<Spieler> hat gewonnen",
]


@pytest.mark.parametrize("text,flags,spans", FOUND)
def test_each_syntax_is_found(text, flags, spans) -> None:
    assert [s.text for s in find_spans(text, flags)] == spans


@pytest.mark.parametrize("text,flags", ORDINARY)
def test_ordinary_text_is_no_span(text, flags) -> None:
    found = [s.text for s in find_spans(text, flags)]
    assert found == (["%s"] if text.startswith("Aufruf") and "%s" in text else [])


def test_flags_choose_the_syntax() -> None:
    line = "Kopiere {0} nach %s mit %1"
    assert [s.text for s in find_spans(line)] == ["{0}", "%s", "%1"]
    assert [s.text for s in find_spans(line, ["c-format"])] == ["%s"]
    assert [s.text for s in find_spans(line, ["qt-format"])] == ["%1"]
    assert [s.text for s in find_spans(line, ["python-brace-format"])] == ["{0}"]
    assert [s.text for s in find_spans(line, ["no-c-format"])] == ["{0}", "%s", "%1"]
    # Markup, URLs and entities are found whatever the flags.
    assert [s.text for s in find_spans("<b>%s</b> &amp; www.x.de", ["qt-format"])] == [
        "<b>", "</b>", "&amp;", "www.x.de"]  # fmt: skip


def test_jsonl_format_field_and_po_catalogue(tmp_path) -> None:
    r = parse_jsonl_line('{"src": "a %1 b", "format": "qt-format"}', "in:1")
    assert r.formats == ("qt-format",)
    r = parse_jsonl_line('{"src": "a", "format": ["c-format", "no-qt-format"]}', "in:2")
    assert r.formats == ("c-format", "no-qt-format")
    with pytest.raises(MtError, match="in:3: 'format' must be"):
        parse_jsonl_line('{"src": "a", "format": 3}', "in:3")
    po = (
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        '#, c-format\nmsgid "Datei %s nicht gefunden"\nmsgstr ""\n\n'
        '#, qt-format\nmsgid "Zeile %1 von\\n%2"\nmsgstr ""\n'
    )
    reqs = list(po_requests(po, "x.po"))
    assert [(r.src, r.formats) for r in reqs] == [
        ("Datei %s nicht gefunden", ("c-format",)),
        ("Zeile %1 von %2", ("qt-format",)),
    ]


def test_translate_po_and_jsonl_keep_the_flagged_spans(tiny_run, tmp_path, capsys, monkeypatch):
    po = tmp_path / "de.po"
    po.write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        '#, gcc-internal-format\nmsgid "%qE ist kein %<Typ%> hier"\nmsgstr ""\n\n'
        '#, qt-format\nmsgid "Ein Hund %1 läuft"\nmsgstr ""\n\n'
        'msgid "Aufruf: <Pfad>"\nmsgstr ""\n',
        encoding="utf-8",
    )
    rc, out, err = run_in_process(
        ["translate", tiny_run / "best.pt", "-i", po, "--input-format", "po"], capsys, monkeypatch
    )
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 3
    assert all(lines[0].count(s) == 1 for s in ("%qE", "%>")) and lines[0].count("%<") == 1
    assert lines[1].count("%1") == 1
    # A C string's `{0}` is text: with c-format it is not kept as a span, though without a flag
    # it would be; both lines give one output line.
    src = tmp_path / "in.jsonl"
    items = [{"src": "Ein Hund %1 läuft", "format": "qt-format"}, {"src": "Ein <Spieler> läuft."}]
    src.write_text("".join(json.dumps(x) + "\n" for x in items), encoding="utf-8")
    rc, out, err = run_in_process(
        ["translate", tiny_run / "best.pt", "-i", src, "--input-format", "jsonl"],
        capsys,
        monkeypatch,
    )
    assert rc == 0, err
    assert out.splitlines()[0].count("%1") == 1 and len(out.splitlines()) == 2

"""Documents translated with their formatting kept, with a stand-in translator that writes the
source in capitals, so every kept and changed byte can be checked exactly."""

from __future__ import annotations

import gc
import io
import re

import pytest

from mt.errors import MtError
from mt.serve.documents import DocumentLimits, read_document, translate_document
from mt.serve.subtitles import rewrap
from mt.serve.unzip import OverLimit

TAG = re.compile(r"<[^>]+>")


def upper(texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


def upper_html(fragments: list[str]) -> list[str]:
    """Text in capitals, tags as written (what a translation through the HTML path keeps)."""
    out = []
    for f in fragments:
        if f.count("<") != f.count(">"):
            raise MtError("q:1: cannot read this line as an HTML fragment")
        parts = re.split(r"(<[^>]+>)", f)
        out.append("".join(p if p.startswith("<") else p.upper() for p in parts))
    return out


def test_txt_keeps_lines_endings_and_blanks():
    data = b"Ein Hund.\r\n\nZwei Katzen. Ein Baum.\n  \n"
    out = translate_document(data, ".txt", upper, upper_html).decode()
    assert out == "EIN HUND.\r\n\nZWEI KATZEN. EIN BAUM.\n  \n"


def test_html_translates_text_between_blocks_and_keeps_the_rest():
    doc = (
        "<!DOCTYPE html>\n<html><head><title>Ein Hund</title>"
        "<style>p { color: red }</style></head>\n<body>\n<h1>Der Park</h1>\n"
        '<p class="x">Ein Mann <b>fährt</b>\n  Fahrrad.</p><br>Zwei Hunde'
        '<script>var s = "Hund";</script><!-- ein Kommentar --></body></html>\n'
    )
    out = translate_document(doc.encode(), ".html", upper, upper_html).decode()
    assert TAG.findall(out) == TAG.findall(doc)  # every tag, in order, as written
    assert "<title>EIN HUND</title>" in out and "<h1>DER PARK</h1>" in out
    assert '<p class="x">EIN MANN <b>FÄHRT</b> FAHRRAD.</p>' in out
    assert 'var s = "Hund";' in out and "ein Kommentar" in out and "<br>ZWEI HUNDE<" in out


def test_html_fragment_that_does_not_nest_is_translated_by_pieces():
    doc = "<p>Ein <b>Hund <i>rennt</b> schnell</i>.</p>"
    out = translate_document(doc.encode(), ".html", upper, lambda fs: _refuse(fs)).decode()
    assert out == "<p>EIN <b>HUND <i>RENNT</b> SCHNELL</i>.</p>"


def _refuse(fragments: list[str]) -> list[str]:
    raise MtError("q:1: <b> is not closed")


def test_srt_keeps_numbers_timings_and_line_counts():
    srt = pytest.importorskip("srt")
    data = (
        "1\n00:00:01,000 --> 00:00:03,500\nEin Mann fährt\nmit dem Fahrrad.\n\n"
        "7\n00:00:04,000 --> 00:00:05,000\nJa.\n"
    )
    out = translate_document(data.encode(), ".srt", upper, upper_html).decode()
    subs, before = list(srt.parse(out)), list(srt.parse(data))
    assert [(s.index, s.start, s.end) for s in subs] == [(s.index, s.start, s.end) for s in before]
    assert subs[0].content.split("\n") == ["EIN MANN FÄHRT", "MIT DEM FAHRRAD."]
    assert subs[1].content == "JA."


def test_rewrap_spreads_words_over_the_lines():
    assert rewrap("a b c d e f", 2) == ["a b c", "d e f"]
    assert rewrap("one", 3) == ["one"]
    assert " ".join(rewrap("Two dogs are playing in the snow", 3)) == (
        "Two dogs are playing in the snow"
    )


def test_docx_keeps_paragraphs_tables_and_run_formatting():
    docx = pytest.importorskip("docx")
    doc = docx.Document()
    doc.add_heading("Der Park", level=1)
    p = doc.add_paragraph("Ein Mann ")
    p.add_run("fährt").bold = True
    p.add_run(" Fahrrad.")
    doc.add_paragraph("")
    table = doc.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "Zwei Hunde"
    table.cell(0, 1).text = "Ein Baum"
    buf = io.BytesIO()
    doc.save(buf)
    out = docx.Document(io.BytesIO(translate_document(buf.getvalue(), ".docx", upper, upper_html)))
    assert [q.style.name for q in out.paragraphs] == [q.style.name for q in doc.paragraphs]
    assert [q.text for q in out.paragraphs] == ["DER PARK", "EIN MANN FÄHRT FAHRRAD.", ""]
    runs = out.paragraphs[1].runs
    assert [(r.text, bool(r.bold)) for r in runs] == [
        ("EIN MANN ", False),
        ("FÄHRT", True),
        (" FAHRRAD.", False),
    ]
    assert [c.text for c in out.tables[0].rows[0].cells] == ["ZWEI HUNDE", "EIN BAUM"]


def test_bad_documents_are_one_line():
    with pytest.raises(MtError, match="not UTF-8"):
        translate_document(b"\xff\xfe\xfa", ".txt", upper, upper_html)
    with pytest.raises(MtError, match="not a .docx"):
        translate_document(b"no zip", ".docx", upper, upper_html)
    with pytest.raises(MtError, match="cannot translate .pdf"):
        translate_document(b"x", ".pdf", upper, upper_html)


def test_html_text_without_tags_goes_sentence_by_sentence():
    seen: dict[str, list[str]] = {"text": [], "html": []}

    def text(xs: list[str]) -> list[str]:
        seen["text"] += xs
        return upper(xs)

    def fragments(xs: list[str]) -> list[str]:
        seen["html"] += xs
        return upper_html(xs)

    doc = "<p>Ein Hund. Zwei Katzen &amp; ein Baum.</p><p>Ein <b>Hund</b>.</p>"
    out = translate_document(doc.encode(), ".html", text, fragments).decode()
    assert out == "<p>EIN HUND. ZWEI KATZEN &amp; EIN BAUM.</p><p>EIN <b>HUND</b>.</p>"
    assert seen == {"text": ["Ein Hund. Zwei Katzen & ein Baum."], "html": ["Ein <b>Hund</b>."]}


def _docx_bytes(paragraphs: list[str]) -> bytes:
    docx = pytest.importorskip("docx")
    doc = docx.Document()
    for text in paragraphs:
        doc.add_paragraph(text)
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


def _xml_left_to_the_collector(use) -> list[str]:  # noqa: ANN001
    """The parsed XML elements that `use()` leaves in reference cycles: what only a full
    collection would free (python-docx's parts hold the parsed template, megabytes of it)."""
    etree = pytest.importorskip("lxml.etree")
    gc.collect()
    gc.disable()
    try:
        use()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return [type(o).__name__ for o in gc.garbage if isinstance(o, etree._Element)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        gc.collect()


def test_a_docx_read_is_freed_at_once_written_closed_or_over_a_limit():
    data = _docx_bytes(["Ein Hund rennt.", "Zwei Katzen schlafen."])

    def written() -> None:
        doc = read_document(data, ".docx")
        assert doc.plain == ["Ein Hund rennt.", "Zwei Katzen schlafen."]
        assert doc.write(upper(doc.plain), []).startswith(b"PK")

    def closed() -> None:  # read, then given up (a client gone, a full queue)
        doc = read_document(data, ".docx")
        doc.close()
        doc.close()

    def over_a_limit() -> None:
        with pytest.raises(OverLimit):
            read_document(data, ".docx", DocumentLimits(max_file_segments=1))

    for use in (written, closed, over_a_limit):
        assert _xml_left_to_the_collector(use) == [], use.__name__

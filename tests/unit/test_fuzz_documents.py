"""The document readers (mt.serve.documents: html, srt, docx, txt) fuzzed with hypothesis: any
input is read or refused with a one-line MtError (a 4xx, never a 500), within memory in
proportion to it, and what is read is written back with every tag, timing and run as it was.
Pathological inputs of 64 KB are read in linear time (no hang)."""

from __future__ import annotations

import io
import re
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mt.errors import MtError
from mt.serve.documents import Document, DocumentLimits, read_document, tags

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = DocumentLimits(max_file_segments=200, max_file_chars=20_000, max_chars=2000)
# The regular expression `tags` replaces: the same tags, in cubic time on unclosed ones.
OLD_TAG = re.compile(r"<!--.*?-->|<![^>]*>|<\?[^>]*>|</?([a-zA-Z][^\s/>]*)[^>]*>", re.S)

MARKUP = st.lists(
    st.sampled_from(
        ["<", ">", "</", "/>", "<!--", "-->", "<!", "<?", "-", "!", "?", "/", "=", "'", '"',
         " ", "\n", "\t", "a", "b", "p", "br", "li", "script", "style", "Hund", "&amp;",
         "&lt;", "&#20;", "&", ";", "é", "\u2028"]
    ),
    max_size=40,
).map("".join)  # fmt: skip

ELEMENT = st.deferred(
    lambda: st.one_of(
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
        st.sampled_from(["&amp;", "&nbsp;", "<br>", "<hr/>", "<!-- x -->", "<!DOCTYPE html>"]),
        st.tuples(
            st.sampled_from(["p", "b", "i", "a", "li", "div", "span", "script", "td", "h1"]),
            st.sampled_from(["", ' class="x"', " href='/?a=1&b=2'", ' translate="no"']),
            st.lists(ELEMENT, max_size=4),
            st.booleans(),
        ).map(lambda t: f"<{t[0]}{t[1]}>{''.join(t[2])}" + (f"</{t[0]}>" if t[3] else "")),
    )
)
HTML = st.one_of(MARKUP, st.lists(ELEMENT, max_size=8).map("".join))


@pytest.fixture(scope="module", autouse=True)
def warm() -> None:
    """The readers' imports and first calls, before any memory is counted."""
    docx = pytest.importorskip("docx")
    pytest.importorskip("srt")
    buf = io.BytesIO()
    docx.Document().save(buf)
    identity(read_document(buf.getvalue(), ".docx"))
    identity(read_document(b"1\n00:00:00,000 --> 00:00:01,000\nJa.\n", ".srt"))
    read_document(b"<p>a</p>", ".html")


def identity(doc: Document) -> bytes:
    return doc.write(list(doc.plain), list(doc.html))


def read_within_memory(data: bytes, suffix: str) -> Document | None:
    """The document, or None when it is refused with an MtError; its reading held no more
    than a few dozen times the input's bytes."""
    tracemalloc.start()
    try:
        try:
            return read_document(data, suffix, LIMITS)
        except MtError as err:
            assert "\n" not in str(err)
            return None
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            assert peak < 64 * len(data) + (1 << 20), (peak, len(data))
    finally:
        tracemalloc.stop()


def raw_tags(text: str) -> list[str]:
    return [" ".join(text[t.start : t.end].split()) for t in tags(text)]


@SETTINGS
@given(MARKUP)
def test_tags_are_the_old_expressions_tags(text: str) -> None:
    want = [(m.start(), m.end(), (m.group(1) or "").lower()) for m in OLD_TAG.finditer(text)]
    assert [(t.start, t.end, t.name) for t in tags(text)] == want


@SETTINGS
@given(HTML)
def test_html_is_read_or_refused_and_keeps_every_tag(page: str) -> None:
    doc = read_within_memory(page.encode(), ".html")
    if doc is None:
        return
    assert all(t.strip() for t in doc.plain + doc.html)
    out = identity(doc).decode()
    assert raw_tags(out) == raw_tags(page)


@SETTINGS
@given(st.text(max_size=300))
def test_txt_written_back_unchanged(text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    doc = read_within_memory(data, ".txt")
    if doc is None:  # a lone surrogate is not UTF-8
        return
    assert identity(doc) == text.encode()


SUBTITLE = st.tuples(
    st.integers(0, 10**7),
    st.integers(1, 10**5),
    st.lists(st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=20),
             min_size=1, max_size=3),
)  # fmt: skip


@SETTINGS
@given(st.lists(SUBTITLE, max_size=6))
def test_srt_keeps_numbers_timings_and_words(subs: list) -> None:
    srt = pytest.importorskip("srt")
    from datetime import timedelta

    made = [
        srt.Subtitle(i + 1, timedelta(milliseconds=a), timedelta(milliseconds=a + d), "\n".join(ls))
        for i, (a, d, ls) in enumerate(subs)
    ]
    data = srt.compose(made, reindex=False).encode()
    doc = read_within_memory(data, ".srt")
    assert doc is not None
    got, before = list(srt.parse(identity(doc).decode())), list(srt.parse(data.decode()))
    assert [(s.index, s.start, s.end) for s in got] == [(s.index, s.start, s.end) for s in before]
    assert [s.content.split() for s in got] == [s.content.split() for s in before]


@SETTINGS
@given(st.binary(max_size=200) | MARKUP.map(str.encode))
def test_any_bytes_as_srt_or_docx_are_read_or_one_line(data: bytes) -> None:
    for suffix in (".srt", ".docx", ".html", ".txt"):
        read_within_memory(data, suffix)


WORD = st.text(st.characters(whitelist_categories=("L", "N", "P", "Zs")), min_size=1, max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(st.tuples(WORD, st.booleans()), min_size=1, max_size=4), max_size=5),
    st.lists(WORD, max_size=4),
    st.data(),
)
def test_docx_keeps_paragraphs_runs_and_cells(paragraphs, cells, data) -> None:  # noqa: ANN001
    docx = pytest.importorskip("docx")
    doc = docx.Document()
    for runs in paragraphs:
        p = doc.add_paragraph()
        for text, bold in runs:
            p.add_run(text).bold = bold
    if cells:
        table = doc.add_table(rows=1, cols=len(cells))
        for cell, text in zip(table.rows[0].cells, cells):
            cell.text = text
    buf = io.BytesIO()
    doc.save(buf)
    read = read_document(buf.getvalue(), ".docx", LIMITS)
    out = docx.Document(io.BytesIO(identity(read)))  # each run written back as it was read
    assert [p.text for p in out.paragraphs] == [p.text for p in doc.paragraphs]
    for mine, theirs in zip(out.paragraphs, doc.paragraphs):  # formatting stays on its words
        assert [(c, bool(r.bold)) for r in mine.runs for c in r.text] == [
            (c, bool(r.bold)) for r in theirs.runs for c in r.text
        ]
    if cells:
        assert [c.text for c in out.tables[0].rows[0].cells] == cells
    # The same file with bytes changed: read, or refused in one line, never a crash.
    raw = bytearray(buf.getvalue())
    for _ in range(data.draw(st.integers(1, 8))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    read_within_memory(bytes(raw), ".docx")


@pytest.mark.parametrize(
    ("suffix", "unit"),
    [
        (".html", "<a"), (".html", "<!--"), (".html", "<!--<a"), (".html", "<p x='"),
        (".html", "<b>"), (".html", "<p>"), (".html", "<a>-->"), (".html", "<script>"),
        (".html", "</b>a"), (".txt", "\n"), (".txt", "a\n"), (".srt", "1\n"),
    ],
)  # fmt: skip
def test_pathological_pages_are_read_in_linear_time(suffix: str, unit: str) -> None:
    """64 KB of each: the regular expression `tags` replaces took 214 s on 8 KB of `<a`."""
    data = (unit * (65536 // len(unit))).encode()
    start = time.process_time()
    try:
        read_document(data, suffix, DocumentLimits(1000, 100_000, 5000))
    except MtError:
        pass
    assert time.process_time() - start < 5

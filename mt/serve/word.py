"""Word documents (.docx) for mt.serve.documents: unpacked within the upload's limits,
every paragraph (body, tables, headers, footers) read into the texts to translate, and written
back with each run's formatting kept.

python-docx's objects refer to each other (a package and its parts, a document and its body),
so a document dropped after its request is freed only by Python's cycle collector, and with it
the parsed XML it holds: megabytes for Word's own template, memory the collector does not
count when it decides to run. A busy server piled such documents up between two full
collections and kept the heap they had grown (docs/studies/serving.md, the soak's memory). So a
read document is taken apart as soon as it is written or given up (`release`), and reference
counting frees it."""

from __future__ import annotations

import html
import io
import re
from collections.abc import Callable
from typing import Protocol

from mt.errors import MtError
from mt.serve.unzip import OverLimit, ZipLimits, unpack

_RUN_TAG = re.compile(r"<(/?)r(\d+)>")  # a run's tags in a paragraph's fragment


class Gather(Protocol):
    """What collects a document's texts (mt.serve.documents.Texts)."""

    def text(self, text: str) -> Callable[[], str]: ...

    def fragment(self, frag: str) -> Callable[[], str]: ...


def read_docx(
    data: bytes, texts: Gather, limits: ZipLimits
) -> tuple[Callable[[], bytes], Callable[[], None]]:
    """A .docx unpacked within `limits` (mt.serve.unzip), each paragraph's text given to
    `texts` (one of a single format as text, one of several runs as a fragment whose tags are
    its runs); returns what writes the document back once the translations are in (once), and
    what lets go of the parsed document without writing it (writing does too)."""
    try:
        import docx
    except ImportError:
        raise MtError(".docx files need python-docx: pip install 'mt[serve]'") from None
    try:
        unpacked = unpack(data, limits)
    except OverLimit:
        raise
    except MtError as err:
        raise MtError(f"not a .docx file ({err})") from None
    try:
        document = docx.Document(io.BytesIO(unpacked))
    except Exception as err:  # noqa: BLE001 - python-docx raises several kinds on bad files
        raise MtError(f"not a .docx file ({type(err).__name__})") from None
    del unpacked
    writes: list[Callable[[], None]] = []
    try:
        for p in _paragraphs(document):
            if not p.text.strip():
                continue
            if _one_format(p):
                part = texts.text(p.text)
                writes.append(lambda p=p, part=part: _set_runs(p, [part()]))
            else:
                frag = "".join(
                    f"<r{k}>{html.escape(r.text, quote=False)}</r{k}>" for k, r in enumerate(p.runs)
                )
                part = texts.fragment(frag)
                writes.append(lambda p=p, part=part: _set_runs(p, _run_texts(part(), len(p.runs))))
    except BaseException:  # over a limit while counting: nothing will be written
        writes.clear()
        release(document)
        raise

    def write() -> bytes:
        try:
            for each in writes:
                each()
            out = io.BytesIO()
            document.save(out)
            return out.getvalue()
        finally:
            close()

    held = [document]

    def close() -> None:
        writes.clear()  # their paragraphs refer to the document
        while held:
            release(held.pop())

    return write, close


def release(document) -> None:  # noqa: ANN001 - a python-docx Document
    """Take a python-docx document apart: its package, parts and body refer to each other,
    and emptying their attributes breaks those cycles, so the parsed XML is freed now rather
    than at the next full collection. The document cannot be used afterwards."""
    package = document.part.package
    for part in list(package.iter_parts()):
        vars(part).clear()
    vars(package).clear()
    vars(document).clear()


def _paragraphs(document):  # noqa: ANN001, ANN202 - python-docx objects
    """Every paragraph: the body's, its tables' (nested too), and the sections' headers and
    footers'."""
    yield from _walk(document)
    for section in document.sections:
        for part in (section.header, section.footer):
            if not part.is_linked_to_previous:
                yield from _walk(part)


def _walk(container):  # noqa: ANN001, ANN202 - python-docx objects
    """A container's paragraphs, then its tables' cells' (a module function: a nested one that
    calls itself is a reference cycle of its own)."""
    yield from container.paragraphs
    for table in getattr(container, "tables", []):
        for row in table.rows:
            for cell in row.cells:
                yield from _walk(cell)


def _one_format(p) -> bool:  # noqa: ANN001
    runs = [r for r in p.runs if r.text]
    if len(runs) != len(p.runs) or not runs:  # fields, images: keep the runs
        return len(runs) <= 1
    first = runs[0]._r.rPr
    key = first.xml if first is not None else ""
    return all((r._r.rPr.xml if r._r.rPr is not None else "") == key for r in runs)


def _set_runs(p, texts: list[str]) -> None:  # noqa: ANN001
    """Text k into the k-th run that had text (the rest emptied; their formatting stays)."""
    runs = [r for r in p.runs if r.text] or list(p.runs)
    for k, run in enumerate(runs):
        run.text = texts[k] if k < len(texts) else ""


def _run_texts(translated: str, n: int) -> list[str]:
    """The text of each run from a translated `<r0>...</r0><r1>...` fragment: text outside any
    tag goes to the run before it (the first run at the start)."""
    texts = [""] * n
    current, pos = 0, 0
    for m in _RUN_TAG.finditer(translated):
        texts[current] += html.unescape(translated[pos : m.start()])
        k = int(m.group(2))
        if k < n and not m.group(1):
            current = k
        pos = m.end()
    texts[current] += html.unescape(translated[pos:])
    return texts

"""Whole documents translated with their formatting kept: .txt, .html, .srt, .docx, and the
files CAT tools exchange (.xlf/.xliff, .tmx).

What `/translate_file` (LibreTranslate's route) does with an uploaded file. `read_document`
reduces a file to the texts a translator takes (a `Document`), so a caller can count and
schedule them before any is translated; `Document.write` puts their translations back in
place, in the same format:

- .txt: every line (its ending kept), sentence by sentence;
- .html: the text between block tags (`<p>`, `<li>`, `<td>`, `<h1>`, `<br>` ...) is one
  fragment: without tags, text (sentence by sentence: a `<p>` often holds a paragraph); with
  inline tags, translated by the HTML path (tags put back by alignment, attributes, `<script>`
  and `<style>` never translated); a fragment whose inline tags do not nest has its text
  pieces translated one by one;
- .srt (mt.serve.subtitles, the `srt` library): each subtitle's text, its numbering and
  timing kept, written on as many lines as it had;
- .docx (python-docx): each paragraph of the body, its tables, headers and footers; a
  paragraph whose runs differ in formatting (a bold word) goes through the HTML path with one
  tag per run, so the formatting stays on the words it was on. The zip is unpacked within
  limits first (mt.serve.unzip): a zip bomb is refused, not inflated;
- .xlf/.xliff and .tmx (mt.serve.cat_files): each segment to translate as `mt translate
  --input-format xliff | tmx` reads it, translated whole (a CAT tool has cut it already),
  filled back as that command fills it; parsed with no entity expanded (mt.cat.xmlio).

This module knows formats, not models: the caller translates `Document.plain` (texts),
`Document.html` (fragments) and `Document.units` (segments, whole) as it likes
(`translate_document` takes a function for each).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from mt.errors import MtError
from mt.serve.subtitles import read_srt
from mt.serve.unzip import OverLimit, ZipLimits
from mt.serve.word import read_docx
from mt.spans.markup import parse_fragment

CAT_SUFFIXES = (".xlf", ".xliff", ".tmx")
SUFFIXES = (".txt", ".html", ".srt", ".docx", *CAT_SUFFIXES)
Translate = Callable[[list[str]], list[str]]
Part = Callable[[], str]  # a piece of the output, read once the translations are in

BLOCK = {"address", "article", "aside", "blockquote", "body", "br", "caption", "dd", "div", "dl"}
BLOCK |= {"dt", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6"}
BLOCK |= {"head", "header", "hr", "html", "li", "main", "nav", "ol", "option", "p", "pre"}
BLOCK |= {"section", "table", "tbody", "td", "tfoot", "th", "thead", "title", "tr", "ul"}
_OPEN = re.compile(r"<(?:(!--)|[!?]|(/?)([a-zA-Z][^\s/>]*))")  # where a tag may start
_CLOSE = {name: re.compile(rf"</{name}\s*>", re.I) for name in ("script", "style")}
_LINE = re.compile(r"[^\r\n]+")


class Tag(NamedTuple):
    """A tag, comment or declaration found in HTML: `text[start:end]`, its lowercased `name`
    ("" for a comment or declaration) and whether it closes."""

    start: int
    end: int
    name: str
    closing: bool


def tags(text: str) -> Iterator[Tag]:
    """Every tag of `text` in order: `<!--...-->`, `<!...>`, `<?...>`, or `<name ...>` and
    `</name>`, each up to the first `-->` or `>` that ends it. Each end is looked for once
    (`find`), so this takes time in proportion to the text: a regular expression that
    matched a whole tag backtracked for minutes on 8 KB of `<a<a<a...` (no `>` to end them)."""
    pos, gt, dashes = 0, -1, -1
    search = _OPEN.search
    while m := search(text, pos):
        pos = m.start()
        if gt < pos:
            gt = text.find(">", pos)
            if gt < 0:
                return  # no tag can end from here on
        if m.group(1):  # <!--
            if dashes < pos + 4:
                dashes = text.find("-->", pos + 4)
                if dashes < 0:
                    dashes = len(text)  # none from here on
            if dashes < len(text):
                yield Tag(pos, dashes + 3, "", False)
                pos = dashes + 3
                continue
        name = m.group(3)
        yield Tag(pos, gt + 1, name.lower() if name else "", m.group(2) == "/")
        pos = gt + 1


def _has_tag(text: str) -> bool:
    return next(tags(text), None) is not None


@dataclass(frozen=True)
class DocumentLimits:
    """What one document may ask to have translated (None: no limit). Reading stops at the
    first text over a limit, with OverLimit naming it, so a file of a million short lines
    costs no more memory than one at the limit."""

    max_file_segments: int | None = None  # texts: lines, paragraphs, subtitles, fragments
    max_file_chars: int | None = None  # characters of all of them
    max_chars: int | None = None  # characters of one
    zip: ZipLimits = field(default_factory=ZipLimits)  # a .docx's unpacking (mt.serve.unzip)


class Texts:
    """What a document asks to have translated, gathered as it is read: plain texts (sentence
    by sentence), HTML fragments (the HTML path) and units (a CAT file's segments, each
    translated whole as `mt translate` translates a line). Each gathered piece is a `Part` of
    the output, read once `fill` has the translations."""

    def __init__(self, limits: DocumentLimits | None = None) -> None:
        self.limits = limits or DocumentLimits()
        self.plain: list[str] = []
        self.html: list[str] = []
        self.units: list[str] = []
        self.chars = 0
        self._plain: list[str] = []
        self._html: list[str] = []
        self._units: list[str] = []

    def text(self, text: str) -> Part:
        """`text`'s translation (a blank text stays as it is)."""
        if not text.strip():
            return lambda: text
        self._count(text)
        i = len(self.plain)
        self.plain.append(text)
        return lambda: self._plain[i]

    def unit(self, text: str) -> Part:
        """A segment's translation, the segment translated whole (its inline codes as tags)."""
        self._count(text)
        i = len(self.units)
        self.units.append(text)
        return lambda: self._units[i]

    def hold(self, n: int) -> None:
        """A reader holds `n` entries (a subtitle, a paragraph), blank ones too: they count
        against max_file_segments as the texts do."""
        if self.limits.max_file_segments is not None and n > self.limits.max_file_segments:
            self._over_segments()

    def _over_segments(self) -> None:
        n = self.limits.max_file_segments
        raise OverLimit(
            f"more than {n:,} texts to translate (lines, paragraphs, cells, subtitles); the "
            f"limit is {n:,}",
            "max_file_segments",
        )

    def _count(self, text: str, counted: bool = True) -> None:
        """`text` against the limits; `counted`: it is one of the document's texts."""
        limits = self.limits
        if limits.max_chars is not None and len(text) > limits.max_chars:
            raise OverLimit(
                f"a text of {len(text):,} characters ({text[:30]!r}...); the limit is "
                f"{limits.max_chars:,}",
                "max_chars",
            )
        if not counted:
            return
        self.chars += len(text)
        if limits.max_file_chars is not None and self.chars > limits.max_file_chars:
            raise OverLimit(
                f"more than {limits.max_file_chars:,} characters to translate; the limit is "
                f"{limits.max_file_chars:,}",
                "max_file_chars",
            )
        self.hold(self.segments + 1)

    def fragment(self, frag: str) -> Part:
        """An HTML fragment's translation: without tags, its text's (entities decoded and
        encoded again); with tags that nest, the HTML path's; else its text pieces', one by
        one, between the tags as written."""
        if not _has_tag(frag):
            text = html.unescape(frag)
            if not text.strip():
                return lambda: frag
            part = self.text(text)
            return lambda: html.escape(part(), quote=False)
        self._count(frag, counted=False)  # over max_chars: refused before it is parsed
        try:
            parse_fragment(frag, "")  # what the HTML path reads: decided now, not mid-way
        except MtError:
            return self._pieces(frag)
        self._count(frag)
        i = len(self.html)
        self.html.append(frag)
        return lambda: self._html[i]

    def _pieces(self, frag: str) -> Part:
        found = list(tags(frag))
        bounds = [0, *(b for t in found for b in (t.start, t.end)), len(frag)]
        texts = [frag[a:b] for a, b in zip(bounds[::2], bounds[1::2])]
        marks = [frag[t.start : t.end] for t in found] + [""]
        done = [self.text(html.unescape(t)) for t in texts]
        return lambda: "".join(html.escape(d(), quote=False) + t for d, t in zip(done, marks))

    def fill(self, plain: list[str], fragments: list[str], units: list[str] | None = None) -> None:
        units = units or []
        if (len(plain), len(fragments), len(units)) != (
            len(self.plain),
            len(self.html),
            len(self.units),
        ):
            raise ValueError("one translation per text, fragment and unit")
        self._plain, self._html, self._units = list(plain), list(fragments), list(units)

    @property
    def segments(self) -> int:
        return len(self.plain) + len(self.html) + len(self.units)


@dataclass
class Document:
    """A read document: its texts, how to write it back once they are translated, and the
    language it says its source is in (a CAT file's; None: the caller finds it)."""

    texts: Texts
    _write: Callable[[], bytes]
    source: str | None = None
    _close: Callable[[], None] = lambda: None

    @property
    def plain(self) -> list[str]:
        return self.texts.plain

    @property
    def html(self) -> list[str]:
        return self.texts.html

    @property
    def units(self) -> list[str]:
        return self.texts.units

    def write(
        self, plain: list[str], fragments: list[str], units: list[str] | None = None
    ) -> bytes:
        """The document with `plain`, `fragments` and `units` (translations of `self.plain`,
        `self.html` and `self.units`, in order) in place of its texts."""
        self.texts.fill(plain, fragments, units)
        return self._write()

    def close(self) -> None:
        """Let go of what reading held (a .docx's parsed parts) now, when the document will
        not be written (writing lets go by itself); closing twice is harmless."""
        self._close()


def read_document(
    data: bytes,
    suffix: str,
    limits: DocumentLimits | None = None,
    languages: tuple[str, str] = ("auto", ""),
    name: str = "the file",
) -> Document:
    """The document `data` (a file ending in `suffix`, called `name`) read into the texts to
    translate; MtError for a file this cannot read, OverLimit for one over `limits`. A CAT
    file is read for the (source, target) `languages` a caller asks for (source `auto`: the
    file's own)."""
    texts = Texts(limits)
    if suffix == ".docx":
        write, close = read_docx(data, texts, texts.limits.zip)
        return Document(texts, write, _close=close)
    if suffix in CAT_SUFFIXES:
        from mt.serve.cat_files import read_cat

        write, source = read_cat(data, suffix, texts, languages, name)
        return Document(texts, write, source)
    if suffix not in SUFFIXES:
        raise MtError(f"cannot translate {suffix} files (these: {', '.join(SUFFIXES)})")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise MtError(f"the {suffix} file is not UTF-8 (byte {err.start})") from None
    read = {".txt": _txt, ".html": _html, ".srt": read_srt}[suffix]
    write = read(text, texts)
    return Document(texts, lambda: write().encode("utf-8"))


def translate_document(
    data: bytes,
    suffix: str,
    translate_text: Translate,
    translate_html: Translate,
    limits: DocumentLimits | None = None,
    translate_units: Translate | None = None,
    languages: tuple[str, str] = ("auto", ""),
) -> bytes:
    """The document `data` translated in one go, in the same format (`translate_units`:
    the segments of a CAT file, translate_text's when not given)."""
    doc = read_document(data, suffix, limits, languages)
    plain = translate_text(doc.plain) if doc.plain else []
    fragments = translate_html(doc.html) if doc.html else []
    units = (translate_units or translate_text)(doc.units) if doc.units else []
    return doc.write(plain, fragments, units)


def _txt(text: str, texts: Texts) -> Part:
    """Each line's text (between line breaks: \\n, \\r\\n or \\r), the rest kept as written."""
    return _runs(text, ((m.start(), m.end()) for m in _LINE.finditer(text)), texts.text)


def _runs(text: str, spans: Iterable[tuple[int, int]], gather: Callable[[str], Part]) -> Part:
    """`text` with each of its `spans` (in order) translated: only the spans that hold
    something are kept while reading, so a file of blank lines or bare tags costs nothing."""
    runs: list[tuple[int, int, Part]] = []
    for start, end in spans:
        run = text[start:end]
        core = run.strip()
        if core:
            lead = len(run) - len(run.lstrip())
            runs.append((start + lead, start + lead + len(core), gather(core)))

    def write() -> str:
        out, pos = [], 0
        for start, end, part in runs:
            out += [text[pos:start], part()]
            pos = end
        out.append(text[pos:])
        return "".join(out)

    return write


def _html(text: str, texts: Texts) -> Part:
    """Cut at block tags; each run between them, its edge spaces aside, is one fragment (its
    inner spaces made one). A run that has passed max_chars is refused as soon as it has: a
    page of a million inline tags costs no more than one at the limit."""
    limit = texts.limits.max_chars

    def spans() -> Iterator[tuple[int, int]]:
        pos, run_start, seen, letters = 0, 0, 0, 0
        for tag in tags(text):
            if tag.start < pos:  # inside a <script>/<style> already taken
                continue
            if tag.name in ("script", "style") and not tag.closing:
                close = _CLOSE[tag.name].search(text, tag.end)
                if close is None:  # code to the end: nothing more to translate
                    yield run_start, tag.start
                    return
                end = close.end()
            elif tag.name in BLOCK or not tag.name:  # a block tag, comment or declaration
                end = tag.end
            else:  # inline: part of the run
                if limit is not None:
                    letters += len("".join(text[seen : tag.end].split()))
                    seen = tag.end
                    if letters > limit:
                        _too_long(text[run_start : tag.end].lstrip(), limit)
                continue
            if tag.start > run_start:  # a run between two tags (a page of <p> has none)
                yield run_start, tag.start
            pos = run_start = seen = end
            letters = 0
        yield run_start, len(text)

    return _runs(text, spans(), lambda core: texts.fragment(_squeeze(core, limit)))


def _squeeze(text: str, limit: int | None) -> str:
    """`text` with each run of spaces made one; OverLimit once it is surely over `limit`
    characters, found from a prefix (a few times the limit), not from all of the text."""
    if limit is not None:
        k = 2 * (limit + 1)
        while k < len(text):
            if len(" ".join(text[:k].split())) > limit:
                _too_long(text, limit)
            k *= 2
    return " ".join(text.split())


def _too_long(text: str, limit: int) -> None:
    raise OverLimit(
        f"a text of more than {limit:,} characters ({text[:30]!r}...); the limit is {limit:,}",
        "max_chars",
    )

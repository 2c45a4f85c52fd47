"""Glossary files: TSV, CSV, TBX and TMX, read into a `Glossary` (mt.glossary).

The formats commercial engines take (DeepL: TSV and CSV; Amazon Translate and Google: CSV, TSV
and TMX) and the terminologists' own (TBX):

- TSV / CSV: two columns, source term then target term, one entry a row, UTF-8. A first row
  of two language codes (`de<TAB>en`) is a header naming the languages; written the other way
  round (`en<TAB>de` for a de-en model) the columns are read the other way round. Blank rows
  are skipped; trailing empty cells (a spreadsheet's) are ignored. CSV is read by the csv
  module's rules (quotes around a term with a comma); TSV splits at tabs.
- TBX, the basic dialect of ISO 30042 (TBX v3 `conceptEntry/langSec/termSec/term`, and v2's
  `termEntry/langSet/tig|ntig/term`): each concept's terms in the source language each map to
  its first target term not marked `deprecatedTerm-admn-sts` (synonyms on the source side,
  the preferred term on the target side). A concept without both languages is skipped.
- TMX: each `tu`'s `tuv` in the source language maps to its `tuv` in the target language
  (`xml:lang`, or `lang` of TMX 1.1); inline codes inside `seg` (`bpt`, `ept`, `ph`, `it`,
  `ut`) are not text and are dropped.

The languages are the model's (`src_lang`, `tgt_lang`), matched on their base code (`de`
matches `de-DE` and `deu_Latn`). XML is read through defusedxml: entity declarations (the
billion-laughs bomb) and external references are refused, so a glossary uploaded to a server
cannot exhaust its memory or read its files. Any fault is one line naming the file and line.
"""

from __future__ import annotations

import csv
import re
import xml.sax
from pathlib import Path
from xml.sax.handler import ContentHandler

import defusedxml
import defusedxml.sax

from mt.errors import MtError
from mt.glossary import Entry, Glossary
from mt.glossary.words import STEMMERS, base_language
from mt.languages import ISO_639_1

FORMATS = ("tsv", "csv", "tbx", "tmx")
# A header cell: a language code (`de`, `pt-BR`, `deu_Latn`) a glossary could be in.
_CODES = frozenset(STEMMERS) | frozenset(ISO_639_1.values())
_CODE = re.compile(r"^([a-z]{2,3})(?:[-_][A-Za-z0-9]{2,8})*$")


def format_of(path: Path, data: bytes) -> str:
    """tsv, csv, tbx or tmx: by the file's extension, else by its first characters."""
    ext = path.suffix.lower().lstrip(".")
    if ext in FORMATS:
        return ext
    head = data[:2048].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"<"):
        return "tmx" if re.search(rb"<tmx[\s>]", head) else "tbx"
    first = head.split(b"\n", 1)[0]
    return "tsv" if b"\t" in first or b"," not in first else "csv"


def read_glossary(
    path: Path, src_lang: str | None = None, tgt_lang: str | None = None, fmt: str | None = None
) -> Glossary:
    """The glossary in `path` between `src_lang` and `tgt_lang` (None: as the file says)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise MtError(f"{path}: glossary file not found") from None
    except OSError as err:
        raise MtError(f"{path}: cannot read the glossary ({err.strerror})") from None
    return parse_glossary(data, str(path), src_lang, tgt_lang, fmt or format_of(Path(path), data))


def parse_glossary(
    data: bytes, name: str, src_lang: str | None, tgt_lang: str | None, fmt: str
) -> Glossary:
    """A glossary from the bytes of a file named `name` (in errors) in format `fmt`."""
    if fmt not in FORMATS:
        raise MtError(f"{name}: unknown glossary format {fmt!r} (known: {', '.join(FORMATS)})")
    if fmt in ("tbx", "tmx"):
        entries, src_lang, tgt_lang = _xml(data, name, fmt, src_lang, tgt_lang)
    else:
        entries, src_lang, tgt_lang = _table(_text(data, name), name, fmt, src_lang, tgt_lang)
    if not entries:
        raise MtError(f"{name}: the glossary holds no entry")
    return Glossary(entries, src_lang, tgt_lang, name)


def _text(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise MtError(f"{name}:{line}: not UTF-8 (byte {data[err.start]:#04x})") from None


def _same(a: str | None, b: str | None) -> bool:
    return base_language(a) == base_language(b)


def _header(row: list[str]) -> tuple[str, str] | None:
    """The languages a first row names, or None when it is an entry."""
    if len(row) != 2:
        return None
    codes = [_CODE.match(c) for c in row]
    if all(m is not None and base_language(m.group(0)) in _CODES for m in codes):
        return row[0], row[1]
    return None


def _table(
    text: str, name: str, fmt: str, src_lang: str | None, tgt_lang: str | None
) -> tuple[list[Entry], str | None, str | None]:
    if fmt == "csv":
        reader = csv.reader(text.splitlines(keepends=True), strict=True)
        rows: list[tuple[int, list[str]]] = []
        try:
            for row in reader:
                rows.append((reader.line_num, row))
        except csv.Error as err:
            raise MtError(f"{name}:{reader.line_num + 1}: not CSV ({err})") from None
    else:
        rows = [(i, line.split("\t")) for i, line in enumerate(text.splitlines(), 1)]
    rows = [(i, _trim([c.strip() for c in row])) for i, row in rows]
    rows = [(i, row) for i, row in rows if row]
    swap = False
    if rows and (langs := _header(rows[0][1])) is not None:
        line = rows[0][0]
        rows = rows[1:]
        if src_lang is None and tgt_lang is None:
            src_lang, tgt_lang = langs
        elif (src_lang is None or _same(langs[0], src_lang)) and _same(langs[1], tgt_lang):
            src_lang, tgt_lang = src_lang or langs[0], tgt_lang or langs[1]
        elif _same(langs[1], src_lang) and _same(langs[0], tgt_lang):
            swap = True
        else:
            raise MtError(
                f"{name}:{line}: the glossary is {langs[0]}-{langs[1]} but the model "
                f"translates {src_lang}-{tgt_lang}"
            )
    sep = "a comma" if fmt == "csv" else "a tab"
    entries = []
    for i, row in rows:
        if len(row) != 2:
            raise MtError(
                f"{name}:{i}: expected 2 columns (source term, target term) separated by "
                f"{sep}, got {len(row)}"
            )
        src, tgt = (row[1], row[0]) if swap else (row[0], row[1])
        for side, term in (("source", src), ("target", tgt)):
            if not term:
                raise MtError(f"{name}:{i}: the {side} term is empty")
        entries.append(Entry(src, tgt, f"{name}:{i}"))
    return entries, src_lang, tgt_lang


def _trim(row: list[str]) -> list[str]:
    while row and not row[-1]:
        row = row[:-1]
    return row


# -- TBX and TMX ---------------------------------------------------------------------------------

_INLINE = frozenset({"bpt", "ept", "ph", "it", "ut"})  # TMX native codes: not text


class _Terms(ContentHandler):
    """Collects, per entry (TBX concept or TMX unit), its terms as (language, text,
    preferred, line), streaming: a large termbase is never one tree in memory."""

    def __init__(self, fmt: str) -> None:
        super().__init__()
        self.fmt = fmt
        self.entry = ("conceptentry", "termentry") if fmt == "tbx" else ("tu",)
        self.unit = ("langsec", "langset", "tuv")  # the elements that name a language
        self.term = ("term", "seg")
        self.entries: list[tuple[int, list[tuple[str, str, bool, int]]]] = []
        self.langs: list[str] = []  # every language met, in order
        self.srclang: str | None = None  # TMX header's
        self.root: str | None = None
        self.locator: xml.sax.xmlreader.Locator | None = None
        self._terms: list[tuple[str, str, bool, int]] | None = None
        self._text: list[str] | None = None
        self._inline = 0
        self._note = False  # inside a TBX administrativeStatus note
        self._line = 0
        self._lang_stack: list[str] = []

    def setDocumentLocator(self, locator: xml.sax.xmlreader.Locator) -> None:  # noqa: N802
        self.locator = locator

    def line(self) -> int:
        return self.locator.getLineNumber() if self.locator is not None else 0

    def startElement(self, qname: str, attrs: xml.sax.xmlreader.AttributesImpl) -> None:  # noqa: N802
        name = qname.rsplit(":", 1)[-1].lower()
        if self.root is None:
            self.root = name
        if name == "header" and self.fmt == "tmx":
            self.srclang = attrs.get("srclang")
        lang = attrs.get("xml:lang") or (attrs.get("lang") if self.fmt == "tmx" else None)
        self._lang_stack.append(lang or (self._lang_stack[-1] if self._lang_stack else ""))
        if name in self.entry:
            self._terms = []
            self._line = self.line()
        elif name in self.unit and lang and lang not in self.langs:
            self.langs.append(lang)
        elif name in self.term and self._terms is not None:
            self._text = []
        elif name in _INLINE and self._text is not None:
            self._inline += 1
        elif name == "termnote" and attrs.get("type") == "administrativeStatus":
            self._text, self._note = [], True

    def characters(self, content: str) -> None:
        if self._text is not None and not self._inline:
            self._text.append(content)

    def endElement(self, qname: str) -> None:  # noqa: N802
        name = qname.rsplit(":", 1)[-1].lower()
        lang = self._lang_stack.pop()
        if name in _INLINE and self._inline:
            self._inline -= 1
        elif name == "termnote" and self._note:
            self._note = False
            if "".join(self._text or []).strip().startswith("deprecated") and self._terms:
                last = self._terms[-1]
                self._terms[-1] = (last[0], last[1], False, last[3])
            self._text = None
        elif name in self.term and self._text is not None and self._terms is not None:
            text = " ".join("".join(self._text).split())
            self._terms.append((lang, text, True, self.line()))
            self._text = None
        elif name in self.entry and self._terms is not None:
            self.entries.append((self._line, self._terms))
            self._terms = None


def _xml(
    data: bytes, name: str, fmt: str, src_lang: str | None, tgt_lang: str | None
) -> tuple[list[Entry], str | None, str | None]:
    handler = _Terms(fmt)
    try:  # defusedxml's defaults, spelled out: no entity declarations, no external references
        defusedxml.sax.parseString(data, handler, forbid_entities=True, forbid_external=True)
    except xml.sax.SAXParseException as err:
        msg = err.getMessage()
        raise MtError(f"{name}:{err.getLineNumber()}: not well-formed XML ({msg})") from None
    except defusedxml.DefusedXmlException as err:
        raise MtError(
            f"{name}:{handler.line()}: refused: {type(err).__name__} (a glossary needs no "
            "entity declarations or external references)"
        ) from None
    want = {"tbx": ("tbx", "martif"), "tmx": ("tmx",)}[fmt]
    if handler.root not in want:
        raise MtError(f"{name}:1: not a {fmt.upper()} file (its root element is <{handler.root}>)")
    src_lang, tgt_lang = _pair(handler, name, src_lang, tgt_lang)
    entries = []
    for line, terms in handler.entries:
        sources = [t for t in terms if _same(t[0], src_lang) and t[1]]
        targets = [t for t in terms if _same(t[0], tgt_lang) and t[1]]
        if not sources or not targets:
            continue
        preferred = next((t for t in targets if t[2]), targets[0])
        entries += [Entry(t[1], preferred[1], f"{name}:{t[3] or line}") for t in sources]
    if not entries and handler.entries:
        raise MtError(
            f"{name}: no {'concept' if fmt == 'tbx' else 'unit'} has terms in both {src_lang} "
            f"and {tgt_lang} (the file's languages: {', '.join(handler.langs) or 'none'})"
        )
    return entries, src_lang, tgt_lang


def _pair(
    handler: _Terms, name: str, src_lang: str | None, tgt_lang: str | None
) -> tuple[str | None, str | None]:
    """The languages to read: the model's where known, else the file's two."""
    if src_lang is not None and tgt_lang is not None:
        return src_lang, tgt_lang
    langs = list(dict.fromkeys(base_language(x) for x in handler.langs))
    if handler.srclang and handler.srclang != "*all*" and src_lang is None:
        src_lang = handler.srclang
    if src_lang is not None and tgt_lang is None:
        others = [x for x in langs if not _same(x, src_lang)]
        if len(others) == 1:
            return src_lang, others[0]
    elif len(langs) == 2:
        return (src_lang or langs[0]), (tgt_lang or langs[1])
    raise MtError(
        f"{name}: holds terms in {', '.join(langs) or 'no language'}: which two to read is "
        "not known"
    )

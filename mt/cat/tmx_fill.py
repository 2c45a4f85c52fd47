"""A TMX file with the target language's variants translated, as a translation memory keeps
them.

What `mt translate --input-format tmx` does. The whole file is parsed (header, notes, props,
the variants of other languages, comments, the doctype: all written back as they were). Each
`<tu>` with a variant (`<tuv>`) in the source language becomes a slot, read as the XLIFF path
reads a segment (mt.cat.fill: inline codes as tags, put back as copies of the source's
`<bpt>`/`<ept>`/`<ph>`/`<it>`/`<hi>`, each once). Its translation goes into the unit's
target-language variant: made after the unit's last `<tuv>` when there is none, filled when
its `<seg>` is empty. A variant that holds text is a translator's work and is kept, as the
XLIFF path keeps a target that holds text.

Which languages: the source is what the caller says, else the header's `srclang` (read as a
language: `de-DE` is `de`; `*all*` says none); the target is the caller's, written with the
code the file already uses for it (`en-GB`) or as given. A TMX file names no target.

A machine translation is marked as translation memories mark it: the new variant has
`creationtool="mt"`, its version and `creationdate` (a filled empty one `changedate`), and
the unit gets `<prop type="x-Origin">MachineTranslation</prop>` (Trados Studio's origin of a
unit, which other tools carry along as a user-defined property) unless it already says its
origin. TMX 1.4 has no review state; a CAT tool that imports the file sees the tool and the
origin.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import Any

from mt import __version__
from mt.cat import primary
from mt.cat.fill import Slot, make_slot, write_slot
from mt.cat.xliff import empty
from mt.cat.xmlio import XML_LANG, declaration_of, document_bytes, localname, parse_document
from mt.errors import MtError

TOOL = "mt"
ORIGIN = ("x-Origin", "MachineTranslation")


def _children(el: Any, name: str) -> list[Any]:
    return [c for c in el if localname(c) == name]


class TmxFill:
    """A parsed TMX file, its slots once `choose` names the languages, and the file with
    them filled."""

    def __init__(self, data: bytes, name: str) -> None:
        self.name = name
        self.tree = parse_document(data, name)
        self.declaration = declaration_of(data)
        root = self.tree.getroot()
        if localname(root) != "tmx":
            raise MtError(f"{name}: not a TMX file (its root element is <{localname(root)}>)")
        header, body = _children(root, "header"), _children(root, "body")
        if not header:
            raise MtError(f"{name}:{root.sourceline}: <tmx> without <header>")
        if not body:
            raise MtError(f"{name}:{root.sourceline}: <tmx> without <body>")
        self.body = body[0]
        srclang = header[0].get("srclang") or ""
        self.srclang: str | None = None if srclang.lower() in ("", "*all*") else srclang
        self.units = [tu for tu in self.body.iter() if localname(tu) == "tu"]
        self.variants = [self._variants(tu) for tu in self.units]  # checked before any work
        self.slots: list[Slot] = []
        self.kept = self.skipped = 0
        self.languages: tuple[str, str] | None = None  # (source, target code written)

    def _variants(self, tu: Any) -> list[tuple[str, Any, Any]]:
        """(language code, `<tuv>`, its `<seg>`) of each variant of `tu`."""
        out = []
        for tuv in _children(tu, "tuv"):
            code = tuv.get(XML_LANG) or tuv.get("lang") or ""
            if not code:
                raise MtError(f"{self.name}:{tuv.sourceline}: <tuv> without xml:lang")
            seg = _children(tuv, "seg")
            if not seg:
                raise MtError(
                    f'{self.name}:{tuv.sourceline}: <tuv xml:lang="{code}"> without <seg>'
                )
            out.append((code, tuv, seg[0]))
        return out

    def choose(self, src: str, tgt: str) -> None:
        """The slots of translating `src` into `tgt`: each unit's `src` variant whose unit has
        no `tgt` variant, or an empty one."""
        if primary(src) == primary(tgt):
            raise MtError(f"{self.name}: the source and target languages are both {src}")
        written = Counter(c for vs in self.variants for c, _, _ in vs if primary(c) == primary(tgt))
        code = written.most_common(1)[0][0] if written else tgt
        self.languages = (src, code)
        self.slots, self.kept, self.skipped = [], 0, 0
        for tu, variants in zip(self.units, self.variants):
            source = next((v for v in variants if primary(v[0]) == primary(src)), None)
            if source is None:
                self.skipped += 1
                continue
            target = next((v for v in variants if primary(v[0]) == primary(tgt)), None)
            if empty(source[2]):
                continue
            if target is not None and not empty(target[2]):
                self.kept += 1
                continue
            # segment: the target variant (None: to make) and the source's
            tuv = target[1] if target is not None else None
            self.slots.append(make_slot(source[2], "tmx", self.name, (tuv, source[1]), tu))

    def fill(self, texts: list[str | None]) -> int:
        """Write each slot's translation (None: leave the unit as it was) into the file; how
        many variants were written."""
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")  # TMX's date format
        done = 0
        for slot, text in zip(self.slots, texts):
            if text is None:
                continue
            tuv, source = slot.segment
            if tuv is None:
                tuv = self._variant(slot.unit, source)
                tuv.set("creationdate", stamp)
            else:
                tuv.set("changedate", stamp)
            tuv.set("creationtool", TOOL)
            tuv.set("creationtoolversion", __version__)
            write_slot(_children(tuv, "seg")[0], slot, text)
            _origin(slot.unit)
            done += 1
        return done

    def _variant(self, tu: Any, source: Any) -> Any:
        """A new `<tuv>` of the target language after the unit's last one, its `<seg>` laid
        out as the source variant's, the file's indentation kept."""
        assert self.languages is not None
        tuvs = _children(tu, "tuv")
        last = tuvs[-1]
        tuv = last.makeelement(last.tag, {XML_LANG: self.languages[1]})
        source_seg = _children(source, "seg")[0]
        tuv.text = source.text if source.text and not source.text.strip() else None
        seg = tuv.makeelement(source_seg.tag, {})
        seg.tail = source_seg.tail if source_seg.tail and not source_seg.tail.strip() else None
        tuv.append(seg)
        before = last.getprevious()
        gap = before.tail if before is not None else tu.text
        last.addnext(tuv)
        tuv.tail, last.tail = last.tail, gap
        return tuv

    def report(self, filled: int) -> str:
        src = primary(self.languages[0]) if self.languages else "source"
        return (
            f"{self.name}: {filled} variant(s) filled, {self.kept} kept (already translated), "
            f"{self.skipped} unit(s) with no {src} variant"
        )

    def to_bytes(self) -> bytes:
        return document_bytes(self.tree, self.declaration)


def _origin(tu: Any) -> None:
    """`<prop type="x-Origin">MachineTranslation</prop>` among the unit's props, before its
    variants (TMX: notes and props first), unless it says its origin already."""
    if any(p.get("type", "").lower() == ORIGIN[0].lower() for p in _children(tu, "prop")):
        return
    first = _children(tu, "tuv")[0]
    prop = first.makeelement(first.tag[: -len("tuv")] + "prop", {"type": ORIGIN[0]})
    prop.text = ORIGIN[1]
    before = first.getprevious()
    prop.tail = before.tail if before is not None else tu.text
    first.addprevious(prop)

"""An XLIFF document with its empty targets translated, as a CAT tool takes it back.

What `mt translate --input-format xliff` does. The whole document is parsed (comments,
processing instructions, CDATA, namespaces of other tools, the doctype: all written back as
they were), and each translatable segment without a target (or with an empty one) becomes a
slot: its source as one line for the model, inline codes as tags (mt.cat.inline). Filled
back, the target holds the translation with the source's codes (copied, every one exactly
once, valid whatever the model wrote), placed right after the source as both versions order
them, and is marked machine-translated, to be reviewed:

- XLIFF 1.2: `<target state="needs-review-translation" state-qualifier="leveraged-mt">`; a
  unit cut into `<mrk mtype="seg">` segments gets a target with the same `<mrk>`s;
- XLIFF 2.x: the `<segment>`'s `state="translated"` (2.x has no state between "translated"
  and the reviewer's "reviewed"; a state already past it is never lowered).

Targets that hold text are a translator's work and are kept; so are units marked
`translate="no"`.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from mt.cat import primary
from mt.cat.inline import Flat, build, choose_names, events_of, flatten, number, repair
from mt.cat.xliff import (
    UNIT,
    Segment,
    empty,
    languages,
    segments,
    translatable,
    version_of,
)
from mt.cat.xmlio import declaration_of, document_bytes, localname, parse_document
from mt.errors import MtError

STATE_1 = {"state": "needs-review-translation", "state-qualifier": "leveraged-mt"}
_LEAD = re.compile(r"^[ \t\r\n]*")
_TRAIL = re.compile(r"[ \t\r\n]*$")


@dataclass
class Slot:
    """One segment to translate (of an XLIFF document, or of a TMX file: mt.cat.tmx_fill)."""

    text: str  # the line the model reads
    flat: Flat  # its source's codes, numbered
    names: tuple[str, str]  # the tag names of its codes
    segment: Any  # XLIFF: its Segment; TMX: the unit's target <tuv>, None until made
    unit: Any  # the <trans-unit>, <unit> or <tu>
    lead: str  # white space before and after the source's text, given to the target too
    trail: str
    where: str  # `file:line` of the source


def make_slot(source: Any, dialect: str, name: str, segment: Any, unit: Any) -> Slot:
    """The slot of the segment element `source` (a `<source>`, `<mrk>` or `<seg>`): its
    text for the model, inline codes as tags (mt.cat.inline), and the white space at its
    edges, which the model never sees and the target gets back."""
    flat = number(flatten(source, dialect, name))
    literal = flat.literal()
    names = choose_names(literal)
    lead = _LEAD.match(literal)[0] if flat.pieces and isinstance(flat.pieces[0], str) else ""
    trail = _TRAIL.search(literal)[0] if isinstance(flat.pieces[-1], str) else ""
    where = f"{name}:{source.sourceline}"
    return Slot(flat.text(names), flat, names, segment, unit, lead, trail, where)


def write_slot(target: Any, slot: Slot, text: str) -> None:
    """The translation `text` as the content of `target`, with every code of the source
    once, valid whatever the model wrote (mt.cat.inline.repair)."""
    events = repair(events_of(text, slot.flat, slot.names), slot.flat.codes)
    if slot.lead:
        events.insert(0, ("text", slot.lead))
    if slot.trail:
        events.append(("text", slot.trail))
    build(target, events)


class XliffFill:
    """A parsed XLIFF document, its slots, and the document with them filled."""

    def __init__(self, data: bytes, name: str) -> None:
        self.name = name
        self.tree = parse_document(data, name)
        self.declaration = declaration_of(data)
        root = self.tree.getroot()
        self.version = version_of(root, name)
        self.dialect = "xliff2" if self.version == "2" else "xliff1"
        if self.version == "2":
            found = [languages(root, "2", name)]
        else:
            files = [el for el in root if localname(el) == "file"]
            found = [languages(f, "1", name) for f in files]
        pairs = {(primary(s), primary(t)) for s, t in found}
        if len(pairs) > 1:
            listed = ", ".join(f"{s}->{t}" for s, t in sorted(pairs))
            raise MtError(f"{name}: its <file>s translate different pairs ({listed})")
        if not found:
            raise MtError(f"{name}: no <file> in this XLIFF document")
        self.languages: tuple[str, str] = found[0]
        self.slots: list[Slot] = []
        self.kept = self.skipped = 0
        for unit in root.iter(f"{{*}}{UNIT[self.version]}"):
            if not translatable(unit):
                self.skipped += 1
                continue
            for seg in segments(unit, self.version):
                self._add(unit, seg)

    def _add(self, unit: Any, seg: Segment) -> None:
        if seg.source is None:
            raise MtError(f"{self.name}:{unit.sourceline}: <{localname(unit)}> without <source>")
        if empty(seg.source):
            return
        if not empty(seg.target):
            self.kept += 1
            return
        self.slots.append(make_slot(seg.source, self.dialect, self.name, seg, unit))

    def fill(self, texts: list[str | None]) -> int:
        """Write each slot's translation (None: leave it empty) into the document; how many
        targets were written."""
        done = 0
        for slot, text in zip(self.slots, texts):
            if text is None:
                continue
            write_slot(self._target(slot), slot, text)
            self._mark(slot)
            done += 1
        return done

    def _target(self, slot: Slot) -> Any:
        """The element the slot's translation goes into, made where the format puts it."""
        seg, unit = slot.segment, slot.unit
        if seg.target is not None:
            return seg.target
        if self.version == "2":
            target = seg.source.makeelement(_sibling_tag(seg.source, "target"), {})
            seg.source.addnext(target)
            target.tail = seg.source.tail
            seg.target = target
            return target
        if not seg.mid:  # a unit of one segment
            after = _last(unit, ("source", "seg-source"))
            target = after.makeelement(_sibling_tag(after, "target"), {})
            after.addnext(target)
            target.tail = after.tail
            seg.target = seg.holder = target
            return target
        target = _last(unit, ("target",))
        if localname(target) != "target":  # the segmented unit's target: seg-source's shape
            seg_source = _last(unit, ("seg-source",))
            target = copy.deepcopy(seg_source)
            target.tag = _sibling_tag(seg_source, "target")
            for m in target.iter():
                if localname(m) == "mrk" and m.get("mtype") == "seg":
                    build(m, [])
            seg_source.addnext(target)
        mark = next(
            (
                m
                for m in target.iter()
                if localname(m) == "mrk" and m.get("mtype") == "seg" and m.get("mid") == seg.mid
            ),
            None,
        )
        if mark is None:
            mark = target.makeelement(seg.source.tag, dict(seg.source.attrib))
            target.append(mark)
        seg.target, seg.holder = mark, target
        return mark

    def _mark(self, slot: Slot) -> None:
        """Machine-translated, to be reviewed, in the version's own terms."""
        if self.version == "1":
            holder = slot.segment.holder
            for key, value in STATE_1.items():
                holder.set(key, value)
        elif slot.segment.holder.get("state") in (None, "initial"):
            slot.segment.holder.set("state", "translated")

    def report(self, filled: int) -> str:
        return (
            f"{self.name}: {filled} target(s) filled, {self.kept} kept (already translated), "
            f"{self.skipped} unit(s) not to translate"
        )

    def to_bytes(self) -> bytes:
        return document_bytes(self.tree, self.declaration)


def _sibling_tag(el: Any, name: str) -> str:
    """`name` in the namespace of `el`."""
    return re.sub(r"[^}]+$", name, el.tag) if el.tag.startswith("{") else name


def _last(unit: Any, names: tuple[str, ...]) -> Any:
    """The last child of `unit` named one of `names` (its `<source>` at least)."""
    found = [c for c in unit if localname(c) in names]
    return found[-1] if found else unit

"""XLIFF 1.2 and 2.x documents: their structure, and their segments as sentence pairs.

XLIFF 1.2 (`urn:oasis:names:tc:xliff:document:1.2`): `<file source-language target-language>`
holds `<trans-unit>`s (in `<group>`s), each a `<source>` and maybe a `<target>`; a unit cut into
sentences has a `<seg-source>` whose `<mrk mtype="seg" mid>` elements are the segments, and
its target has the same `<mrk>`s. XLIFF 2.x (`...:document:2.0`, versions 2.0-2.2): the root
has `srcLang` and `trgLang`; a `<unit>` holds `<segment>`s, each a `<source>` and maybe a
`<target>`, and `<ignorable>`s (white space between them). Either version marks what is not
to be translated with `translate="no"` on a unit or its group or file, which is skipped.

`segments(unit, version)` is the one reading of a unit, for training pairs here and for
filling targets (mt.cat.fill). As training data every translatable segment needs its target:
an untranslated segment is a line naming the unit (it is `mt translate`'s input, not data).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mt.cat import primary
from mt.cat.inline import flatten, pair_texts
from mt.cat.xmlio import events, forget, localname
from mt.errors import MtError

UNIT = {"1": "trans-unit", "2": "unit"}


@dataclass
class Segment:
    """One segment of a unit: its source element, its target element (None when absent),
    and the element `state` belongs on (1.2: the target; 2.x: the `<segment>`)."""

    source: Any
    target: Any
    holder: Any
    mid: str = ""  # 1.2 segmented units: the `<mrk mtype="seg">`'s mid


def version_of(root: Any, path: Path | str) -> str:
    """'1' or '2' for an `<xliff>` root, from its version attribute or namespace."""
    if localname(root) != "xliff":
        raise MtError(f"{path}: not an XLIFF file (its root element is <{localname(root)}>)")
    version = root.get("version") or ""
    ns = root.tag[1:].split("}")[0] if root.tag.startswith("{") else ""
    if version.startswith("2") or ns.endswith(":2.0"):
        return "2"
    if version.startswith("1") or ns.endswith(":1.2"):
        return "1"
    raise MtError(f"{path}:{root.sourceline}: XLIFF version {version or '?'} is not 1.x or 2.x")


def languages(el: Any, version: str, path: Path | str) -> tuple[str, str]:
    """The (source, target) language codes of a 1.2 `<file>` or a 2.x root, as written."""
    keys = ("source-language", "target-language") if version == "1" else ("srcLang", "trgLang")
    src, tgt = el.get(keys[0]), el.get(keys[1])
    for key, value in zip(keys, (src, tgt)):
        if not value:
            raise MtError(f"{path}:{el.sourceline}: <{localname(el)}> has no {key}")
    return src, tgt


def direction(found: tuple[str, str], src_lang: str, tgt_lang: str, where: str) -> bool:
    """Whether the file's pair is the wanted one reversed (a parallel text serves both
    directions); a file of other languages is an error naming both pairs."""
    have = (primary(found[0]), primary(found[1]))
    want = (primary(src_lang), primary(tgt_lang))
    if have == want or have == want[::-1]:
        return have != want
    raise MtError(
        f"{where}: the file translates {found[0]} -> {found[1]}, not the pair "
        f"{want[0]}-{want[1]} (language codes are read as languages: de-DE is de)"
    )


def translatable(el: Any) -> bool:
    """`translate="no"` on the element or the nearest ancestor that says either way."""
    while el is not None:
        value = el.get("translate")
        if value is not None:
            return value != "no"
        el = el.getparent()
    return True


def _child(el: Any, name: str) -> Any:
    return next((c for c in el if localname(c) == name), None)


def _seg_marks(el: Any) -> list[Any]:
    return [m for m in el.iter() if localname(m) == "mrk" and m.get("mtype") == "seg"]


def segments(unit: Any, version: str) -> list[Segment]:
    """The segments of a `<trans-unit>` (1.2) or `<unit>` (2.x), in order."""
    if version == "2":
        out = []
        for seg in unit:
            if localname(seg) == "segment":
                out.append(Segment(_child(seg, "source"), _child(seg, "target"), seg))
        return out
    source, target = _child(unit, "source"), _child(unit, "target")
    seg_source = _child(unit, "seg-source")
    marks = _seg_marks(seg_source) if seg_source is not None else []
    if not marks:
        return [Segment(source, target, target)]
    done = {m.get("mid"): m for m in _seg_marks(target)} if target is not None else {}
    return [Segment(m, done.get(m.get("mid")), target, m.get("mid") or "") for m in marks]


def empty(el: Any) -> bool:
    """A segment element with neither text nor inline codes."""
    return el is None or (not (el.text or "").strip() and len(el) == 0)


def xliff_pairs(path: Path, src_lang: str, tgt_lang: str) -> Iterator[tuple[str, str]]:
    """(source, target) of each translatable segment, streamed, `src_lang`'s side first."""
    version = ""
    reverse = False
    for event, el in events(path):
        name = localname(el)
        if event == "start":
            if el.getparent() is None:
                version = version_of(el, path)
                if version == "2":
                    reverse = direction(languages(el, version, path), src_lang, tgt_lang, str(path))
            elif version == "1" and name == "file":
                found = languages(el, version, path)
                reverse = direction(found, src_lang, tgt_lang, f"{path}:{el.sourceline}")
            continue
        if name != UNIT.get(version):
            continue
        if translatable(el):
            yield from _unit_pairs(el, version, path, reverse)
        forget(el)


def _unit_pairs(unit: Any, version: str, path: Path, reverse: bool) -> Iterator[tuple[str, str]]:
    dialect = "xliff2" if version == "2" else "xliff1"
    where = str(path)
    for seg in segments(unit, version):
        if seg.source is None:
            raise MtError(f"{path}:{unit.sourceline}: <{localname(unit)}> without <source>")
        if empty(seg.source):
            continue
        if empty(seg.target):
            uid = unit.get("id")
            named = f' id="{uid}"' if uid else ""
            raise MtError(
                f"{path}:{seg.source.sourceline}: <{localname(unit)}{named}> has a segment "
                "without a target (untranslated: `mt translate --input-format xliff` fills "
                "it; as data every segment needs one)"
            )
        src, tgt = flatten(seg.source, dialect, where), flatten(seg.target, dialect, where)
        yield pair_texts(tgt, src) if reverse else pair_texts(src, tgt)

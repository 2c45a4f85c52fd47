"""TMX 1.4 (and 1.1-1.3) translation memories as sentence pairs.

A `<tu>` holds one `<tuv>` per language, each with its `<seg>`; a file may hold many
languages. The pair is picked by the `xml:lang` of each variant (TMX 1.1's `lang` too) read
as a language (`de-DE` is `de`), so one memory serves both directions. A unit without one of
the two languages is a broken line of the corpus: the first unit's says what the file holds
instead (almost always the wrong file), a later one names its line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mt.cat import primary
from mt.cat.inline import flatten, pair_texts
from mt.cat.xmlio import XML_LANG, events, forget, localname
from mt.errors import MtError


def tmx_pairs(path: Path, src_lang: str, tgt_lang: str) -> Iterator[tuple[str, str]]:
    """(source, target) of each `<tu>`, streamed; inline codes as tags (mt.cat.inline)."""
    want = (primary(src_lang), primary(tgt_lang))
    seen = 0
    for event, el in events(path):
        name = localname(el)
        if event == "start":
            if el.getparent() is None and name != "tmx":
                raise MtError(f"{path}: not a TMX file (its root element is <{name}>)")
            continue
        if name == "tu":
            yield _pair(el, path, want, first=seen == 0)
            seen += 1
            forget(el)
        elif name == "header":
            forget(el)


def _pair(tu: Any, path: Path, want: tuple[str, str], first: bool) -> tuple[str, str]:
    segs: dict[str, Any] = {}
    codes: list[str] = []
    for tuv in tu:
        if localname(tuv) != "tuv":
            continue
        code = tuv.get(XML_LANG) or tuv.get("lang") or ""
        if not code:
            raise MtError(f"{path}:{tuv.sourceline}: <tuv> without xml:lang")
        seg = next((c for c in tuv if localname(c) == "seg"), None)
        if seg is None:
            raise MtError(f'{path}:{tuv.sourceline}: <tuv xml:lang="{code}"> without <seg>')
        codes.append(code)
        segs.setdefault(primary(code), seg)
    missing = [lang for lang in want if lang not in segs]
    if missing and first:
        held = ", ".join(codes) or "no language"
        raise MtError(
            f"{path}: its first <tu> holds {held}, not the pair {want[0]}-{want[1]} the "
            "config asks for (xml:lang is read as a language: de-DE is de)"
        )
    if missing:
        raise MtError(
            f"{path}:{tu.sourceline}: <tu> has no {missing[0]!r} variant (it has "
            f"{', '.join(codes) or 'none'})"
        )
    where = str(path)
    return pair_texts(flatten(segs[want[0]], "tmx", where), flatten(segs[want[1]], "tmx", where))

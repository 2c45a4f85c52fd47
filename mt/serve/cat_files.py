"""An uploaded XLIFF or TMX file read into its segments and written back filled, as
`mt translate --input-format xliff | tmx` fills it (mt.cat.fill, mt.cat.tmx_fill).

Its languages: an XLIFF file names both, which must be the request's (`source` may be
`auto`: the file's is taken); a TMX file names its source at most (its header's `srclang`),
the request's `target` is the variant added. The file is parsed as mt.cat.xmlio parses every
CAT file: no DTD loaded, nothing fetched, no entity expanded (libxml2 refuses a nested
entity's amplification before it grows), so an upload can neither read a file of the
server (XXE) nor blow up its memory. Every segment to translate counts against the
document's limits as it is gathered, so a file over them is refused before any work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from mt.cat import primary
from mt.errors import MtError


class Gather(Protocol):
    """What collects a document's texts (mt.serve.documents.Texts)."""

    def unit(self, text: str) -> Callable[[], str]: ...


def read_cat(
    data: bytes, suffix: str, texts: Gather, languages: tuple[str, str], name: str
) -> tuple[Callable[[], bytes], str]:
    """How to write the file `data` back once `texts` hold the translations of its
    segments, and the source language it is read in."""
    source, target = languages
    if suffix == ".tmx":
        from mt.cat.tmx_fill import TmxFill

        doc = TmxFill(data, name)
        src = doc.srclang if source == "auto" else source
        if src is None:
            raise MtError(f"{name}: its header's srclang is *all*: give the source language")
        if not target:
            raise MtError(f"{name}: a TMX file names no target language: give it")
        doc.choose(primary(src), primary(target))
    else:
        from mt.cat.fill import XliffFill

        doc = XliffFill(data, name)
        src, tgt = doc.languages
        if target and primary(target) != primary(tgt):
            raise MtError(f"{name}: its target language is {tgt}, not {target}")
        if source != "auto" and primary(source) != primary(src):
            raise MtError(f"{name}: its source language is {src}, not {source}")
    parts = [texts.unit(slot.text) for slot in doc.slots]

    def write() -> bytes:
        doc.fill([part() for part in parts])
        return doc.to_bytes()

    return write, primary(src)

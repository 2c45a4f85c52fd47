"""The files translators have: TMX translation memories and XLIFF bilingual documents.

CAT tools (Trados, memoQ, OmegaT, Phrase, Okapi) exchange translation memories as TMX 1.4 and
documents to translate as XLIFF 1.2 or 2.x. Here they are read as parallel text (training, dev
and eval data: `data.format: tmx | xliff`) and an XLIFF file's targets are filled
(`mt translate --input-format xliff`):

- xmlio.py: the one way these files are parsed: streamed, no DTD, no entity expanded (XXE and
  "billion laughs" are refused by construction), a broken file one line naming file and line;
- inline.py: inline codes (`<ph>`, `<bpt>`/`<ept>`, `<g>`, `<x/>`, `<pc>`, `<sc>`/`<ec>` ...)
  as tags in the segment's text (`<g1>...</g1>`, `<x2/>`), which the span machinery
  (mt.spans) keeps through training (`data.protect`) and translation, and back again;
- tmx.py, xliff.py: the pairs of each format, the language pair read from the file's own codes;
- fill.py: an XLIFF document with its empty targets filled, everything else kept.
"""

from __future__ import annotations

import re
from pathlib import Path

FORMATS = ("tmx", "xliff")
# The tag names of inline codes (mt.cat.inline): pairs `<g1>...</g1>`, lone codes `<x2/>`; a
# segment whose own text holds such a tag (`&lt;g1&gt;` in the file) takes the next names.
NAMES = (("g", "x"), ("g_", "x_"), ("g__", "x__"))
_ANY_TAG = re.compile(r"</?[gx]_{0,2}\d+/?>")
SUFFIXES = {".tmx": "tmx", ".xlf": "xliff", ".xliff": "xliff", ".sdlxliff": "xliff"}


def primary(code: str) -> str:
    """The language of a BCP 47 / ISO code as a config names it: `de-DE`, `de_DE` and `DE`
    are `de`; `zh-Hant-TW` is `zh`."""
    return code.replace("_", "-").split("-")[0].strip().lower()


def strip_codes(text: str) -> str:
    """`text` without its code tags, white space closed up: what BLEU compares."""
    return " ".join(_ANY_TAG.sub(" ", text).split()) if "<" in text else text


def format_of(path: Path) -> str | None:
    """`tmx` or `xliff` for a file named so (`.tmx`, `.xlf`, `.xliff`, `.sdlxliff`, and each
    with `.gz`), else None: how `mt eval --src` tells a bilingual file from plain text."""
    name = path.name.lower().removesuffix(".gz")
    return next((f for s, f in SUFFIXES.items() if name.endswith(s)), None)

"""TMX and XLIFF files made from Multi30k slices, for the tests of mt/cat (written by the
tests, never committed).

Every third pair gets inline codes on both sides, as a CAT tool exports formatted text: its
first word bold (a pair of codes around it) and a placeholder at the end (a lone code). So
`CODED` pairs hold `<g1>word</g1> ... <x2/>` once read, on both sides alike.
"""

from __future__ import annotations

import gzip
from html import escape
from pathlib import Path

XLIFF1 = "urn:oasis:names:tc:xliff:document:1.2"
XLIFF2 = "urn:oasis:names:tc:xliff:document:2.0"


def multi30k(root: Path, split: str, n: int, src: str = "de", tgt: str = "en") -> list[tuple]:
    """The first `n` (source, target) pairs of a Multi30k split."""

    def read(lang: str) -> list[str]:
        with gzip.open(root / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
            return [line.rstrip("\n") for _, line in zip(range(n), f)]

    return list(zip(read(src), read(tgt)))


def coded(i: int) -> bool:
    return i % 3 == 0


def _inline(text: str, pair: tuple[str, str], lone: str) -> str:
    """`text` escaped, its first word between the `pair` of code strings, `lone` at its end."""
    first, _, rest = text.partition(" ")
    return f"{pair[0]}{escape(first, False)}{pair[1]} {escape(rest, False)}{lone}"


def tmx_seg(i: int, text: str) -> str:
    if not coded(i) or i < 0:
        return escape(text, False)
    pair = ('<bpt i="1" x="1">&lt;b&gt;</bpt>', '<ept i="1">&lt;/b&gt;</ept>')
    return _inline(text, pair, '<ph x="2">{0}</ph>')


def write_tmx(
    path: Path,
    pairs: list[tuple[str, str | None]],
    langs: tuple[str, str] = ("de-DE", "en-GB"),
    codes: bool = True,
) -> Path:
    """TMX 1.4; `codes` False writes plain segments only; a target None is a unit without
    that variant (to be translated)."""
    units = "".join(
        f'  <tu tuid="{i}">\n    <tuv xml:lang="{langs[0]}"><seg>{tmx_seg(k, s)}</seg></tuv>\n'
        + (f'    <tuv xml:lang="{langs[1]}"><seg>{tmx_seg(k, t)}</seg></tuv>\n' if t else "")
        + "  </tu>\n"
        for i, (s, t) in enumerate(pairs)
        for k in [i if codes else -1]
    )
    text = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE tmx SYSTEM "tmx14.dtd">\n'
        '<tmx version="1.4">\n  <header creationtool="tests" creationtoolversion="1" '
        f'segtype="sentence" o-tmf="none" adminlang="en" srclang="{langs[0]}" '
        f'datatype="plaintext"/>\n<body>\n{units}</body>\n</tmx>\n'
    )
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.write(text)
    return path


def xliff1_seg(i: int, text: str) -> str:
    return _inline(text, ('<g id="1">', "</g>"), '<x id="2"/>') if coded(i) else escape(text)


def write_xliff1(
    path: Path,
    pairs: list[tuple[str, str | None]],
    langs: tuple[str, str] = ("de-DE", "en-US"),
) -> Path:
    """XLIFF 1.2; a pair whose target is None is a unit without one (to be translated)."""
    units = []
    for i, (s, t) in enumerate(pairs):
        target = "" if t is None else f"\n        <target>{xliff1_seg(i, t)}</target>"
        units.append(
            f'      <trans-unit id="u{i}">\n        <source>{xliff1_seg(i, s)}</source>'
            f"{target}\n        <note>unit {i}</note>\n      </trans-unit>\n"
        )
    text = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<xliff version="1.2" xmlns="{XLIFF1}">\n'
        f'  <file original="m30k.txt" source-language="{langs[0]}" '
        f'target-language="{langs[1]}" datatype="plaintext">\n    <body>\n'
        f"{''.join(units)}    </body>\n  </file>\n</xliff>\n"
    )
    path.write_text(text, encoding="utf-8")
    return path


def xliff2_seg(i: int, text: str) -> str:
    if not coded(i):
        return escape(text)
    return _inline(
        text,
        ('<pc id="1" dataRefStart="d1" dataRefEnd="d2">', "</pc>"),
        '<ph id="2" dataRef="d3"/>',
    )


def write_xliff2(
    path: Path,
    pairs: list[tuple[str, str | None]],
    langs: tuple[str, str] = ("de", "en"),
) -> Path:
    """XLIFF 2.0, a unit of one segment per pair; a target None is left out."""
    units = []
    for i, (s, t) in enumerate(pairs):
        target = "" if t is None else f"<target>{xliff2_seg(i, t)}</target>"
        data = (
            '<originalData><data id="d1">&lt;b&gt;</data><data id="d2">&lt;/b&gt;</data>'
            '<data id="d3">{0}</data></originalData>\n      '
            if coded(i)
            else ""
        )
        units.append(
            f'    <unit id="u{i}">\n      {data}<segment id="s{i}">\n'
            f"        <source>{xliff2_seg(i, s)}</source>{target}\n      </segment>\n    </unit>\n"
        )
    text = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<xliff xmlns="{XLIFF2}" version="2.0" '
        f'srcLang="{langs[0]}" trgLang="{langs[1]}">\n  <file id="f1">\n{"".join(units)}'
        "  </file>\n</xliff>\n"
    )
    path.write_text(text, encoding="utf-8")
    return path

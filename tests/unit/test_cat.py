"""TMX and XLIFF as data (mt/cat): Multi30k slices written as CAT tools write them read back
as the same pairs, inline codes as tags numbered alike on both sides, the pair from the
file's own language codes, every broken file one line naming file and line, no entity
expanded, and targets rebuilt valid whatever a translation did to the tags."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree
from support.cat_files import coded, multi30k, write_tmx, write_xliff1, write_xliff2

import mt.cat.tmx
from mt.cat import format_of, primary, strip_codes
from mt.cat.bilingual import read_bilingual
from mt.cat.fill import XliffFill
from mt.cat.inline import build, events_of, flatten, number, repair
from mt.cat.tmx import tmx_pairs
from mt.cat.xliff import xliff_pairs
from mt.cat.xmlio import localname
from mt.config import CorpusConfig, DataConfig
from mt.data.corpus import pair_chunks, train_sources
from mt.errors import MtError
from mt.spans import mask_pair

N = 60


@pytest.fixture(scope="module")
def pairs(multi30k_dir: Path) -> list[tuple[str, str]]:
    return multi30k(multi30k_dir, "val", N)


def expected(i: int, text: str) -> str:
    """A Multi30k line as the reader gives it: codes as tags on every third."""
    if not coded(i):
        return text
    first, _, rest = text.partition(" ")
    return f"<g1>{first}</g1> {rest}<x2/>"


def want(pairs):
    return [(expected(i, s), expected(i, t)) for i, (s, t) in enumerate(pairs)]


@pytest.mark.parametrize("name", ["m.tmx", "m.tmx.gz", "m12.xlf", "m20.xlf"])
def test_a_multi30k_slice_reads_back_as_its_pairs(pairs, tmp_path, name) -> None:
    path = tmp_path / name
    if "tmx" in name:
        write_tmx(path, pairs)
        read = tmx_pairs
    else:
        (write_xliff1 if "12" in name else write_xliff2)(path, pairs)
        read = xliff_pairs
    assert list(read(path, "de", "en")) == want(pairs)
    # The same file serves the other direction: parallel text has no direction.
    assert list(read(path, "en", "de")) == [(t, s) for s, t in want(pairs)]


def test_a_corpus_of_format_tmx_is_read_in_chunks(pairs, tmp_path) -> None:
    write_tmx(tmp_path / "tm.tmx", pairs)
    cfg = DataConfig(root=str(tmp_path), corpora=[CorpusConfig(name="tm.tmx", format="tmx")])
    (source,) = train_sources(cfg)
    assert source.paths() == [tmp_path / "tm.tmx"]
    chunks = list(pair_chunks(source, chunk=7, limit=50))
    assert [len(s) for s, _ in chunks] == [7] * 7 + [1]
    got = [p for s, t in chunks for p in zip(s, t)]
    assert got == want(pairs)[:50]


def test_codes_become_the_same_placeholders_on_both_sides(pairs, tmp_path) -> None:
    """`data.protect` masks a pair's tags: each code is one reserved piece on both sides."""
    write_tmx(tmp_path / "tm.tmx", pairs)
    src, tgt = next(tmx_pairs(tmp_path / "tm.tmx", "de", "en"))  # pair 0 has codes
    msrc, mtgt = mask_pair(src, tgt)
    pieces = re.compile(r"｟\d+｠")
    assert pieces.findall(msrc) == ["｟0｠", "｟1｠", "｟2｠"]
    assert sorted(pieces.findall(mtgt)) == ["｟0｠", "｟1｠", "｟2｠"]
    assert "<" not in msrc + mtgt


def test_codes_are_matched_by_id_and_content_not_by_position() -> None:
    """The target's codes take the numbers of their twins (TMX's x and i, XLIFF's id, a
    native code by its content), whatever their order; one without a twin gets a new one."""
    s = etree.fromstring(
        '<seg>Click <bpt i="1">&lt;b&gt;</bpt>Save<ept i="1">&lt;/b&gt;</ept> now'
        "<ph>{0}</ph><ph>%s</ph></seg>"
    )
    t = etree.fromstring(
        '<seg><ph>%s</ph> Klicken Sie <bpt i="1">&lt;b&gt;</bpt>Speichern<ept i="1">'
        "&lt;/b&gt;</ept><ph>{0}</ph><ph>&lt;br/&gt;</ph></seg>"
    )
    fs = number(flatten(s, "tmx", "f"))
    ft = number(flatten(t, "tmx", "f"), like=fs)
    assert fs.text() == "Click <g1>Save</g1> now<x2/><x3/>"
    assert ft.text() == "<x3/> Klicken Sie <g1>Speichern</g1><x2/><x4/>"


def test_text_that_looks_like_a_tag_moves_the_names_aside(tmp_path) -> None:
    path = tmp_path / "t.tmx"
    path.write_text(
        '<tmx version="1.4"><header/><body><tu><tuv xml:lang="de"><seg>&lt;g1&gt; ist '
        '<ph x="1">{0}</ph></seg></tuv><tuv xml:lang="en"><seg>&lt;g1&gt; is <ph x="1">{0}'
        "</ph></seg></tuv></tu></body></tmx>"
    )
    assert list(tmx_pairs(path, "de", "en")) == [("<g1> ist <x_1/>", "<g1> is <x_1/>")]
    assert strip_codes("<g1>Ein</g1> Hund <x2/>.") == "Ein Hund ."


def test_language_codes_are_read_as_languages() -> None:
    assert [primary(c) for c in ("de-DE", "en_GB", "EN", "zh-Hant-TW")] == ["de", "en", "en", "zh"]
    assert format_of(Path("a.TMX.gz")) == "tmx"
    assert format_of(Path("a.sdlxliff")) == "xliff"
    assert format_of(Path("a.txt")) is None


def test_read_bilingual_takes_the_wanted_side_first(pairs, tmp_path) -> None:
    swapped = [(t, s) for s, t in pairs[:5]]
    path = write_xliff2(tmp_path / "d.xlf", swapped, langs=("en-US", "de-AT"))
    src, ref = read_bilingual(path, "de", "en")
    assert src == [expected(i, s) for i, (s, _) in enumerate(pairs[:5])]
    assert ref == [expected(i, t) for i, (_, t) in enumerate(pairs[:5])]


def test_units_not_to_translate_are_skipped(tmp_path) -> None:
    path = tmp_path / "n.xlf"
    path.write_text(
        '<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2"><file '
        'source-language="de" target-language="en" datatype="x" original="o"><body>'
        '<group translate="no"><trans-unit id="1"><source>Nein</source></trans-unit></group>'
        '<trans-unit id="2"><source>Ja</source><target>Yes</target></trans-unit>'
        "</body></file></xliff>"
    )
    assert list(xliff_pairs(path, "de", "en")) == [("Ja", "Yes")]


# -- broken files: one line naming the file and the line ---------------------------------------


def _error(read, path: Path, src: str = "de", tgt: str = "en") -> str:
    with pytest.raises(MtError) as err:
        list(read(path, src, tgt))
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


def test_malformed_xml_names_its_line(pairs, tmp_path) -> None:
    path = write_tmx(tmp_path / "m.tmx", pairs[:10])
    lines = path.read_text().splitlines()
    at = [i for i, x in enumerate(lines) if "</seg>" in x][5]
    lines[at] = lines[at].replace("</seg>", "</sek>")
    path.write_text("\n".join(lines))
    assert _error(tmx_pairs, path) == (
        f"{path}:{at + 1}: not well-formed XML (Opening and ending tag mismatch: seg line "
        f"{at + 1} and sek)"
    )


def test_a_file_of_other_languages_is_one_line(pairs, tmp_path) -> None:
    tmx = write_tmx(tmp_path / "fr.tmx", pairs[:3], langs=("de-DE", "fr-FR"))
    msg = _error(tmx_pairs, tmx)
    assert msg == (
        f"{tmx}: its first <tu> holds de-DE, fr-FR, not the pair de-en the config asks for "
        "(xml:lang is read as a language: de-DE is de)"
    )
    xlf = write_xliff1(tmp_path / "fr.xlf", pairs[:3], langs=("en-US", "fr-FR"))
    assert _error(xliff_pairs, xlf) == (
        f"{xlf}:3: the file translates en-US -> fr-FR, not the pair de-en (language codes "
        "are read as languages: de-DE is de)"
    )
    xlf2 = write_xliff2(tmp_path / "fr2.xlf", pairs[:3], langs=("de", "fr"))
    assert "translates de -> fr, not the pair de-en" in _error(xliff_pairs, xlf2)


def test_a_unit_missing_a_side_names_its_line(pairs, tmp_path) -> None:
    path = write_tmx(tmp_path / "m.tmx", pairs[:10])
    parts = path.read_text().split('<tuv xml:lang="en-GB">')
    text = '<tuv xml:lang="en-GB">'.join(parts[:4]) + '<tuv xml:lang="fr">'
    text += '<tuv xml:lang="en-GB">'.join(parts[4:])
    path.write_text(text)
    line = next(i for i, x in enumerate(text.splitlines(), 1) if 'xml:lang="fr"' in x) - 2
    assert _error(tmx_pairs, path) == f"{path}:{line}: <tu> has no 'en' variant (it has de-DE, fr)"
    xlf = write_xliff1(tmp_path / "u.xlf", [*pairs[:4], (pairs[4][0], None)])
    assert re.fullmatch(
        rf'{re.escape(str(xlf))}:\d+: <trans-unit id="u4"> has a segment without a target .*',
        _error(xliff_pairs, xlf),
    )


@pytest.mark.parametrize(
    "text,says",
    [
        ("<tmx><body><tu><tuv><seg>a</seg></tuv></tu></body></tmx>", ":1: <tuv> without xml:lang"),
        ('<tmx><body><tu><tuv xml:lang="de"/></tu></body></tmx>', ':1: <tuv xml:lang="de"> wit'),
        ("<xliff/>", ": not a TMX file (its root element is <xliff>)"),
        ("", ":1: not well-formed XML (no element found)"),
    ],
)
def test_broken_tmx_structure(tmp_path, text, says) -> None:
    path = tmp_path / "b.tmx"
    path.write_text(text)
    assert says in _error(tmx_pairs, path)


def test_a_damaged_gz_is_one_line(pairs, tmp_path) -> None:
    path = write_tmx(tmp_path / "m.tmx.gz", pairs)
    path.write_bytes(path.read_bytes()[:-200])
    assert "truncated or damaged" in _error(tmx_pairs, path)


XXE = (
    '<?xml version="1.0"?>\n<!DOCTYPE tmx [<!ENTITY x SYSTEM "file://{secret}">]>\n'
    '<tmx version="1.4"><header/><body><tu><tuv xml:lang="de"><seg>a &x; b</seg></tuv>'
    '<tuv xml:lang="en"><seg>c</seg></tuv></tu></body></tmx>'
)
LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE tmx [<!ENTITY a "aaaaaaaaaa">'
    + "".join(f'<!ENTITY {b} "{("&" + a + ";") * 10}">' for a, b in zip("abcdefgh", "bcdefghi"))
    + ']>\n<tmx version="1.4"><header/><body><tu><tuv xml:lang="de"><seg>&i;</seg></tuv>'
    '<tuv xml:lang="en"><seg>c</seg></tuv></tu></body></tmx>'
)


def test_no_entity_is_expanded(tmp_path) -> None:
    """An external entity (XXE) is not read, a billion laughs not expanded: each is one
    line naming the entity."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    xxe = tmp_path / "xxe.tmx"
    xxe.write_text(XXE.format(secret=secret))
    msg = _error(tmx_pairs, xxe)
    assert msg.startswith(f"{xxe}:3: entity &x; inside a segment") and "SECRET" not in msg
    laughs = tmp_path / "laughs.tmx"
    laughs.write_text(LAUGHS)
    assert "entity" in _error(tmx_pairs, laughs).lower()  # libxml2 or our check refuses it
    xlf = (
        f'<!DOCTYPE xliff [<!ENTITY x SYSTEM "file://{secret}">]>\n<xliff version="1.2">'
        '<file source-language="de" target-language="en"><body><trans-unit id="1">'
        "<source>a &x;</source></trans-unit></body></file></xliff>"
    )
    with pytest.raises(MtError, match=r"^x\.xlf:2: entity &x; inside a segment"):
        XliffFill(xlf.encode(), "x.xlf")


def test_a_large_file_is_read_one_unit_at_a_time(pairs, tmp_path, monkeypatch) -> None:
    """Each unit is dropped once read, with the ones before it: the tree iterparse builds
    never holds more than one, however long the file."""
    path = write_tmx(tmp_path / "big.tmx", pairs * 20)
    held = []
    forget = mt.cat.tmx.forget

    def watch(el) -> None:
        forget(el)
        if localname(el) == "tu":
            held.append(len(list(el.itersiblings(preceding=True))))

    monkeypatch.setattr(mt.cat.tmx, "forget", watch)
    assert sum(1 for _ in tmx_pairs(path, "de", "en")) == N * 20
    assert held == [0] * (N * 20)


# -- targets rebuilt: valid whatever the translation did ---------------------------------------

SOURCES = {
    "xliff1": '<source xmlns="urn:oasis:names:tc:xliff:document:1.2">Ein <g id="1">großer '
    '<g id="2">Hund</g></g> läuft <bx id="3"/>schnell<ex id="3"/>.<x id="4"/></source>',
    "xliff2": '<source xmlns="urn:oasis:names:tc:xliff:document:2.0">Ein <pc id="1">großer '
    '<pc id="2">Hund</pc></pc> läuft <sc id="3"/>schnell<ec startRef="3"/>.<ph id="4"/></source>',
    "tmx": '<seg>Ein <hi x="1">großer <hi x="2">Hund</hi></hi> läuft <bpt i="3">{b}</bpt>'
    'schnell<ept i="3">{/b}</ept>.<ph x="4">%s</ph></seg>',
}


def _rebuilt(dialect: str, text: str):
    source = etree.fromstring(SOURCES[dialect])
    flat = number(flatten(source, dialect, "f"))
    target = etree.Element(source.tag.replace("source", "target"), nsmap=source.nsmap)
    build(target, repair(events_of(text, flat, ("g", "x")), flat.codes))
    return flat, target


@pytest.mark.parametrize("dialect", list(SOURCES))
def test_the_source_text_rebuilds_the_source(dialect) -> None:
    flat, target = _rebuilt(dialect, "")
    assert flat.text() == "Ein <g1>großer <g2>Hund</g2></g1> läuft <g3>schnell</g3>.<x4/>"
    _, target = _rebuilt(dialect, flat.text())
    source = etree.fromstring(SOURCES[dialect])
    strip = re.compile(r"^<\w+[^>]*>|</\w+>$")
    assert strip.sub("", etree.tostring(target, encoding=str)) == strip.sub(
        "", etree.tostring(source, encoding=str)
    )


TOKENS = ["<g1>", "</g1>", "<g2>", "</g2>", "<g3>", "</g3>", "<x4/>", "<x9/>", "</g7>", "Hund", " "]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(SOURCES)), st.lists(st.sampled_from(TOKENS), max_size=14))
def test_any_translation_gives_a_valid_target_with_each_code_once(dialect, parts) -> None:
    """Tags dropped, doubled, swapped, crossed or unknown: the target is well-formed, holds
    every code of the source exactly once, and reads back as the same codes."""
    text = "".join(parts)
    flat, target = _rebuilt(dialect, text)
    again = etree.fromstring(etree.tostring(target))  # well-formed
    back = number(flatten(again, dialect, "f"), like=flat)
    assert sorted((c.role, c.key) for c in back.codes) == sorted(
        (c.role, c.key) for c in flat.codes
    )
    assert all(c.n <= 4 for c in back.codes)
    written = back.text()
    for n in (1, 2, 3):
        assert written.count(f"<g{n}>") == written.count(f"</g{n}>") == 1
        assert written.index(f"<g{n}>") < written.index(f"</g{n}>")
    assert written.count("<x4/>") == 1
    for unknown in ("<x9/>", "</g7>"):  # a tag of no code of this segment is text
        assert back.literal().count(unknown) == text.count(unknown)


def test_a_target_of_text_only_keeps_the_codes_at_the_end() -> None:
    _, target = _rebuilt("xliff1", "A big dog runs fast.")
    assert etree.tostring(target, encoding=str).split(">", 1)[1] == (
        'A big dog runs fast.<g id="1"/><g id="2"/><bx id="3"/><ex id="3"/><x id="4"/></target>'
    )


def test_gz_tmx_needs_no_name_change(pairs, tmp_path) -> None:
    plain = write_tmx(tmp_path / "a.tmx", pairs[:5])
    gz = tmp_path / "a.tmx.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert list(tmx_pairs(gz, "de", "en")) == list(tmx_pairs(plain, "de", "en"))


TMX_FILE = """<?xml version="1.0" encoding="UTF-8"?>
<tmx version="1.4">
  <header creationtool="t" creationtoolversion="1" segtype="sentence" o-tmf="t" adminlang="en"
          srclang="de-DE" datatype="plaintext"/>
  <body>
    <tu tuid="a">
      <prop type="x-Origin">TM</prop>
      <tuv xml:lang="de-DE">
        <seg>Ein <hi x="1">Hund</hi>.</seg>
      </tuv>
      <tuv xml:lang="en-US"><seg/></tuv>
    </tu>
    <tu tuid="b">
      <note>two</note>
      <tuv xml:lang="de-DE"><seg>Zwei</seg></tuv>
      <tuv xml:lang="fr-FR"><seg>Deux</seg></tuv>
    </tu>
    <tu tuid="c"><tuv xml:lang="fr-FR"><seg>Trois</seg></tuv></tu>
    <tu tuid="d"><tuv xml:lang="de-DE"><seg>Vier</seg></tuv>
      <tuv xml:lang="en-US"><seg>Four</seg></tuv></tu>
  </body>
</tmx>
"""


def test_a_tmx_file_filled_keeps_its_layout_and_says_what_is_machine_made() -> None:
    from mt.cat.tmx_fill import TmxFill

    doc = TmxFill(TMX_FILE.encode(), "m.tmx")
    assert doc.srclang == "de-DE"
    doc.choose("de", "en")
    assert doc.languages == ("de", "en-US")  # the code the file writes English with
    assert [s.text for s in doc.slots] == ["Ein <g1>Hund</g1>.", "Zwei"]
    assert (doc.kept, doc.skipped) == (1, 1)
    assert doc.fill(["A <g1>dog</g1>.", "Two"]) == 2
    out = doc.to_bytes().decode()
    # An empty variant is filled in place, a missing one added after the last, indented alike.
    assert '<tuv xml:lang="en-US" changedate="' in out and '<seg>A <hi x="1">dog</hi>.</seg>' in out
    assert re.search(
        r'<tuv xml:lang="fr-FR"><seg>Deux</seg></tuv>\n      <tuv xml:lang="en-US" '
        r'creationdate="\d{8}T\d{6}Z" creationtool="mt" creationtoolversion="[^"]+"><seg>Two'
        r"</seg></tuv>\n    </tu>",
        out,
    ), out
    # The origin: kept where the unit says one (tu a), added before the variants otherwise.
    assert '<prop type="x-Origin">TM</prop>' in out and out.count("x-Origin") == 2
    assert '<note>two</note>\n      <prop type="x-Origin">MachineTranslation</prop>\n' in out
    # Untouched units are as they were, to the byte.
    for unit in ('<tu tuid="c">', '<tu tuid="d">', '<tuv xml:lang="en-US"><seg>Four'):
        line = next(x for x in TMX_FILE.splitlines() if unit in x)
        assert line in out.splitlines()


def test_a_failed_tmx_segment_leaves_its_unit_as_it_was() -> None:
    from mt.cat.tmx_fill import TmxFill

    doc = TmxFill(TMX_FILE.encode(), "m.tmx")
    doc.choose("de", "en")
    assert doc.fill([None, None]) == 0
    out = doc.to_bytes().decode()  # the same XML; only the header's attributes on one line
    assert etree.canonicalize(out) == etree.canonicalize(TMX_FILE)
    assert out.splitlines()[4:] == TMX_FILE.splitlines()[5:]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("<tmx><body/></tmx>", "m.tmx:1: <tmx> without <header>"),
        ('<tmx><header srclang="de"/></tmx>', "m.tmx:1: <tmx> without <body>"),
        (
            "<tmx><header/><body><tu><tuv><seg>a</seg></tuv></tu></body></tmx>",
            "<tuv> without xml:lang",
        ),
        (
            '<tmx><header/><body><tu><tuv xml:lang="de"/></tu></body></tmx>',
            'm.tmx:1: <tuv xml:lang="de"> without <seg>',
        ),
        ("<xliff/>", "m.tmx: not a TMX file (its root element is <xliff>)"),
    ],
)
def test_a_broken_tmx_to_fill_is_one_line(text, says) -> None:
    from mt.cat.tmx_fill import TmxFill

    with pytest.raises(MtError) as err:
        TmxFill(text.encode(), "m.tmx")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_cat_upload_counts_its_segments_against_the_document_limits() -> None:
    from mt.serve.documents import DocumentLimits, read_document, translate_document
    from mt.serve.unzip import OverLimit

    data = TMX_FILE.encode()
    limits = DocumentLimits(max_file_segments=1)
    with pytest.raises(OverLimit) as err:
        read_document(data, ".tmx", limits, ("auto", "en"), "m.tmx")
    assert err.value.limit == "max_file_segments"
    with pytest.raises(OverLimit) as err:
        read_document(data, ".tmx", DocumentLimits(max_file_chars=20), ("de", "en"), "m.tmx")
    assert err.value.limit == "max_file_chars"  # 18 + 4 characters: the tags count
    doc = read_document(data, ".tmx", DocumentLimits(max_file_segments=2), ("auto", "en"))
    assert (doc.units, doc.plain, doc.html, doc.source) == (
        ["Ein <g1>Hund</g1>.", "Zwei"],
        [],
        [],
        "de",
    )

    def shout(texts: list[str]) -> list[str]:
        return [x.replace("Hund", "HUND") for x in texts]

    out = translate_document(data, ".tmx", shout, shout, None, shout, ("auto", "en"))
    assert b'<seg>Ein <hi x="1">HUND</hi>.</seg>' in out  # the unit, whole, with its code
    with pytest.raises(MtError, match="names no target language"):
        read_document(data, ".tmx")


def test_a_utf16_memory_is_written_back_in_utf16() -> None:
    """TMX allows UTF-16 (older Trados exports): the filled file keeps it, to its last
    newline (two bytes in UTF-16)."""
    from mt.cat.tmx_fill import TmxFill

    text = TMX_FILE.replace('encoding="UTF-8"', 'encoding="UTF-16"')
    doc = TmxFill(text.encode("utf-16"), "m.tmx")
    doc.choose("de", "en")
    doc.fill(["Ein <g1>Hündchen</g1>.", "Zwo"])
    out = doc.to_bytes()
    assert out.startswith(b"\xff\xfe") and len(out) % 2 == 0
    decoded = out.decode("utf-16")
    assert decoded.startswith("<?xml version='1.0' encoding='UTF-16'?>\n<tmx version=\"1.4\">")
    assert decoded.endswith("</tmx>\n") and '<seg>Ein <hi x="1">Hündchen</hi>.</seg>' in decoded


def test_a_memory_to_fill_expands_no_entity(tmp_path) -> None:
    """The TMX filled by `mt translate` is parsed as safely as the one read as data: a
    billion laughs and an external entity are one line each, the secret never read."""
    from mt.cat.tmx_fill import TmxFill

    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    for text in (LAUGHS, XXE.format(secret=secret)):
        text = text.replace('<tuv xml:lang="en"><seg>c</seg></tuv>', "")  # to translate
        with pytest.raises(MtError) as err:
            doc = TmxFill(text.encode(), "m.tmx")
            doc.choose("de", "en")
        said = str(err.value)
        assert said.startswith("m.tmx:") and "entity" in said.lower() and "SECRET" not in said

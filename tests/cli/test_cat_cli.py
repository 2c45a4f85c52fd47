"""The files translators have, through the commands: a TMX corpus trains, `mt eval` scores a
TMX or XLIFF file, and `mt translate --input-format xliff` fills an XLIFF document's targets,
read back by translate-toolkit (an independent, well-kept XLIFF reader)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from lxml import etree
from support.cat_files import XLIFF1, XLIFF2, coded, multi30k, write_tmx, write_xliff1, write_xliff2
from translate.storage import tmx, xliff, xliff2

REPO = Path(__file__).resolve().parents[2]
XML = "http://www.w3.org/XML/1998/namespace"
N = 24


@pytest.fixture(scope="module")
def test_pairs(multi30k_dir: Path) -> list[tuple[str, str]]:
    return multi30k(multi30k_dir, "test_2016_flickr", N)


def test_eval_scores_a_tmx_file_as_the_same_lines_in_text(mt_cli, tiny_run, test_pairs, tmp_path):
    """A TMX file of plain pairs scores exactly what the same lines score as two files."""
    plain = test_pairs
    tmx = write_tmx(tmp_path / "test.tmx", plain, codes=False)
    (tmp_path / "src.de").write_text("".join(s + "\n" for s, _ in plain))
    (tmp_path / "ref.en").write_text("".join(t + "\n" for _, t in plain))
    common = (tiny_run / "best.pt", "--json", "--beam", "2")
    by_tmx = mt_cli("eval", *common, "--src", tmx)
    by_text = mt_cli("eval", *common, "--src", tmp_path / "src.de", "--ref", tmp_path / "ref.en")
    assert by_tmx.rc == 0 and by_text.rc == 0, by_tmx.err + by_text.err
    assert json.loads(by_tmx.out)["bleu"] == json.loads(by_text.out)["bleu"]
    assert json.loads(by_tmx.out)["sentences"] == len(plain)


def test_eval_of_an_xliff_file_leaves_the_codes_out(mt_cli, tiny_run, test_pairs, tmp_path):
    path = write_xliff2(tmp_path / "t.xlf", test_pairs)
    result = mt_cli("eval", tiny_run / "best.pt", "--src", path, "--json", "--beam", "1")
    assert result.rc == 0, result.err
    assert json.loads(result.out)["sentences"] == N
    bad = mt_cli("eval", tiny_run / "best.pt", "--src", path, "--ref", path)
    assert bad.rc == 2 and bad.err.strip().endswith("holds the references; give no --ref")


def _codes(el) -> list[str]:
    return sorted(etree.QName(c).localname for c in el.iter() if c is not el)


def _document(tmp_path: Path, version: str, test_pairs) -> Path:
    """A document to translate: every unit without a target but the second (a translator's
    work, to be kept)."""
    pairs = [(s, t if i == 1 else None) for i, (s, t) in enumerate(test_pairs)]
    write = write_xliff1 if version == "1.2" else write_xliff2
    return write(tmp_path / f"doc{version}.xlf", pairs)


@pytest.mark.parametrize("version", ["1.2", "2.0"])
def test_translate_fills_an_xliff_document(mt_cli, tiny_run, test_pairs, tmp_path, version):
    doc = _document(tmp_path, version, test_pairs)
    out = tmp_path / "filled.xlf"
    result = mt_cli(
        "translate", tiny_run / "best.pt", "--input-format", "xliff", "-i", doc, "-o", out
    )
    assert result.rc == 0, result.err
    assert f"{doc}: {N - 1} target(s) filled, 1 kept (already translated)" in result.err
    ns = XLIFF1 if version == "1.2" else XLIFF2
    store = (xliff.xlifffile if version == "1.2" else xliff2.Xliff2File)(out.read_bytes())
    units = store.units
    assert len(units) == N
    for i, unit in enumerate(units):
        assert unit.source.strip() == test_pairs[i][0].strip()
        assert unit.target.strip()
        if i == 1:
            assert unit.target == test_pairs[1][1]  # the translator's target, untouched
            continue
        if version == "1.2":
            assert unit.get_state_n() == xliff.xliffunit.statemap["needs-review-translation"]
        else:  # translated, neither reviewed nor left initial
            assert unit.istranslated() and not unit.isapproved() and not unit.isfuzzy()
        # The source's inline codes, each once, in the target (none where the source has none).
        source, target = (unit.xmlelement.find(f".//{{{ns}}}{x}") for x in ("source", "target"))
        assert (
            _codes(target)
            == _codes(source)
            == (["g", "x"] if version == "1.2" else ["pc", "ph"]) * coded(i)
        )
    # Everything but the targets (and the states they bring) is as it was.
    before, after = etree.parse(str(doc)).getroot(), etree.parse(str(out)).getroot()
    for root in (before, after):
        for t in root.iter(f"{{{ns}}}target"):
            t.getparent().remove(t)
        for el in root.iter():
            for key in ("state", "state-qualifier"):
                el.attrib.pop(key, None)
    assert etree.tostring(before) == etree.tostring(after)


def test_translate_xliff_keeps_inline_codes_in_place(mt_cli, tiny_run, tmp_path):
    """A pair of codes around a word and a lone one: both in the target, the pair nested
    around text, written with the source's ids and attributes."""
    doc = tmp_path / "c.xlf"
    doc.write_text(
        f'<?xml version="1.0" encoding="UTF-8"?>\n<xliff xmlns="{XLIFF2}" version="2.0" '
        'srcLang="de-DE" trgLang="en-US"><file id="f"><unit id="u"><segment>'
        '<source>Ein <pc id="b" dataRefStart="d1">Hund</pc> läuft im Schnee.<ph id="p"/>'
        "</source></segment></unit></file></xliff>\n"
    )
    result = mt_cli("translate", tiny_run / "best.pt", "--input-format", "xliff", "-i", doc)
    assert result.rc == 0, result.err
    target = etree.fromstring(result.out.encode()).find(f".//{{{XLIFF2}}}target")
    pcs, phs = target.findall(f"{{{XLIFF2}}}pc"), target.findall(f"{{{XLIFF2}}}ph")
    assert [dict(p.attrib) for p in pcs] == [{"id": "b", "dataRefStart": "d1"}]
    assert [dict(p.attrib) for p in phs] == [{"id": "p"}]
    assert result.out.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')


def test_translate_xliff_in_place_and_its_errors(mt_cli, tiny_run, test_pairs, tmp_path):
    doc = _document(tmp_path, "1.2", test_pairs[:4])
    ckpt = tiny_run / "best.pt"
    result = mt_cli("translate", ckpt, "--input-format", "xliff", "-i", doc, "-o", doc)
    assert result.rc == 0, result.err
    assert 'state-qualifier="leveraged-mt"' in doc.read_text()
    again = mt_cli("translate", ckpt, "--input-format", "xliff", "-i", doc, "-o", doc)
    assert "0 target(s) filled, 4 kept" in again.err  # nothing left to fill
    french = write_xliff1(tmp_path / "fr.xlf", [("a", None)], langs=("de-DE", "fr-FR"))
    wrong = mt_cli("translate", ckpt, "--input-format", "xliff", "-i", french)
    assert wrong.rc == 2
    assert wrong.err.strip().endswith(
        f"{french}: translates de-DE -> fr-FR, but this model translates de-en"
    )
    broken = tmp_path / "broken.xlf"
    broken.write_text(doc.read_text()[:-30])
    cut = mt_cli("translate", ckpt, "--input-format", "xliff", "-i", broken)
    assert cut.rc == 2 and "Traceback" not in cut.err
    assert f"error: {broken}:" in cut.err and "not well-formed XML" in cut.err
    nbest = mt_cli("translate", ckpt, "--input-format", "xliff", "-i", doc, "--nbest", "2")
    assert nbest.rc == 2 and "not with --nbest" in nbest.err


def test_training_reads_a_tmx_corpus(mt_cli, multi30k_dir, tmp_path):
    """A short run on TMX train and dev files (inline codes, `data.protect`): it trains,
    scores its dev set, and the store names the TMX file."""
    write_tmx(tmp_path / "train.tmx", multi30k(multi30k_dir, "train", 600))
    write_tmx(tmp_path / "val.tmx.gz", multi30k(multi30k_dir, "val", 30))
    run = tmp_path / "run"
    result = mt_cli(
        "train",
        REPO / "configs" / "tiny.yaml",
        "--run-dir",
        run,
        *("--set", f"data.root={tmp_path}", "--set", "data.format=tmx"),
        *("--set", "data.train=train.tmx", "--set", "data.valid=val.tmx.gz"),
        *("--set", "data.protect=true", "--set", "train.max_steps=8"),
        *("--set", "train.eval_every=8", "--set", "train.threads=1"),
    )
    assert result.rc == 0, result.err
    assert "train.tmx: 600 pairs read" in result.err
    assert "val.tmx.gz: 30 pairs read" in result.err
    assert (run / "best.pt").is_file()


def _memory(tmp_path: Path, test_pairs, name: str = "memory.tmx") -> Path:
    """A memory to translate: a note and a prop in the header, every unit without its
    English variant but the second (a translator's, to be kept)."""
    pairs = [(s, t if i == 1 else None) for i, (s, t) in enumerate(test_pairs)]
    path = write_tmx(tmp_path / name, pairs)
    text = path.read_text().replace(
        'datatype="plaintext"/>',
        'datatype="plaintext">\n    <note>Kept as it was</note>\n'
        '    <prop type="x-Project">demo</prop>\n  </header>',
    )
    path.write_text(text.replace('<tu tuid="2">', '<tu tuid="2">\n    <note>unit two</note>'))
    return path


def _bare(seg) -> str:
    """A `<seg>`'s text without its inline codes (and their native code)."""
    return "".join([seg.text or "", *(c.tail or "" for c in seg)])


def test_translate_fills_a_tmx_memory(mt_cli, tiny_run, test_pairs, tmp_path):
    """Each unit gets its English variant, read back by translate-toolkit: the text `mt
    translate` gives the same source line, the source's codes each once, the rest of the
    file as it was, the variant marked as a machine translation."""
    memory = _memory(tmp_path, test_pairs)
    out = tmp_path / "filled.tmx"
    ckpt = tiny_run / "best.pt"
    result = mt_cli("translate", ckpt, "--input-format", "tmx", "-i", memory, "-o", out)
    assert result.rc == 0, result.err
    assert f"{memory}: {N - 1} variant(s) filled, 1 kept (already translated), 0 unit(s)" in (
        result.err
    )
    from mt.cat.fill import make_slot
    from mt.cat.xmlio import parse_document

    tree = parse_document(memory.read_bytes(), "m")
    sources = [s for s in tree.iter("seg") if s.getparent().get(f"{{{XML}}}lang") == "de-DE"]
    lines = [make_slot(s, "tmx", "m", None, None).text for s in sources]
    (tmp_path / "lines.de").write_text("".join(x + "\n" for x in lines))
    plain = mt_cli("translate", ckpt, "-i", tmp_path / "lines.de")
    assert plain.rc == 0, plain.err
    expected = plain.out.splitlines()

    store = tmx.tmxfile(out.read_bytes())
    assert store.sourcelanguage == "de-DE" and len(store.units) == N
    for i, unit in enumerate(store.units):
        source, target = (x.find("seg") for x in unit.getlanguageNodes())
        assert unit.getlanguageNodes()[1].get(f"{{{XML}}}lang") == "en-GB"  # the file's code
        if i == 1:
            assert unit.target == test_pairs[1][1]  # the translator's, untouched
            continue
        assert unit.target.strip()
        assert _bare(target) == re.sub(r"</?g\d+>|<x\d+/>", "", expected[i])
        if not coded(i):
            assert unit.target == expected[i]
        assert sorted((c.tag, tuple(sorted(c.attrib.items())), c.text) for c in target) == sorted(
            (c.tag, tuple(sorted(c.attrib.items())), c.text) for c in source
        )
        assert len(target) == (3 if coded(i) else 0)  # <bpt>, <ept>, <ph>
        tuv = unit.getlanguageNodes()[1]
        assert tuv.get("creationtool") == "mt" and re.fullmatch(
            r"\d{8}T\d{6}Z", tuv.get("creationdate")
        )
        assert [p.text for p in unit.xmlelement.findall("prop")] == ["MachineTranslation"]
    # Everything but the new variants and their props is as it was.
    before, after = etree.parse(str(memory)).getroot(), etree.parse(str(out)).getroot()
    for tu in after.iter("tu"):
        for el in tu.findall("prop") + tu.findall("tuv")[1:]:
            if el.tag == "prop" or tu.get("tuid") != "1":
                tu.remove(el)
    for root in (before, after):
        for el in root.iter():
            if el.tag in ("tu", "tuv"):
                el.tail = None
    assert etree.tostring(before) == etree.tostring(after)
    assert out.read_text().startswith(
        '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE tmx SYSTEM "tmx14.dtd">\n'
    )


def test_translate_tmx_in_place_languages_and_errors(mt_cli, tiny_run, test_pairs, tmp_path):
    ckpt = tiny_run / "best.pt"
    memory = _memory(tmp_path, test_pairs[:4])
    result = mt_cli("translate", ckpt, "--input-format", "tmx", "-i", memory, "-o", memory)
    assert result.rc == 0, result.err
    filled = memory.read_text()
    assert filled.count('<tuv xml:lang="en-GB"') == 4
    assert '  <tu tuid="0">\n    <prop type="x-Origin">MachineTranslation</prop>\n' in filled
    again = mt_cli("translate", ckpt, "--input-format", "tmx", "-i", memory, "-o", memory)
    assert again.rc == 0 and "0 variant(s) filled, 4 kept" in again.err
    assert memory.read_text() == filled
    # An empty variant is filled; a unit without German is counted, not an error; the
    # header's *all* names no source (the model's is taken).
    mixed = write_tmx(tmp_path / "mixed.tmx", [("Ein Hund.", "x"), ("Bonjour", None)], codes=False)
    text = mixed.read_text().replace("<seg>x</seg>", "<seg></seg>")
    text = text.replace('srclang="de-DE"', 'srclang="*all*"')
    mixed.write_text(
        text.replace('<tuv xml:lang="de-DE"><seg>Bonjour', '<tuv xml:lang="fr"><seg>Bonjour')
    )
    r = mt_cli("translate", ckpt, "--input-format", "tmx", "-i", mixed)
    assert r.rc == 0, r.err
    assert "1 variant(s) filled, 0 kept (already translated), 1 unit(s) with no de variant" in (
        r.err
    )
    assert r.out.count("<tuv") == 3 and "<seg></seg>" not in r.out
    french = write_tmx(tmp_path / "fr.tmx", [("Bonjour", None)], langs=("fr-FR", "en-GB"))
    wrong = mt_cli("translate", ckpt, "--input-format", "tmx", "-i", french)
    assert wrong.rc == 2
    assert wrong.err.strip().endswith(
        f"{french}: its srclang is fr-FR, but this model translates de-en"
    )
    import gzip

    packed = tmp_path / "memory.tmx.gz"
    packed.write_bytes(gzip.compress(filled.encode()))
    gz = mt_cli("translate", ckpt, "--input-format", "tmx", "-i", packed)
    assert gz.rc == 2 and gz.err.strip().endswith(
        f"{packed}: gzip-compressed: mt translate fills a plain file (gunzip it first)"
    )
    for broken, says in (
        (memory.read_text()[:-30], "not well-formed XML"),
        (filled.replace('<tuv xml:lang="de-DE">', "<tuv>", 1), "<tuv> without xml:lang"),
        (
            filled.replace("<header", "<head", 1).replace("</header>", "</head>"),
            "<tmx> without <header>",
        ),
        (filled.replace("<tmx ", "<tmxx ").replace("</tmx>", "</tmxx>"), "not a TMX file"),
    ):
        path = tmp_path / "broken.tmx"
        path.write_text(broken)
        cut = mt_cli("translate", ckpt, "--input-format", "tmx", "-i", path)
        assert cut.rc == 2 and "Traceback" not in cut.err, cut.err
        assert f"error: {path}" in cut.err and says in cut.err
        assert len(cut.err.strip().splitlines()) == 1


@pytest.mark.slow  # trains the multilingual fixture model a second time on its worker (~19 s)
def test_translate_tmx_with_a_multilingual_model(mt_cli, multi_run, tmp_path):
    """The file names its source at most: --to says the variant to add, --from (or the
    header's srclang) the variant to translate."""
    ckpt = multi_run / "best.pt"
    memory = write_tmx(
        tmp_path / "m.tmx", [("Ein Hund läuft.", None), ("Zwei Männer.", "Two men.")], codes=False
    )
    no_to = mt_cli("translate", ckpt, "--input-format", "tmx", "-i", memory)
    assert no_to.rc == 2
    assert no_to.err.strip().endswith(f"{memory}: a TMX file names no target language: give --to")
    r = mt_cli("translate", ckpt, "--input-format", "tmx", "-i", memory, "--to", "fr")
    assert r.rc == 0, r.err
    assert "2 variant(s) filled, 0 kept (already translated), 0 unit(s) with no de" in r.err
    assert r.out.count('<tuv xml:lang="fr"') == 2 and r.out.count('xml:lang="en-GB"') == 1
    memory.write_text(memory.read_text().replace('srclang="de-DE"', 'srclang="*all*"'))
    r = mt_cli("translate", ckpt, "--input-format", "tmx", "-i", memory, "--to", "fr")
    assert r.rc == 2 and r.err.strip().endswith("its header's srclang is *all*: give --from")
    r = mt_cli(
        "translate", ckpt, "--input-format", "tmx", "-i", memory, "--to", "de", "--from", "en"
    )
    assert r.rc == 0, r.err
    assert "0 variant(s) filled, 1 kept (already translated), 1 unit(s) with no en variant" in (
        r.err
    )

"""Glossaries: the four file formats (and broken files), finding terms, term accuracy."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from mt.errors import MtError
from mt.glossary import Entry, Glossary, uses
from mt.glossary.accuracy import line_hits, term_accuracy
from mt.glossary.files import format_of, parse_glossary, read_glossary
from mt.glossary.words import base_language, stemmer_name


def _pairs(g: Glossary) -> list[tuple[str, str]]:
    return [(e.src, e.tgt) for e in g.entries]


def _found(g: Glossary, text: str, protected=()) -> list[tuple[str, str]]:
    return [(text[m.start : m.end], m.entry.tgt) for m in g.find(text, protected)]


# -- formats ----------------------------------------------------------------------------------


def test_tsv_with_a_header_and_without(tmp_path: Path):
    f = tmp_path / "g.tsv"
    f.write_text("de\ten\nHund\thound\n\nroter Hund\t red hound \n", encoding="utf-8")
    g = read_glossary(f, "de", "en")
    assert _pairs(g) == [("Hund", "hound"), ("roter Hund", "red hound")]
    assert (g.src_lang, g.tgt_lang) == ("de", "en")
    assert g.entries[1].where == f"{f}:4"  # the blank line counts
    assert (read_glossary(f).src_lang, read_glossary(f).tgt_lang) == ("de", "en")
    f.write_text("Hund\thound\n", encoding="utf-8")
    assert _pairs(read_glossary(f, "de", "en")) == [("Hund", "hound")]


def test_a_header_the_other_way_round_reads_the_columns_the_other_way_round(tmp_path: Path):
    f = tmp_path / "g.tsv"
    f.write_text("en\tde-DE\nhound\tHund\n", encoding="utf-8")
    assert _pairs(read_glossary(f, "deu_Latn", "en")) == [("Hund", "hound")]
    with pytest.raises(MtError, match=r"g\.tsv:1: the glossary is en-de-DE but the model .* de-fr"):
        read_glossary(f, "de", "fr")


def test_csv_quotes_commas_and_a_spreadsheets_trailing_cells(tmp_path: Path):
    f = tmp_path / "g.csv"
    f.write_text('\ufeffde,en\nHund,"hound, big"\n"Fahr""rad",cycle,,\n', encoding="utf-8")
    assert _pairs(read_glossary(f, "de", "en")) == [("Hund", "hound, big"), ('Fahr"rad', "cycle")]


TBX = """<?xml version="1.0" encoding="UTF-8"?>
<tbx xmlns="urn:iso:std:iso:30042:ed-2" type="TBX-Basic" style="dca" xml:lang="en">
  <tbxHeader><fileDesc><sourceDesc><p>test</p></sourceDesc></fileDesc></tbxHeader>
  <text><body>
    <conceptEntry id="c1">
      <langSec xml:lang="de">
        <termSec><term>Hund</term></termSec>
        <termSec><term>Köter</term></termSec>
      </langSec>
      <langSec xml:lang="en">
        <termSec><term>mutt</term>
          <termNote type="administrativeStatus">deprecatedTerm-admn-sts</termNote></termSec>
        <termSec><term>hound</term></termSec>
      </langSec>
    </conceptEntry>
    <conceptEntry id="c2">
      <langSec xml:lang="fr"><termSec><term>vélo</term></termSec></langSec>
    </conceptEntry>
    <conceptEntry id="c3">
      <langSec xml:lang="de-AT"><termSec><term>Fahrrad</term></termSec></langSec>
      <langSec xml:lang="en-US"><termSec><term>bike</term></termSec></langSec>
    </conceptEntry>
  </body></text>
</tbx>
"""

TBX_V2 = """<?xml version="1.0"?>
<martif type="TBX-Basic" xml:lang="en"><text><body>
<termEntry id="e1">
  <langSet xml:lang="de"><tig><term>Hund</term></tig></langSet>
  <langSet xml:lang="en"><ntig><termGrp><term>hound</term></termGrp></ntig></langSet>
</termEntry>
</body></text></martif>
"""


def test_tbx_basic_synonyms_map_to_the_preferred_target(tmp_path: Path):
    f = tmp_path / "g.tbx"
    f.write_text(TBX, encoding="utf-8")
    g = read_glossary(f, "de", "en")
    assert _pairs(g) == [("Hund", "hound"), ("Köter", "hound"), ("Fahrrad", "bike")]
    assert g.entries[0].where == f"{f}:7"  # the term's own line


def test_tbx_without_the_pair_and_tbx_v2(tmp_path: Path):
    f = tmp_path / "g.tbx"
    f.write_text(TBX, encoding="utf-8")
    with pytest.raises(MtError, match=r"no concept has terms in both fr and en"):
        read_glossary(f, "fr", "en")
    with pytest.raises(MtError, match=r"holds terms in de, en, fr: which two"):
        read_glossary(f)
    assert _pairs(parse_glossary(TBX_V2.encode(), "old.tbx", "de", "en", "tbx")) == [
        ("Hund", "hound")
    ]
    assert _pairs(parse_glossary(TBX_V2.encode(), "old.tbx", None, None, "tbx")) == [
        ("Hund", "hound")
    ]


TMX = """<?xml version="1.0"?>
<tmx version="1.4"><header srclang="de" datatype="plaintext" segtype="phrase" adminlang="en"
 creationtool="x" creationtoolversion="1" o-tmf="x"/>
<body>
<tu><tuv xml:lang="de-DE"><seg>Hund</seg></tuv><tuv xml:lang="en-GB"><seg>hound</seg></tuv></tu>
<tu><tuv lang="de"><seg>Fahr<ph>&lt;b/&gt;</ph>rad</seg></tuv>
    <tuv lang="en"><seg>cycle</seg></tuv></tu>
<tu><tuv xml:lang="fr"><seg>chien</seg></tuv></tu>
</body></tmx>
"""


def test_tmx_units_inline_codes_and_the_headers_source(tmp_path: Path):
    f = tmp_path / "g.tmx"
    f.write_text(TMX, encoding="utf-8")
    assert _pairs(read_glossary(f, "de", "en")) == [("Hund", "hound"), ("Fahrrad", "cycle")]
    g = read_glossary(f, "en", "de")  # the other way round
    assert _pairs(g) == [("hound", "Hund"), ("cycle", "Fahrrad")]
    with pytest.raises(MtError, match=r"holds terms in de, en, fr: which two"):
        read_glossary(f)  # the header says de, but into which of en and fr?
    f.write_text(TMX.replace('<tu><tuv xml:lang="fr"><seg>chien</seg></tuv></tu>', ""))
    g = read_glossary(f)
    assert (g.src_lang, g.tgt_lang, len(g)) == ("de", "en", 2)


def test_the_format_is_the_extension_else_the_content(tmp_path: Path):
    assert format_of(Path("x.TBX"), b"") == "tbx"
    assert format_of(Path("x.txt"), b"Hund\thound\n") == "tsv"
    assert format_of(Path("x.txt"), b"Hund,hound\n") == "csv"
    assert format_of(Path("x.xml"), b'<?xml version="1.0"?>\n<tmx version="1.4">') == "tmx"
    assert format_of(Path("x.xml"), b"<martif>") == "tbx"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("g.tsv", "de\ten\nHund\thound\nKatze\n", r"g\.tsv:3: expected 2 columns .* a tab, got 1"),
        ("g.tsv", "Hund\thound\tdog\n", r"g\.tsv:1: expected 2 columns .* got 3"),
        ("g.tsv", "Hund\thound\n\tcat\n", r"g\.tsv:2: the source term is empty"),
        ("g.csv", 'Hund,hound\nKatze,"cat\n', r"g\.csv:\d+: not CSV"),
        ("g.csv", "Hund,hound\nHund,dog\n", r"g\.csv:2: 'Hund' is given twice, as 'hound' "),
        ("g.tsv", "", r"g\.tsv: the glossary holds no entry"),
        (
            "g.tmx",
            "<tmx><body>\n<tu><tuv xml:lang='de'><seg>x</seg></tuv>\n</tmx>\n",
            r"g\.tmx:3: not well-formed XML \(mismatched tag\)",
        ),  # fmt: skip
        ("g.tbx", "<?xml version='1.0'?>\n<html><body/></html>", r"g\.tbx:1: not a TBX file"),
        (
            "g.tmx",
            '<?xml version="1.0"?>\n<!DOCTYPE t [<!ENTITY a "aa"><!ENTITY b "&a;&a;">]>\n'
            "<tmx><body><tu><tuv xml:lang='de'><seg>&b;</seg></tuv></tu></body></tmx>\n",
            r"g\.tmx:2: refused: EntitiesForbidden",
        ),
    ],
)
def test_a_broken_file_is_one_line_naming_its_file_and_line(tmp_path, name, content, message):
    f = tmp_path / name
    f.write_text(content, encoding="utf-8")
    with pytest.raises(MtError, match=message) as err:
        read_glossary(f, "de", "en")
    assert "\n" not in str(err.value)


def test_not_utf8_and_not_there_are_one_line(tmp_path: Path):
    f = tmp_path / "g.tsv"
    f.write_bytes(b"Hund\thound\nK\xe4tzchen\tkitten\n")
    with pytest.raises(MtError, match=r"g\.tsv:2: not UTF-8 \(byte 0xe4\)"):
        read_glossary(f, "de", "en")
    with pytest.raises(MtError, match=r"nope\.tsv: glossary file not found"):
        read_glossary(tmp_path / "nope.tsv")


def test_the_same_entry_twice_is_kept_once():
    g = Glossary([Entry("Hund", "hound"), Entry("hund", "hound")], "de", "en")
    assert _pairs(g) == [("Hund", "hound")]


# -- finding terms ----------------------------------------------------------------------------

G = Glossary.from_pairs(
    [("Hund", "hound"), ("roter Hund", "red hound"), ("Mann", "gent"), ("Männer", "gents"),
     ("T-Shirt", "tee"), ("Hund im Park", "park hound"), ("Park", "garden")],
    "de", tgt_lang="en",
)  # fmt: skip


def test_terms_are_found_in_any_case_and_inflected_form():
    assert _found(G, "Zwei HUNDE und ein Hund, den Hunden.") == [
        ("HUNDE", "hound"),
        ("Hund", "hound"),
        ("Hunden", "hound"),
    ]
    assert _found(G, "Die Frau trägt ein T-Shirt.") == [("T-Shirt", "tee")]


def test_only_at_word_boundaries():
    assert _found(G, "Eine Hundehütte, hundert Hundertschaften, ein Schäferhund.") == []
    assert _found(G, "Parkplatz") == []


def test_multi_word_terms_inflected_and_the_longest_match_first():
    assert _found(G, "Ein roter Hund und zwei roten Hunde.") == [
        ("roter Hund", "red hound"),
        ("roten Hunde", "red hound"),
    ]
    # "roter Hund im Park": the three-word term wins over both, and is not cut by them
    assert _found(G, "Der Hund im Park bellt.") == [("Hund im Park", "park hound")]
    # overlapping matches of one length: the leftmost
    assert _found(G, "roter Hund im Park") == [("Hund im Park", "park hound")]


def test_entries_sharing_a_stem_prefer_the_one_spelled_as_the_text():
    assert stemmer_name("de") == "german"
    assert _found(G, "Ein Mann und zwei Männer.") == [("Mann", "gent"), ("Männer", "gents")]
    assert _found(G, "Den Männern") == [("Männern", "gent")]  # neither spelled so: the first


def test_a_term_inside_a_protected_span_is_left_alone():
    from mt.spans import find_spans

    text = 'Der Hund <a href="https://x.org/Hund">Hund</a> bei https://www.hund.de/Hund'
    spans = [(s.start, s.end) for s in find_spans(text)]
    assert _found(G, text, spans) == [("Hund", "hound"), ("Hund", "hound")]
    assert [m.start for m in G.find(text, spans)] == [4, 38]


def test_a_language_without_a_stemmer_is_matched_as_written():
    assert stemmer_name("xx") is None and stemmer_name("cs") == "czech"
    assert base_language("deu_Latn") == "de" and base_language("pt-BR") == "pt"
    g = Glossary.from_pairs([("Hund", "hound")], "xx")
    assert _found(g, "hund Hunde") == [("hund", "hound")]


def test_a_glossary_pickles_as_its_entries_and_finds_the_same():
    again = pickle.loads(pickle.dumps(G))
    assert again is G  # in a process that has it
    from mt import glossary

    data = pickle.dumps(G)
    del glossary._BUILT[G.token]
    try:
        rebuilt = pickle.loads(data)
        assert rebuilt is not G and rebuilt.token == G.token
        assert _found(rebuilt, "roten Hunde") == _found(G, "roten Hunde")
    finally:
        glossary._BUILT[G.token] = G


# -- term accuracy ----------------------------------------------------------------------------


def test_uses_find_target_terms_exactly_or_inflected():
    assert [(u.start, u.end, u.exact) for u in uses("hound", "Hounds and a hound.", "en")] == [
        (0, 6, False),
        (13, 18, True),
    ]
    assert uses("red hound", "the reddish hound", "en") == []
    assert [u.exact for u in uses("red hound", "Red hounds", "en")] == [False]


def test_term_accuracy_by_hand():
    sources = [
        "Der Hund.",
        "Zwei Hunde und ein Mann.",
        "Die Katze sitzt auf dem Sofa.",
        "Hund und Hund.",
    ]
    outputs = ["The hound.", "Two hounds and a man.", "The cat sits on the sofa.", "Hound and dog."]
    refs = ["The hound.", "Two hounds and a gent.", "The cat sits on the sofa.", "Hound and hound."]
    assert line_hits(G, sources[1], outputs[1]) == (2, 0, 1)  # hounds (inflected); no gent
    assert line_hits(G, sources[3], outputs[3]) == (2, 1, 1)  # twice asked, once written
    acc = term_accuracy(G, sources, outputs, refs)
    assert (acc.terms, acc.lines) == (5, 3)
    assert acc.exact == round(100 * 2 / 5, 2)  # "The hound.", the first "Hound"
    assert acc.lemma == round(100 * 3 / 5, 2)  # and "hounds"
    assert acc.bleu_rest == 100.0 and acc.bleu_terms is not None and acc.bleu_terms < 100
    assert "60.0% lemma-matched, 40.0% exact, of 5 in 3 lines" in acc.summary()
    none = term_accuracy(G, ["Eine Katze."], ["A cat."], ["A cat."])
    assert (none.terms, none.lemma, none.bleu_terms) == (0, 100.0, None)

"""Terms learnt (`data.terms`): the inline format, the lexicon found by Dice and competitive
linking, the annotation of training lines (share, determinism, protected spans) and the
stores and tokenizer data preparation builds with them."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from mt.config import Config, DataConfig, TermsConfig, TokenizerConfig
from mt.config_file import load_config
from mt.config_rules import validate
from mt.data.corpus import read_lines
from mt.data.prepare import prepare
from mt.data.terms import LEXICON_FILE, Terms
from mt.errors import MtError
from mt.glossary.inline import END, MARKERS, TERM, TO, annotate, takes_terms
from mt.glossary.lexicon import Lexicon, Link, learn, lemma_form, phrases

# A small corpus whose counts are known: `Hund` always with `dog`, `Katze` with `cat`, `rot`
# with `red`; `der`/`the` in every line (the most frequent: function words).
CORPUS = [
    ("Der rote Hund schläft.", "The red dog sleeps."),
    ("Der Hund bellt.", "The dog barks."),
    ("Der Hunde laufen.", "The dogs run."),
    ("Der Katze schläft.", "The cat sleeps."),
    ("Der rote Katze läuft.", "The red cat runs."),
    ("Der Katzen schlafen.", "The cats sleep."),
    ("Der rote Ball.", "The red ball."),
    ("Der Hund und der Ball.", "The dog and the ball."),
]


def lexicon(**kw: object) -> Lexicon:
    args: dict = {"min_dice": 0.5, "min_count": 2, "skip_common": 1} | kw
    return learn([s for s, _ in CORPUS], [t for _, t in CORPUS], "de", "en", **args)


# -- the inline format -------------------------------------------------------------------------


def test_annotate_glues_the_markers_to_the_words_around_them():
    text = "Ein Hund läuft über die Wiese."
    got = annotate(text, [(4, 8, "dog"), (24, 29, "meadow")])
    assert got == f"Ein{TERM} Hund{TO} dog{END} läuft über die{TERM} Wiese{TO} meadow{END}."
    assert annotate(text, []) == text
    assert annotate("Hund", [(0, 4, "big  dog")]) == f"{TERM} Hund{TO} big dog{END}"


def test_a_masked_term_leaves_its_source_words_out():
    text = "Ein Hund läuft über die Wiese."
    got = annotate(text, [(4, 8, "dog"), (24, 29, "meadow")], [True, False])
    assert got == f"Ein{TERM}{TO} dog{END} läuft über die{TERM} Wiese{TO} meadow{END}."
    assert annotate(text, [(4, 8, "dog")], [False]) == annotate(text, [(4, 8, "dog")])


@pytest.mark.parametrize(
    "spans", [[(4, 8, "a"), (6, 10, "b")], [(5, 5, "a")], [(9, 12, "a"), (0, 3, "b")]]
)
def test_annotate_refuses_spans_out_of_order_or_overlapping(spans):
    with pytest.raises(ValueError, match="in order"):
        annotate("Ein Hund läuft über.", spans)


def test_a_tokenizer_takes_terms_when_it_reserves_the_markers(tmp_path: Path):
    from mt.tokenizer import train_tokenizer

    lines = [s for s, _ in CORPUS] * 20
    plain = train_tokenizer(lines, lines, TokenizerConfig(vocab_size=60))
    marked = train_tokenizer(lines, lines, TokenizerConfig(vocab_size=60), list(MARKERS))
    assert not takes_terms(plain) and takes_terms(marked)
    pieces = marked.src.encode(annotate("Der Hund bellt.", [(4, 8, "dog")]), out_type=str)
    assert [p for p in pieces if p in MARKERS] == list(MARKERS)  # each marker one piece


# -- the lexicon -------------------------------------------------------------------------------


def test_dice_over_stems_as_computed_by_hand():
    lex = lexicon()
    # `hund` is in 4 source lines, `dog` (dog, dogs) in 4 target lines, together in 4.
    assert lex.pairs["hund"]["dog"] == 1.0
    # `rot` (3 lines) and `red` (3): together in 3; `rot` and `dog`: 1 line, under min_count.
    assert lex.pairs["rot"] == {"red": 1.0}
    # `schläft` (stem `schlaft`, 2 lines; `schlafen` is `schlaf`) and `sleep` (3): 2 * 2 / 5.
    assert lex.pairs["schlaft"] == {"sleep": 0.8}
    # `katz` (3) and `sleep` (3) together in 2: 4 / 6, beside `cat` (competitive linking
    # picks `cat` for `Katze`).
    assert lex.pairs["katz"] == {"cat": 1.0, "sleep": 0.6667}
    assert "der" not in lex.pairs and all("the" not in t for t in lex.pairs.values())
    assert lex.forms["dog"] == "dog" and lex.forms["cat"] == "cat"  # the shortest form
    assert lex.lines[("hund", "dog")] == 4


def test_min_dice_and_skip_common_leave_pairs_out():
    assert "rot" not in lexicon(min_count=4).pairs
    assert lexicon(skip_common=0).pairs["der"]["the"] == 1.0  # without the skip: a pair
    loose = learn(
        ["a Hund x", "b Hund y", "c Katze"], ["dog p", "dog q", "cat"], "de", "en", 0.9, 1, 0
    )
    assert loose.pairs["hund"] == {"dog": 1.0}


def test_lemma_form_is_the_shortest_frequent_form_in_its_usual_spelling():
    assert lemma_form(Counter({"dogs": 10, "dog": 5}), "dog") == "dog"
    assert lemma_form(Counter({"dogs": 100, "dog": 5}), "dog") == "dogs"  # `dog` too rare
    assert lemma_form(Counter({"Hunde": 4, "Hund": 3, "hund": 1}), "hund") == "Hund"
    assert lemma_form(Counter(), "xyz") == "xyz"


def spans(links: list[Link]) -> list[tuple[int, int, str]]:
    return [(x.start, x.end, x.target) for x in links]


def test_links_are_one_to_one_and_neighbours_may_become_phrases():
    lex = lexicon()
    src, tgt = "Der rote Hund schläft.", "The red dog sleeps."
    links = lex.links(src, tgt)
    assert links == [
        Link(4, 8, "red", lines=3),
        Link(9, 13, "dog", joins=True, lines=4),
        Link(14, 21, "sleep", joins=True, lines=2),
    ]
    assert phrases(links) == [Link(4, 21, "red dog sleep", lines=2)]
    assert spans(phrases(links, longest=2)) == [(4, 13, "red dog"), (14, 21, "sleep")]
    no = lambda: False  # noqa: E731
    assert spans(phrases(links, no)) == [(4, 8, "red"), (9, 13, "dog"), (14, 21, "sleep")]
    # Order swapped on the target side: two terms, never a phrase.
    assert spans(phrases(lex.links("Der Hund rote.", "The red dog."))) == [
        (4, 8, "dog"),
        (9, 13, "red"),
    ]
    # A word the target lacks is not linked; one target word is linked once.
    assert spans(phrases(lex.links("Der Hund Hund.", "The dog."))) == [(4, 8, "dog")]
    assert lex.links("Der Ball.", "Nothing here.") == []
    # A part of a hyphenated word is no word of its own.
    assert lex.links("Der Ball-Hund.", "The ball dog.") == []


def test_a_compound_takes_the_target_words_beside_its_link():
    forms = {"coaster": "coaster", "roller": "roller"}
    lex = Lexicon("de", "en", {"achterbahn": {"coaster": 0.9, "roller": 0.5}}, forms)
    got = lex.links("Eine Achterbahn fährt.", "A roller coaster runs.")
    assert spans(got) == [(5, 15, "roller coaster")]


def test_links_leave_protected_spans_alone():
    lex = lexicon()
    src, tgt = "Der Hund {Hund} bellt.", "The dog {Hund} barks."
    assert spans(lex.links(src, tgt, [(9, 15)], [(8, 14)])) == [(4, 8, "dog")]
    assert lex.links(src, tgt, [(4, 15)], []) == []


def test_the_lexicon_file_reads_back_the_same(tmp_path: Path):
    lex = lexicon()
    path = tmp_path / LEXICON_FILE
    lex.save(path)
    back = Lexicon.load(path)
    assert (back.pairs, back.forms, back.lines) == (lex.pairs, lex.forms, lex.lines)
    assert back.digest == lex.digest and (back.src_lang, back.tgt_lang) == ("de", "en")
    assert lexicon(min_count=3).digest != lex.digest
    path.write_text(path.read_text(encoding="utf-8") + "hund\tdog\n", encoding="utf-8")
    n = len(path.read_text(encoding="utf-8").splitlines())
    with pytest.raises(MtError, match=re.escape(f"{path}:{n}: not a line of the term lexicon")):
        Lexicon.load(path)


# -- the annotation of training lines ----------------------------------------------------------


@pytest.fixture(scope="module")
def slice_1000(multi30k_dir: Path) -> tuple[list[str], list[str], Lexicon]:
    src = [x.strip() for x in read_lines(multi30k_dir / "train.de.gz")[:3000]]
    tgt = [x.strip() for x in read_lines(multi30k_dir / "train.en.gz")[:3000]]
    return src[:1000], tgt[:1000], learn(src, tgt, "de", "en", 0.3, 3, 60)


def test_a_share_of_the_lines_is_annotated_and_only_the_source(slice_1000):
    src, tgt, lex = slice_1000
    out = Terms(lex, 0.2, 3, seed=7).apply(src, tgt, 0)
    changed = [i for i, (a, b) in enumerate(zip(out, src)) if a != b]
    # Binomial(1000, 0.2) lies in [150, 250] but for p < 1e-4; the lines drawn that hold no
    # link stay as they were, so somewhat fewer change.
    assert 120 <= len(changed) <= 250
    for i in changed:
        n = out[i].count(TERM)
        assert 1 <= n <= 3 and out[i].count(TO) == n and out[i].count(END) == n
        plain = re.sub(f"{re.escape(TO)}.*?{re.escape(END)}", "", out[i]).replace(TERM, "")
        assert "".join(plain.split()) == "".join(src[i].split())  # the source words kept


def test_annotation_is_deterministic_and_depends_on_the_position_only(slice_1000):
    src, tgt, lex = slice_1000
    terms = Terms(lex, 0.3, 2, seed=1)
    whole = terms.apply(src, tgt, 0)
    assert terms.apply(src, tgt, 0) == whole
    # Read in chunks (as a store is built), the same lines get the same annotations.
    chunks = terms.apply(src[:333], tgt[:333], 0) + terms.apply(src[333:], tgt[333:], 333)
    assert chunks == whole
    assert Terms(lex, 0.3, 2, seed=2).apply(src, tgt, 0) != whole
    assert max(x.count(TERM) for x in whole) == 2
    assert Terms(lex, 0.0, 3).apply(src, tgt, 0) == src
    assert str(terms) != str(Terms(lex, 0.3, 2, seed=2))


def test_a_share_of_the_annotated_terms_is_masked(slice_1000):
    """`mask`: the drawn terms and lines are those without it; a share of the terms lose their
    source words (about half at 0.5, all at 1), and the store's key tells them apart."""
    src, tgt, lex = slice_1000
    plain = Terms(lex, 0.3, 3, seed=1).apply(src, tgt, 0)
    targets = re.compile(f"{re.escape(TO)} (.*?){re.escape(END)}")
    for mask, low, high in ((0.5, 0.35, 0.65), (1.0, 1.0, 1.0)):
        out = Terms(lex, 0.3, 3, seed=1, mask=mask).apply(src, tgt, 0)
        assert [x == s for x, s in zip(out, src)] == [x == s for x, s in zip(plain, src)]
        assert [targets.findall(x) for x in out] == [targets.findall(x) for x in plain]
        terms = sum(x.count(TERM) for x in out)
        share = sum(x.count(TERM + TO) for x in out) / terms
        assert low <= share <= high, share
    assert str(Terms(lex, 0.3, 3, mask=0.5)) != str(Terms(lex, 0.3, 3))


def test_rarer_terms_are_annotated_more_often(slice_1000):
    src, tgt, lex = slice_1000
    out = Terms(lex, 1.0, 1).apply(src, tgt, 0)
    chosen: list[int] = []  # the lines of the pair annotated, beside its line's other links
    others: list[int] = []
    for s, t, x in zip(src, tgt, out):
        links = phrases(lex.links(s, t), lambda: False)
        if len(links) < 2 or TERM not in x:
            continue
        start = x.index(TERM) + len(TERM) + 1
        word = x[start : x.index(TO)]
        for link in links:
            (chosen if s[link.start : link.end] == word else others).append(link.lines)
    assert len(chosen) > 100
    assert sorted(chosen)[len(chosen) // 2] * 2 < sorted(others)[len(others) // 2]


def test_multi_word_terms_are_annotated_whole(slice_1000):
    src, tgt, lex = slice_1000
    out = Terms(lex, 1.0, 16).apply(src, tgt, 0)
    phrases = [m for x in out for m in re.findall(f"{re.escape(TERM)} (.*?){re.escape(TO)}", x)]
    assert sum(" " in p for p in phrases) >= 20, phrases[:50]


def test_no_annotation_inside_a_protected_span():
    lex = lexicon()
    src = ["Der Hund bellt {Hund} <b>%(Hund)s</b> https://hund.example/Hund"]
    tgt = ["The dog barks {Hund} <b>%(Hund)s</b> https://hund.example/dog"]
    for seed in range(5):
        (out,) = Terms(lex, 1.0, 3, seed).apply(src, tgt, 0)
        assert out.count(TERM) == 1, out
        assert out.endswith(" {Hund} <b>%(Hund)s</b> https://hund.example/Hund")


# -- the config key and data preparation -------------------------------------------------------


@pytest.mark.parametrize(
    ("terms", "message"),
    [
        (TermsConfig(share=1.5), "data.terms.share must be in [0.0, 1.0], got 1.5"),
        (TermsConfig(share=0.1, max_terms=0), "data.terms.max_terms must be in [1, 16]"),
        (TermsConfig(share=0.1, mask=-0.5), "data.terms.mask must be in [0.0, 1.0], got -0.5"),
        (TermsConfig(min_dice=0), "data.terms.min_dice must be in (0, 1]"),
        (TermsConfig(min_count=0), "data.terms.min_count must be in [1, 1,000,000]"),
        (TermsConfig(lexicon_lines=5), "data.terms.lexicon_lines must be in [100, "),
    ],
)
def test_bad_settings_are_one_line(terms, message):
    cfg = Config()
    cfg.data = DataConfig(terms=terms)
    with pytest.raises(MtError, match=re.escape(message)):
        validate(cfg)


def test_terms_are_for_one_pair_and_read_from_yaml(tmp_path: Path):
    cfg = Config()
    cfg.data = DataConfig(pairs=["de-en", "en-de"], terms=TermsConfig(share=0.1))
    with pytest.raises(MtError, match="cannot be combined with data.pairs"):
        validate(cfg)
    path = tmp_path / "c.yaml"
    path.write_text("data:\n  terms:\n    share: 0.15\n    max_terms: 2\n", encoding="utf-8")
    got = load_config(path, ["data.terms.skip_common=40"])
    assert got.data.terms == TermsConfig(share=0.15, max_terms=2, skip_common=40)
    path.write_text("data:\n  terms:\n    shares: 0.15\n", encoding="utf-8")
    with pytest.raises(MtError, match="shares"):
        load_config(path)


def test_prepare_builds_annotated_stores_and_a_marked_tokenizer(multi30k_dir: Path, tmp_path):
    d = DataConfig(
        root=str(multi30k_dir),
        max_train_examples=1500,
        max_valid_examples=20,
        terms=TermsConfig(share=0.3, skip_common=60, lexicon_lines=1000),
    )
    t = TokenizerConfig(vocab_size=500)
    run = tmp_path / "run"
    prepared = prepare(d, t, 3, run, log=False)
    tok, store = prepared.tokenizer, prepared.train[0]
    assert takes_terms(tok)
    lex = Lexicon.load(run / LEXICON_FILE)
    src = [x.strip() for x in read_lines(multi30k_dir / "train.de.gz")[:1500]]
    tgt = [x.strip() for x in read_lines(multi30k_dir / "train.en.gz")[:1500]]
    want = Terms(lex, 0.3, 3, seed=3, mask=0.5).apply(src, tgt, 0)  # the config's default mask
    assert any(TERM + TO in x for x in want) and any(re.search(f"{TERM} \\w", x) for x in want)
    marked = sum(TERM in x for x in want)
    assert 300 <= marked <= 500
    # The store holds the annotated sources, in order (the filters drop a few pairs).
    got = [list(store.pair(i)[0]) for i in range(len(store))]
    encoded = iter(tok.src.encode(want))
    assert all(any(g == e for e in encoded) for g in got) and len(got) >= 1450
    assert sum(tok.src.piece_to_id(TERM) in g for g in got) >= marked - 10
    assert [tok.tgt.decode(list(store.pair(i)[1])) for i in range(50)] == tgt[:50]
    assert not any(
        TERM in tok.src.decode(list(p[0])) for p in map(prepared.valid[0].pair, range(20))
    )
    # Opened again, the lexicon is read back and the store reused; share 0 has other stores.
    again = prepare(d, t, 3, run, log=False)
    assert again.train[0].folder == store.folder
    d.terms = TermsConfig()
    assert prepare(d, t, 3, run, log=False).train[0].folder != store.folder

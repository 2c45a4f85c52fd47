"""Protected spans: what the patterns find and refuse, and restoring's exact-set guarantee."""

from __future__ import annotations

import re

import pytest
from support.tasks import reverse_task_config

from mt.spans import Span, find_spans, mask_pair
from mt.spans.placeholders import Placeholders, mask, restore

KEPT = [
    ("Delete %s?", ["%s"]),
    ("%3d files", ["%3d"]),
    ("%1$s of %2$s", ["%1$s", "%2$s"]),
    ("%(name)s and %<count>d and %{user}", ["%(name)s", "%<count>d", "%{user}"]),
    ("%-5.2f %lld 100%% %@", ["%-5.2f", "%lld", "%%", "%@"]),
    ("Hello {0}, {name}, {user.name}, {0:>8} {{title}}", ["{0}", "{name}", "{user.name}"]),
    ("Set $HOME or ${XDG_HOME}.", ["$HOME", "${XDG_HOME}"]),
    ("Tom &amp; Jerry &#169; &#xA9;", ["&amp;", "&#169;", "&#xA9;"]),
    ("Click <b>here</b><br/>", ["<b>", "</b>", "<br/>"]),
    ('<a href="https://inkscape.org/de?a=1&amp;b=2">Go</a>', None),
    ("See https://example.com/a/b. Or www.x.org, now", ["https://example.com/a/b", "www.x.org"]),
    ("Write to ana.b+x@mail.example.de!", ["ana.b+x@mail.example.de"]),
    ("Hi <%= user.name %>!", ["<%= user.name %>"]),
]

PROSE = [
    "50 % der Leute",  # a space flag would make "% d" a conversion
    "100% sicher",
    "Es sind 100%.",
    "50%off",
    "It costs $5 or US$ 10.",
    "a { b and } c",
    "a {} b { } c",
    "Tom & Jerry &c",
    "if a < b and x<3 then",
    "3 > 2",
    "name@ nowhere",
    "100 % s",
]


@pytest.mark.parametrize("text,spans", KEPT)
def test_spans_are_found_whole(text: str, spans: list[str] | None) -> None:
    found = [s.text for s in find_spans(text)]
    if spans is None:  # the tag with a URL and an entity in it is one span
        assert found == ['<a href="https://inkscape.org/de?a=1&amp;b=2">', "</a>"]
    elif text.startswith("Hello"):
        assert found == spans + ["{0:>8}", "{{title}}"]
    else:
        assert found == spans
    for s in find_spans(text):
        assert text[s.start : s.end] == s.text


@pytest.mark.parametrize("text", PROSE)
def test_prose_is_not_a_span(text: str) -> None:
    assert find_spans(text) == []


class _Tok:
    """A tokenizer stand-in: no reserved pieces, every letter known."""

    class _Sp:
        def piece_to_id(self, piece: str) -> int:
            return 1

        def encode(self, text: str) -> list[int]:
            return [5] * len(text)

    src = tgt = _Sp()

    def encode_tgt(self, lines: list[str]) -> list[list[int]]:
        return [[5] * len(x) for x in lines]


PH = Placeholders(_Tok())  # type: ignore[arg-type]


def test_mask_spells_placeholders_and_words() -> None:
    m = mask("Delete <b>%s</b> now?", PH)
    assert m is not None
    assert m.text == "Delete Z00 Z01 Z02 now?"
    assert m.glue == [(False, True), (True, True), (True, False)]
    assert mask("nothing here", PH) is None


def test_mask_picks_a_letter_the_line_does_not_use() -> None:
    m = mask("Model Z80 costs %d", PH)
    assert m is not None and m.placeholders == ["Q00"]


def test_restore_glues_as_the_source_did() -> None:
    m = mask("Delete <b>%s</b> now?", PH)
    assert restore(m, "Jetzt Z00 Z01 Z02 löschen?") == "Jetzt <b>%s</b> löschen?"


def test_restore_keeps_numbers_written_side_by_side_apart() -> None:
    """The number guard's spans (mt.translation.number_guard): two numbers the model wrote
    touching, or one touching a word, stay two numbers and a word; tags around a
    placeholder still touch."""
    src = "seit 17 Minuten an der Haltestelle 42."
    spans = [Span(m.start(), m.end(), "number", m.group()) for m in re.finditer(r"\d+", src)]
    m = mask(src, PH, spans)
    assert m is not None and m.placeholders == ["Z00", "Z01"]
    assert restore(m, "at stop Z01 Z00 minutes.") == "at stop 42 17 minutes."
    assert restore(m, "at stop Z01 Z00x.") == "at stop 42 17 x."
    assert restore(m, "stop Z01.") == "stop 42. 17"


def test_restore_keeps_each_span_exactly_once() -> None:
    m = mask("%s and %s of {0}", PH)
    # Z01 twice, Z02 never, Z00 only inside a word (not a placeholder there): the first Z01
    # is kept, the missing ones are appended in order.
    assert restore(m, "xZ00 Z01 und Z01") == "xZ00 %s und %s {0}"
    # a placeholder-like number is not mistaken for one
    assert restore(m, "Z00 Z01 Z02 Z001") == "%s %s {0} Z001"


def test_only_spans_is_no_content() -> None:
    assert not mask("<b>{0}</b>: %s", PH).content  # type: ignore[union-attr]
    assert mask("<b>{0}</b> Haus", PH).content  # type: ignore[union-attr]


def test_too_many_spans_are_merged_not_lost() -> None:
    src = " ".join(f"{{{k}}}" for k in range(150))
    m = mask(src, PH)
    assert m is not None and len(m.spans) == 100
    assert restore(m, "") == src


def test_mask_pair_gives_twins_the_same_piece() -> None:
    src, tgt = mask_pair("Lösche %s und %s in {0}?", "Delete %s and %s in {0}? $HOME")
    assert src == "Lösche ｟0｠ und ｟1｠ in ｟2｠ ?"
    assert tgt == "Delete ｟0｠ and ｟1｠ in ｟2｠ ? $HOME"  # no source twin: stays text
    assert mask_pair("Ein Hund.", "A dog.") == ("Ein Hund.", "A dog.")


@pytest.mark.slow  # ~10-30 s; test_protect_cli checks spans end to end by default
def test_data_protect_trains_on_masked_pairs_and_decodes(tmp_path, mt_cli) -> None:
    """A tokenizer with the reserved pieces, stores holding them, and a model that keeps
    every span through the placeholders it learned (the masked, constrained path)."""
    import random

    from mt.data.store import TokenStore
    from mt.tokenizer import UNK, Tokenizer

    cfg = reverse_task_config(tmp_path)
    rng = random.Random(0)
    for name in ("train", "val"):
        src = (tmp_path / "data" / f"{name}.src").read_text().splitlines()
        pairs = []
        for line in src:
            words = line.split()
            words.insert(rng.randrange(len(words) + 1), rng.choice(["%s", "{0}", "<b>"]))
            pairs.append((" ".join(words), " ".join(reversed(words))))
        (tmp_path / "data" / f"{name}.src").write_text("".join(s + "\n" for s, _ in pairs))
        (tmp_path / "data" / f"{name}.tgt").write_text("".join(t + "\n" for _, t in pairs))
    run = tmp_path / "run"
    sets = ("--set", "data.protect=true", "--set", "tokenizer.vocab_size=100")
    r = mt_cli("train", cfg, "--run-dir", run, *sets)
    assert r.rc == 0, r.err
    tok = Tokenizer.load(run)
    assert tok is not None and tok.src.piece_to_id("｟0｠") != UNK
    ph = tok.src.piece_to_id("｟0｠")
    stores = [TokenStore.open(p) for p in (run / "cache").iterdir() if p.name.startswith("train")]
    assert stores and all(ph in s.pair(0)[0] and ph in s.pair(0)[1] for s in stores)
    assert "%" not in "".join(tok.src.id_to_piece(int(i)) for i in stores[0].src[:2000])
    out = mt_cli("translate", run / "best.pt", stdin="ka %s lo {0}\nmi {0} {0} nu\n")
    assert out.rc == 0, out.err
    first, second = out.out.splitlines()
    assert first.count("%s") == 1 and first.count("{0}") == 1
    assert second.count("{0}") == 2
    # mt score reads spans as the placeholders the model learned (unless --no-protect).
    (tmp_path / "s.txt").write_text("ka %s lo\n")
    (tmp_path / "t.txt").write_text("lo %s ka\n")
    pair = ("--src", tmp_path / "s.txt", "--tgt", tmp_path / "t.txt")
    on = mt_cli("score", run / "best.pt", *pair)
    off = mt_cli("score", run / "best.pt", *pair, "--no-protect")
    assert on.rc == off.rc == 0 and on.out != off.out


FRAGMENTS = [
    "Ein <b>Mann <i>mit</i> einem</b> Hund<br/> läuft &amp; <a href='https://x.org'>springt</a>.",
    "<strong><em>Zwei</em> Hunde</strong> <span translate='no'>im</span> <u>Wasser</u> {0}",
    "<b><i>Ein</i></b> %s <b>Hund</b><!-- x --><b>läuft</b>",
]


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_any_alignment_gives_well_formed_output_with_every_tag(fragment: str) -> None:
    """Placement is the model's, what is kept is not: random target words and links (crossing,
    missing, reordered) still give every tag and span once, properly nested."""
    import random
    import re

    from mt.spans.markup import html_unit, parse_fragment
    from mt.spans.place import assemble, lift

    unit = html_unit(parse_fragment(fragment, "test"), protect=True)
    lifted = lift(unit.text, unit.atoms)
    rng = random.Random(0)
    n_src = len(lifted.words)
    for _ in range(200):
        n = rng.randint(0, 2 * n_src)
        words = [f"w{j}" for j in range(n)]
        links = [set(rng.sample(range(n_src), rng.randint(0, 2))) for _ in range(n)]
        out = assemble(unit, lifted, words, links)
        parse_fragment(out, "output")  # raises when not well-formed
        assert sorted(re.findall(r"<[^<>]+>", out)) == sorted(re.findall(r"<[^<>]+>", fragment))
        for s in unit.atoms:
            assert out.count(s.text) == fragment.count(s.text)


def test_tags_follow_the_links() -> None:
    from mt.spans.markup import html_unit, parse_fragment
    from mt.spans.place import assemble, lift

    unit = html_unit(parse_fragment("Ein <b>roter</b> Ball, %s.", "test"), protect=True)
    lifted = lift(unit.text, unit.atoms)
    assert lifted.text == "Ein roter Ball, ."
    # A red ball, %s.  (the `.` word of the source is punctuation: %s goes after `Ball,`)
    out = assemble(unit, lifted, ["A", "red", "ball,", "."], [{0}, {1}, {2}, {3}])
    assert out == "A <b>red</b> ball, %s ."


def test_number_guard_reads_spans_both_ways_and_leaves_lines_masking_would_change() -> None:
    """`%L2` is a Qt placeholder to the default formats and `%L` then `2` to the widest: its
    digit is no number either way. A number glued to text, once a placeholder word, can make
    a span of what was none (`1%s` -> `Z00 %s`, `<a1>` -> `<a Z00 >`): the guard leaves such
    a line as translated."""
    from mt.spans import Span
    from mt.spans.placeholders import mask
    from mt.translation.number_guard import number_matches, numbers, span_texts

    assert numbers("%L2https://x.de/a?b=1 and 5 dogs") == ["1", "5"]
    for src, same in [("1%s", False), ("<a1>", False), ("seit 17 Minuten", True)]:
        spans = [Span(m.start(), m.end(), "number", m.group()) for m in number_matches(src)]
        masked = mask(src, PH, spans)
        assert masked is not None
        assert (span_texts(masked.text) == span_texts(src)) is same, src

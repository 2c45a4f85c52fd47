"""Protected spans: what the patterns find and refuse, and restoring's exact-set guarantee."""

from __future__ import annotations

import pytest

from mt.decode.protect import Placeholders, mask, restore
from mt.decode.spans import find_spans

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
    assert [m.src[a:b] for a, b in m.words] == ["Delete", "<b>", "%s", "</b>", "now?"]
    assert mask("nothing here", PH) is None


def test_mask_picks_a_letter_the_line_does_not_use() -> None:
    m = mask("Model Z80 costs %d", PH)
    assert m is not None and m.placeholders == ["Q00"]


def test_restore_glues_as_the_source_did() -> None:
    m = mask("Delete <b>%s</b> now?", PH)
    assert restore(m, "Jetzt Z00 Z01 Z02 löschen?") == "Jetzt <b>%s</b> löschen?"


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

"""Capitals: ALL-CAPS and Title Case lines translated in their usual case and cased back."""

from __future__ import annotations

from pathlib import Path

import pytest

from mt.translation.casing import case_back, case_of, usual_case
from mt.translation.requests import Plan, Request
from mt.translation.session import Session
from mt.translation.stages import spelling_cost


def test_case_of_tells_shouting_and_titles_from_text():
    assert case_of("ZWEI HUNDE SPIELEN IM SCHNEE.") == "upper"
    assert case_of("Zwei Hunde Spielen Im Schnee") == "title"
    assert case_of("Ein Boston Terrier Läuft Über Saftig-grünes Gras Vor Einem Zaun") == "title"
    assert case_of("Zwei Hunde spielen im Schnee.") == "usual"  # German nouns: not a title
    assert case_of("Die USA und die EU") == "usual"
    assert case_of("USA") == "usual" and case_of("Der Park") == "usual"  # too short to tell
    assert case_of("") == "usual" and case_of("1234 5678") == "usual"


def test_usual_case_takes_the_spelling_with_fewer_pieces():
    known = {"Zwei", "Hunde", "spielen", "im", "Schnee"}

    def pieces(word: str) -> int:
        return 1 if word in known else 3

    assert usual_case("ZWEI HUNDE SPIELEN IM SCHNEE!", pieces) == "Zwei Hunde spielen im Schnee!"
    assert usual_case("Zwei Hunde Spielen Im Schnee", pieces) == "Zwei Hunde spielen im Schnee"
    assert usual_case("Zwei US Hunde", pieces, keep_upper=True) == "Zwei US Hunde"
    assert usual_case("«ABC» DEF", lambda w: 1) == "«Abc» def"  # a tie: lower case, then Abc
    assert usual_case("DER WEISSE HUND", lambda w: 0 if w in ("weiße", "Hund") else 1) == (
        "Der weiße Hund"
    )


def test_case_back():
    assert case_back("Two dogs play in the snow.", "upper") == "TWO DOGS PLAY IN THE SNOW."
    assert case_back("Two dogs play in the snow.", "title") == "Two Dogs Play In The Snow."
    assert case_back("x y", "usual") == "x y"


@pytest.fixture(scope="module")
def translator(tiny_run: Path):
    return Session([tiny_run / "best.pt"], "cpu").translator()


def test_capitals_are_translated_in_their_usual_case(translator):
    cost = spelling_cost(translator.tokenizer)
    lines = ["ZWEI HUNDE SPIELEN IM SCHNEE.", "Ein Mann Fährt Mit Dem Fahrrad", "Ein Hund rennt."]
    got = translator.translate([Request(x, plan=Plan(recase=True)) for x in lines])
    usual = [usual_case(x, cost) for x in lines[:2]] + [lines[2]]
    plain = translator.translate([Request(x, plan=Plan(recase=False)) for x in usual])
    assert got[0].text == plain[0].text.upper()
    assert got[1].text == case_back(plain[1].text, "title")
    assert got[2].text == plain[2].text  # ordinary text untouched
    off = translator.translate([Request(lines[0], plan=Plan(recase=False))])
    assert off[0].text == translator.translate([Request(lines[0], plan=Plan(recase=False))])[0].text

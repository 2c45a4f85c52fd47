"""Capitals: an ALL-CAPS or Title Case line translated in its usual case, the output cased back.

A model trained on ordinarily cased sentences reads "ZWEI HUNDE SPIELEN IM SCHNEE" as strings
of rare pieces and writes nonsense ("This is tuuuming the ommmmmm"), where the same sentences
in their usual case translate well (docs/studies/text-as-people-send-it.md). So before search,
a line whose letters are all capitals (a headline, a label, a shouted message), or whose words
nearly all start with one (a title), is given each word's usual case, and the translation is
written back in the line's case: all capitals, or each word's first letter capitalised.

The usual case of a word comes first from the model's case table (mt.textstats: each word's
most frequent spelling where it does not start a sentence, counted on the training text's
source side when the run's data is prepared, or added with `mt text-stats`). A word the table
lacks, or a model without one (older and imported checkpoints), gets the source tokenizer's
guess: of the word in lower case and capitalised, the spelling cut into fewer pieces is the
one the tokenizer saw more often (German nouns are capitalised, verbs are not); between
spellings of as many pieces, the one whose pieces score higher (sentencepiece's piece
log-probabilities) wins. That guess capitalises mid-sentence `ein` and `zwei` (they start
training sentences) and, in a joint vocabulary, lowercases German nouns that are also English
words (`Ball`, `Park`); docs/studies/text-as-people-send-it.md measures both. The line's
first letter is capitalised, as sentences start. Short lines (fewer than MIN_LETTERS letters,
or a title of fewer than MIN_TITLE_WORDS words) are left alone: "USA", "OK" or "Der Park" are
ordinary text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from mt.textstats import WORD as _WORD
from mt.textstats import case_key
from mt.translation.requests import Request
from mt.translation.stages import Ask, Rounds, Stage

MIN_LETTERS = 6
MIN_TITLE_WORDS = 4
# A title: this share of its words of two letters or more capitalised. No line of
# test_2016_flickr in de, en, fr or cs has 80% as written; in Title Case 97.5-100% do (the
# rest hold a hyphenated word, `Saftig-grünes`, or an acronym, `US-Nationalmannschaft`).
TITLE_SHARE = 0.8


def case_of(text: str) -> str:
    """`upper` (all capitals), `title` (TITLE_SHARE of the words of two letters or more
    capitalised), or `usual` (anything else)."""
    letters = [c for c in text if c.isalpha()]
    cased = [c for c in letters if c.isupper() or c.islower()]
    if len(cased) >= MIN_LETTERS and all(c.isupper() for c in cased):
        return "upper"
    words = [w for w in _WORD.findall(text) if len(w) > 1]
    capitalised = sum(w[0].isupper() for w in words)
    if len(words) >= MIN_TITLE_WORDS and capitalised >= TITLE_SHARE * len(words):
        return "title"
    return "usual"


def usual_case(
    text: str,
    cost: Callable[[str], Any],
    keep_upper: bool = False,
    table: Mapping[str, str] | None = None,
) -> str:
    """`text` with each word in its spelling in `table` (mt.textstats.case_key -> spelling),
    else the spelling of least `cost` (lower case on a tie; `ss` may have been `ß`, which
    capitals write `SS`), the first letter capitalised; `keep_upper` leaves words of capitals
    alone (an acronym in a title)."""

    def word(m: Any) -> str:
        if keep_upper and len(m.group(0)) > 1 and m.group(0).isupper():
            return m.group(0)
        known = table.get(case_key(m.group(0))) if table else None
        if known is not None:
            return known
        low = m.group(0).lower()
        spellings = [low, low[:1].upper() + low[1:]]
        if "ss" in low:
            spellings += [x.replace("ss", "ß") for x in spellings]
        return min(spellings, key=cost)

    out = _WORD.sub(word, text)
    first = next((i for i, c in enumerate(out) if c.isalpha()), None)
    return out if first is None else out[:first] + out[first].upper() + out[first + 1 :]


def case_back(text: str, case: str) -> str:
    """A translation written in the source line's case."""
    if case == "upper":
        return text.upper()
    if case == "title":
        return _WORD.sub(lambda m: m.group(0)[:1].upper() + m.group(0)[1:], text)
    return text


def recase_stage(
    cost: Callable[[str], Any], table: Callable[[Request], Mapping[str, str] | None]
) -> Stage:
    """The stage (mt.translation.stages): ALL-CAPS and Title Case requests translated in their
    usual case and cased back; `table(request)` is the case table of its source language
    (None: the model has none), `cost(word)` ranks the spellings of a word it lacks
    (mt.translation.stages.spelling_cost: the source tokenizer's pieces)."""

    def rounds(requests: list[Request]) -> Rounds:
        cases = [case_of(r.src) if not (r.prefix or r.constraints) else "usual" for r in requests]
        asked = [
            r if c == "usual" else replace(r, src=usual_case(r.src, cost, c == "title", table(r)))
            for r, c in zip(requests, cases)
        ]
        out = yield Ask(asked)
        for t, c in zip(out, cases):
            if c != "usual" and not t.error:
                t.text = case_back(t.text, c)
                t.texts = [case_back(x, c) for x in t.texts]
        return out

    return rounds

"""Words as a glossary compares them: case folded, each reduced to its stem.

A translator's glossary lists a term once, in its dictionary form ("Hund" -> "hound"), and
expects it found in every form the text inflects it into ("Hunde", "Hunden"). So both the
glossary's terms and the text are cut into words and punctuation marks, each word case folded
and stemmed by the Snowball stemmer of its language (the `snowballstemmer` package: pure
Python, no data to download, 30-odd languages including German, English, French and Czech,
kept by the Snowball project itself). A stemmer rather than a lemmatizer: it needs no
dictionary, so a word no dictionary lists (a product name's plural, a compound) is still cut
the way its inflection says; and it costs microseconds a word. What it cannot do is map forms
whose stem changes (`man` / `men`, `Haus` / `Häuser` in some languages): the German stemmer
removes umlauts, so `Häuser` matches `Haus`, while English `men` stays apart from `man`.

A language without a Snowball stemmer is compared by case-folded words alone (`stemmer_name`
says which applies).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache

import snowballstemmer

from mt.languages import ISO_639_1

# A word (letters, digits, `_`) or one mark of punctuation; spaces only separate.
TOKEN = re.compile(r"\w+|[^\w\s]")

# ISO 639-1 code -> Snowball algorithm.
STEMMERS = {
    "ar": "arabic",
    "hy": "armenian",
    "eu": "basque",
    "ca": "catalan",
    "cs": "czech",
    "da": "danish",
    "nl": "dutch",
    "en": "english",
    "eo": "esperanto",
    "et": "estonian",
    "fi": "finnish",
    "fr": "french",
    "de": "german",
    "el": "greek",
    "hi": "hindi",
    "hu": "hungarian",
    "id": "indonesian",
    "ga": "irish",
    "it": "italian",
    "lt": "lithuanian",
    "ne": "nepali",
    "nb": "norwegian",
    "no": "norwegian",
    "fa": "persian",
    "pl": "polish",
    "pt": "portuguese",
    "ro": "romanian",
    "ru": "russian",
    "sr": "serbian",
    "st": "sesotho",
    "es": "spanish",
    "sv": "swedish",
    "ta": "tamil",
    "tr": "turkish",
    "yi": "yiddish",
}


def base_language(code: str | None) -> str | None:
    """`de`, `de-DE`, `de_AT`, `deu_Latn` (NLLB) -> `de`; None stays None."""
    if code is None:
        return None
    if code in ISO_639_1:
        return ISO_639_1[code]
    return re.split(r"[-_]", code.strip())[0].lower() or None


def stemmer_name(lang: str | None) -> str | None:
    """The Snowball algorithm that stems `lang` (None: words are compared case folded)."""
    base = base_language(lang)
    name = STEMMERS.get(base or "")
    return name if name in snowballstemmer.algorithms() else None


@dataclass(frozen=True)
class Word:
    """One word or mark of a text: where it is (character offsets) and what it compares as."""

    start: int
    end: int
    key: str  # the stem of the case-folded word (the mark itself for punctuation)
    folded: str  # the case-folded word, for exact comparison


def stem_function(lang: str | None) -> Callable[[str], str]:
    """Case-folded word -> its stem in `lang` (the word itself where no stemmer applies)."""
    return _stemmer(stemmer_name(lang))


@cache
def _stemmer(name: str | None) -> Callable[[str], str]:
    if name is None:
        return lambda w: w
    stemmer = snowballstemmer.stemmer(name)
    return lru_cache(maxsize=1 << 16)(stemmer.stemWord)


def words(text: str, stem: Callable[[str], str]) -> list[Word]:
    """The words and marks of `text`, each with its stem."""
    out = []
    for m in TOKEN.finditer(text):
        folded = m.group().casefold()
        key = stem(folded) if folded[0].isalnum() or folded[0] == "_" else folded
        out.append(Word(m.start(), m.end(), key, folded))
    return out

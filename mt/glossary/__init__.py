"""A glossary: the source terms a translator has fixed, each with the one target it must become.

`Glossary` holds the entries of a file (mt.glossary.files reads TSV, CSV, TBX and TMX) or of a
request (`{"Hund": "hound"}`), and finds them in a line (`find`):

- case-insensitively and at word boundaries: `Hund` is found in "Der HUND bellt", never in
  "Hundehütte" or "Hundert";
- in its inflected forms: each word is compared by its Snowball stem (mt.glossary.words), so
  `Hund` is found in "Hunden", and the multi-word `roter Hund` in "roten Hunde";
- longest match first: where "Hund" and "roter Hund" both match, the longer term wins and the
  shorter one is not found inside it; of two overlapping matches of one length, the earlier;
- where two entries share a stem (`Mann` and `Männer`), the one spelled as the text is wins,
  else the first in the file;
- a term inside a protected span (a placeholder, tag, URL: mt.spans) is left alone: the span
  comes out as written whatever the glossary says.

Entries are compared by their stems once, when the glossary is built; a line costs a stem per
word (cached) and a dictionary look-up per word.
"""

from __future__ import annotations

import hashlib
import uuid
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mt.errors import MtError
from mt.glossary.words import Word, stem_function, words


@dataclass(frozen=True)
class Entry:
    src: str
    tgt: str
    where: str = ""  # `file:line` of the entry, for the errors that name it


@dataclass(frozen=True)
class Match:
    """An entry found in a text: the characters `start:end` are a form of `entry.src`."""

    start: int
    end: int
    entry: Entry


@dataclass(eq=False)
class Glossary:
    """Entries and the languages they translate between (None: not said, taken to be the
    model's). Compared by identity: requests that share one glossary share one object."""

    entries: list[Entry]
    src_lang: str | None = None
    tgt_lang: str | None = None
    name: str = "glossary"
    _index: dict[str, list[tuple[tuple[str, ...], Entry]]] = field(
        default_factory=dict, init=False, repr=False
    )
    _keys: dict[int, tuple[str, ...]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        seen: dict[str, Entry] = {}
        for e in self.entries:
            if not e.src.strip() or not e.tgt.strip():
                side = "source" if not e.src.strip() else "target"
                raise MtError(f"{e.where or self.name}: the {side} term is empty")
            folded = " ".join(e.src.casefold().split())
            if folded in seen and seen[folded].tgt != e.tgt:
                first = seen[folded]
                raise MtError(
                    f"{e.where or self.name}: {e.src!r} is given twice, as {first.tgt!r}"
                    f"{' (' + first.where + ')' if first.where else ''} and as {e.tgt!r}"
                )
            seen.setdefault(folded, e)
        self.entries = list(seen.values())
        self._stem = stem_function(self.src_lang)
        for e in self.entries:
            key = tuple(w.key for w in words(e.src, self._stem))
            self._keys[id(e)] = key
            self._index.setdefault(key[0], []).append((key, e))
        for candidates in self._index.values():  # longest first; file order among equals
            candidates.sort(key=lambda c: -len(c[0]))
        self.token = uuid.uuid4().hex
        _BUILT[self.token] = self

    def __reduce__(self) -> tuple:
        """Pickled as its entries (the stemmer is a function, the index is rebuilt), and
        found again by `token` in a process that has it: decoding workers are forked after
        the glossary is read, so each share of requests they are sent costs no rebuilding."""
        return (_rebuilt, (self.token, self.entries, self.src_lang, self.tgt_lang, self.name))

    @property
    def digest(self) -> str:
        """What the glossary says, as a short hash: equal for equal entries and languages."""
        text = "\n".join(f"{e.src}\t{e.tgt}" for e in self.entries)
        text += f"\n{self.src_lang}\t{self.tgt_lang}"
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.entries)

    @classmethod
    def from_pairs(
        cls, pairs: Iterable[tuple[str, str]], src_lang: str | None = None, **kw: str | None
    ) -> Glossary:
        return cls([Entry(s, t) for s, t in pairs], src_lang, **kw)  # type: ignore[arg-type]

    def find(self, text: str, protected: Sequence[tuple[int, int]] = ()) -> list[Match]:
        """The terms of `text` in order of position, none overlapping another, none touching
        a `protected` (start, end) character range."""
        ws = words(text, self._stem)
        found: list[tuple[int, int, int, Match]] = []  # (-words, not exact, start, match)
        for i, w in enumerate(ws):
            for key, entry in self._index.get(w.key, ()):
                n = len(key)
                if tuple(x.key for x in ws[i : i + n]) != key:
                    continue
                start, end = w.start, ws[i + n - 1].end
                if any(s < end and start < e for s, e in protected):
                    continue
                exact = _folded(ws[i : i + n]) == _folded(words(entry.src, self._stem))
                found.append((-n, not exact, start, Match(start, end, entry)))
        found.sort(key=lambda f: f[:3])
        kept: list[Match] = []
        for _, _, _, m in found:
            if all(m.end <= k.start or k.end <= m.start for k in kept):
                kept.append(m)
        return sorted(kept, key=lambda m: m.start)


_BUILT: weakref.WeakValueDictionary[str, Glossary] = weakref.WeakValueDictionary()


def _rebuilt(
    token: str, entries: list[Entry], src_lang: str | None, tgt_lang: str | None, name: str
) -> Glossary:
    g = _BUILT.get(token)
    if g is None:
        g = Glossary(entries, src_lang, tgt_lang, name)
        del _BUILT[g.token]
        g.token = token
        _BUILT[token] = g
    return g


def _folded(ws: list[Word]) -> tuple[str, ...]:
    return tuple(w.folded for w in ws)


@dataclass(frozen=True)
class Use:
    """Where a translation writes a target term: characters `start:end`, `exact` when as
    written in the glossary (case aside), else an inflected form (same stems)."""

    start: int
    end: int
    exact: bool


def uses(term: str, text: str, lang: str | None) -> list[Use]:
    """The places `text` writes `term` (in any form of its words, at word boundaries), left
    to right, none overlapping: how a translation is checked for a glossary's target term."""
    stem = stem_function(lang)
    want = words(term, stem)
    key, folded = tuple(w.key for w in want), _folded(want)
    ws = words(text, stem)
    out: list[Use] = []
    i = 0
    while i + len(key) <= len(ws) and key:
        part = ws[i : i + len(key)]
        if tuple(w.key for w in part) == key:
            out.append(Use(part[0].start, part[-1].end, _folded(part) == folded))
            i += len(key)
        else:
            i += 1
    return out

"""Placeholders: a span of a source line as a word the model copies, and back again.

A tokenizer trained with `data.protect` reserves `｟0｠`, `｟1｠`, ...; any other gets words
spelled from ordinary pieces (`Z00`, `Z01`, ...). `mask` writes a line with its spans as
placeholders, `restore` puts each span back exactly once (a placeholder emitted twice keeps its
first occurrence, one never emitted is appended at the end), glued to its neighbours as it was
in the source; `exact` makes a translation that kept spans in place hold exactly the source's.
The protection stage (`mt.translation.protect`) decides which of these a line needs.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from mt.spans import RESERVED, Span, find_spans, gluable, placeholder, reserved_symbols
from mt.tokenizer import UNK, Tokenizer

FALLBACK_LETTERS = "ZQXJ"  # `Z00`...`Z99`; another letter when the line holds `Z00`-like text
_MARK = re.compile(r"(\s*)\ue000(\d+)\ue001(\s*)")  # a restored span before it is spelled out


class Placeholders:
    """How placeholder `k` is spelled for one tokenizer.

    A tokenizer trained with `data.protect` has one piece per index, which the model learned to
    copy. Any other tokenizer gets a letter and two digits: pieces every vocabulary has, an
    unlikely word in a translation, and all of the same length, so that no placeholder's pieces
    are a prefix of another's (the constrained search would count one for the other).
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        sym = reserved_symbols()
        self.reserved = all(
            t.piece_to_id(s) != UNK for t in (tokenizer.src, tokenizer.tgt) for s in sym
        )
        if self.reserved:
            self.letters = ""
            self.limit = RESERVED
        else:
            self.letters = (
                "".join(
                    c
                    for c in FALLBACK_LETTERS
                    if UNK not in tokenizer.encode_tgt([f"{c}01"])[0]
                    and UNK not in tokenizer.src.encode(f"{c}01")
                )
                or FALLBACK_LETTERS[0]
            )
            self.limit = 100

    def pick(self, line: str) -> str:
        """A letter whose placeholders do not occur in `line` ('' for reserved pieces)."""
        if self.reserved:
            return ""
        for c in self.letters:
            if not re.search(rf"{c}\d\d", line):
                return c
        return self.letters[0]

    def spell(self, k: int, letter: str) -> str:
        return placeholder(k) if self.reserved else f"{letter}{k:02d}"

    def finder(self, letter: str) -> re.Pattern[str]:
        if self.reserved:
            return re.compile(r"｟(\d+)｠")
        return re.compile(rf"(?<![A-Za-z0-9]){letter}(\d\d)(?![0-9])")


@dataclass
class Masked:
    """One source line with its spans replaced by placeholder words."""

    src: str
    text: str  # the words of `src` joined by single spaces, each span a placeholder word
    spans: list[Span]
    glue: list[tuple[bool, bool]]  # span k touched the text before / after it in `src`
    placeholders: list[str]
    finder: re.Pattern[str]

    @property
    def content(self) -> bool:
        """Whether anything but spans and punctuation is left to translate."""
        rest, pos = [], 0
        for s in self.spans:
            rest.append(self.src[pos : s.start])
            pos = s.end
        rest.append(self.src[pos:])
        return any(ch.isalnum() for ch in "".join(rest))


def mask(src: str, ph: Placeholders, spans: Sequence[Span] | None = None) -> Masked | None:
    """`src` with `spans` (default: `find_spans(src)`) as placeholders; None without spans.

    Past the placeholder limit, the last placeholder covers everything from there to the end of
    the last span: untranslated, but kept.
    """
    spans = list(find_spans(src) if spans is None else spans)
    if not spans:
        return None
    if len(spans) > ph.limit:
        last = spans[ph.limit - 1]
        end = spans[-1].end
        spans = spans[: ph.limit - 1] + [Span(last.start, end, "merged", src[last.start : end])]
    letter = ph.pick(src)
    texts: list[str] = []
    glue, names, pos = [], [], 0
    for k, s in enumerate(spans):
        texts += src[pos : s.start].split()
        name = ph.spell(k, letter)
        names.append(name)
        texts.append(name)
        glue.append((s.start > 0 and not src[s.start - 1].isspace(),
                     s.end < len(src) and not src[s.end].isspace()))  # fmt: skip
        pos = s.end
    texts += src[pos:].split()
    return Masked(src, " ".join(texts), spans, glue, names, ph.finder(letter))


def restore(m: Masked, out: str) -> str:
    """`out` (a translation of `m.text`) with each placeholder replaced by its span, each span
    exactly once: repeats are dropped, missing ones appended. Spans glued to their neighbours
    as in the source, unless that makes them read as other spans (then they stand apart)."""
    text = _restore(m, out, True)
    want = Counter(x.text for s in m.spans for x in find_spans(s.text))
    return text if Counter(x.text for x in find_spans(text)) == want else _restore(m, out, False)


_MARK_END = re.compile(r"\ue000(\d+)\ue001$")  # the mark just before a position
_MARK_START = re.compile(r"\ue000(\d+)\ue001")  # the mark at a position


def _beside(m: Masked, text: str, pos: int, side: int) -> str:
    """The character that will stand at `text[pos + side]` once every span is spelled out:
    the text's own, or the edge of the span whose mark is there ("" at the text's ends). A
    span the model wrote right beside another must not run into it (`42` and `17` are two
    numbers, not `4217`), though tags and placeholders may touch (`<b>%s</b>`)."""
    if side < 0:
        if pos == 0:
            return ""
        if text[pos - 1] == "\ue001":
            hit = _MARK_END.search(text, 0, pos)
            return m.spans[int(hit.group(1))].text[-1:] if hit else ""
        return text[pos - 1]
    if pos >= len(text):
        return ""
    if text[pos] == "\ue000":
        hit = _MARK_START.match(text, pos)
        return m.spans[int(hit.group(1))].text[:1] if hit else ""
    return text[pos]


def _restore(m: Masked, out: str, glue: bool) -> str:
    seen: set[int] = set()
    parts, pos = [], 0
    for hit in m.finder.finditer(out):
        parts.append(out[pos : hit.start()])
        k = int(hit.group(1))
        if k < len(m.spans) and k not in seen:
            seen.add(k)
            parts.append(f"\ue000{k}\ue001")
        pos = hit.end()
    parts.append(out[pos:])
    text = "".join(parts)
    text += "".join(f" \ue000{k}\ue001" for k in range(len(m.spans)) if k not in seen)
    text = re.sub(r"\s{2,}", " ", text).strip()

    def spell(hit: re.Match[str]) -> str:
        k = int(hit.group(2))
        can_left, can_right = gluable(m.spans[k].text)  # else a space keeps it whole
        prev, nxt = _beside(m, text, hit.start(), -1), _beside(m, text, hit.end(), 0)
        left = glue and m.glue[k][0] and (can_left or not prev.isalnum())
        right = glue and m.glue[k][1] and (can_right or not nxt.isalnum())
        before, after = hit.group(1), hit.group(3)
        # A span that stood apart in the source stands apart in the output too ("%ss" -> "%s s"),
        # from a word or from another span the model wrote beside it ("42 17", not "4217").
        if not left and not before and prev.isalnum():
            before = " "
        if not right and not after and nxt.isalnum():
            after = " "
        return ("" if left else before) + m.spans[k].text + ("" if right else after)

    return _MARK.sub(spell, text)


_PLACEHOLDERS: dict[str, Placeholders] = {}


def placeholders_for(tokenizer: Tokenizer) -> Placeholders:
    """One Placeholders per tokenizer (it encodes a few probes to decide)."""
    key = tokenizer.fingerprint()
    if key not in _PLACEHOLDERS:
        _PLACEHOLDERS[key] = Placeholders(tokenizer)
    return _PLACEHOLDERS[key]


def writable(tokenizer: Tokenizer):
    """Whether the model reads and writes a span's characters (no UNK on either side): a model
    trained on text with such spans, which translates best with them in place."""
    cache: dict[str, bool] = {}

    def writes(text: str) -> bool:
        if text not in cache:
            both = tokenizer.encode_tgt([text])[0] + tokenizer.src.encode(text)
            cache[text] = UNK not in both
        return cache[text]

    return writes


def exact(out: str, spans: list[Span], flags: Sequence[str]) -> str | None:
    """`out` holding `spans` exactly: spans it holds beyond the source's (more often, or
    others) are dropped, missing ones appended; None if that does not give the multiset."""
    want = Counter(s.text for s in spans)
    left = want.copy()
    parts, pos = [], 0
    for s in find_spans(out, flags):
        if left[s.text] > 0:
            left[s.text] -= 1
        else:
            parts.append(out[pos : s.start])
            pos = s.end
    parts.append(out[pos:])
    missing = []
    for s in spans:
        if left[s.text] > 0:
            left[s.text] -= 1
            missing.append(s.text)
    text = " ".join(("".join(parts) + " " + " ".join(missing)).split())
    return text if Counter(s.text for s in find_spans(text, flags)) == want else None

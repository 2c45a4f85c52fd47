"""Protected spans: the step around search that keeps them (`Translator(protect=True,
around=translate_protected)`, as `Session.translator` builds it).

Under protection every search bans the tokens that would write a span its source does not
hold (`mt.decode.bans`). `translate_protected` sends each request down one of four paths:

- no span (most lines): the usual search, so clean text is translated as without protection
  unless the model would have written a span of its own;
- a model that reads and writes the spans' characters (trained on text with such spans, as on
  software strings), and no tag pair in the line: the source as it is, the search allowed the
  source's own spans and no other; `exact` then drops a span written too often and appends
  one never written;
- a model that does not (trained on prose: `%` or `{` is unknown to it), or a line with tag
  pairs: the spans are lifted out and put back by alignment (`mt.decode.place`), so the text
  is translated as it would be without them, and tags nest as they did;
- a model trained with `data.protect` (its tokenizer reserves `｟0｠`, `｟1｠`, ...), or a request
  with a prefix or constraints of its own: each span becomes a placeholder word, every
  placeholder a constraint of the lexically constrained beam search, and each placeholder in
  the output is replaced by its span. A model without reserved pieces gets placeholders spelled
  from ordinary pieces (`Z00`, `Z01`, ...).

On every path each span comes back exactly as written, as often as in the source, for any
model: restoring enforces it (a placeholder emitted twice keeps its first occurrence, one never
emitted, as with greedy search or a prefix, is appended at the end). A line whose only content
is spans (`{0}`, `<br/>`) is returned as it is. Whether a span touched the text beside it
(`<b>here`, `file%d.txt`) is remembered, and it is glued the same way in the output where the
span survives it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from mt.decode.markup import text_unit
from mt.decode.place import translate_units
from mt.decode.requests import Request
from mt.decode.search import Hypothesis
from mt.decode.translator import Translation
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
        prev, nxt = text[hit.start() - 1 : hit.start()], text[hit.end() : hit.end() + 1]
        left = glue and m.glue[k][0] and (can_left or not prev.isalnum())
        right = glue and m.glue[k][1] and (can_right or not nxt.isalnum())
        before, after = hit.group(1), hit.group(3)
        # A span that stood apart in the source stands apart in the output too ("%ss" -> "%s s").
        if not left and not before and hit.start() > 0 and text[hit.start() - 1].isalnum():
            before = " "
        if not right and not after and hit.end() < len(text) and text[hit.end()].isalnum():
            after = " "
        return ("" if left else before) + m.spans[k].text + ("" if right else after)

    return _MARK.sub(spell, text)


def can_constrain(translator) -> bool:
    """Whether the translator's search accepts constraints (see Translator._constraint_ids)."""
    c = translator.cfg
    return not (
        translator.greedy
        or translator.sampling is not None
        or translator.alignment
        or c.stop_early
        or c.no_repeat_ngram
    )


_PLACEHOLDERS: dict[str, Placeholders] = {}


def placeholders_for(tokenizer: Tokenizer) -> Placeholders:
    """One Placeholders per tokenizer (it encodes a few probes to decide)."""
    key = tokenizer.fingerprint()
    if key not in _PLACEHOLDERS:
        _PLACEHOLDERS[key] = Placeholders(tokenizer)
    return _PLACEHOLDERS[key]


def masked_request(r: Request, m: Masked, constrain: bool) -> Request:
    """The request search sees: placeholders as constraints (unless a prefix is given, which
    constrained search refuses; restoring still keeps every span)."""
    constraints = r.constraints + (m.placeholders if constrain and not r.prefix else [])
    return replace(r, src=m.text, constraints=constraints)


def translate_protected(translator, requests: list[Request]) -> list:
    """`translator.translate_requests(requests)` with every span of every source kept (the
    three paths of the module's docstring), in input order."""
    ph = placeholders_for(translator.tokenizer)
    srcs = [r.src.strip() for r in requests]
    spans = [find_spans(s, r.formats) for s, r in zip(srcs, requests)]
    out: list = [None] * len(requests)
    plain = [i for i, s in enumerate(spans) if not s]
    masked = [i for i, s in enumerate(spans) if s and (ph.reserved or _asks(requests[i]))]
    placed = [i for i, s in enumerate(spans) if s and i not in set(masked)]
    units = {i: text_unit(srcs[i], spans[i]) for i in placed}
    writes = _writable(translator.tokenizer)
    in_text = [i for i in placed if not units[i].pairs and all(writes(x.text) for x in spans[i])]
    if plain:
        for i, t in zip(plain, translator.translate_requests([requests[i] for i in plain])):
            out[i] = t
    if in_text:
        reqs = [replace(requests[i], keep=tuple({x.text for x in spans[i]})) for i in in_text]
        for i, t in zip(in_text, translator.translate_requests(reqs)):
            texts = [exact(x, spans[i], requests[i].formats) for x in t.texts]
            if all(x is not None for x in texts):
                out[i] = Translation(texts[0] or "", t.hypotheses, texts, t.pieces)
        placed = [i for i in placed if out[i] is None]
    if placed:
        for i, t in zip(placed, translate_units(translator, [units[i] for i in placed])):
            out[i] = t
    masks: dict[int, Masked] = {}
    for i in masked:
        m = mask(srcs[i], ph, spans[i])
        assert m is not None
        if m.content or requests[i].prefix:
            masks[i] = m
        else:
            n = translator.cfg.nbest  # the line is its only translation, as each of the n best
            out[i] = Translation(srcs[i], [Hypothesis([], 0.0)] * n, [srcs[i]] * n)
    if masks:
        constrain = can_constrain(translator)
        reqs = [masked_request(requests[i], m, constrain) for i, m in masks.items()]
        for (i, m), t in zip(masks.items(), translator.translate_requests(reqs)):
            texts = [restore(m, x) for x in t.texts]
            out[i] = Translation(texts[0] if texts else "", t.hypotheses, texts, t.pieces)
    return out


def _writable(tokenizer: Tokenizer):
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


def _asks(r: Request) -> bool:
    """Whether a request asks for more than a translation (a prefix, constraints): placing
    by alignment needs the plain search, so such a line takes the masked path."""
    return bool(r.prefix or r.constraints)

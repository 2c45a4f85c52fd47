"""Protected spans: a step around search that masks them, constrains search, and restores them.

Each span `mt.spans` finds in a source line is replaced by a placeholder word (`Z00`,
`Z01`, ... in line order; `｟0｠`, `｟1｠`, ... when the tokenizer reserves them, see
`data.protect`), every placeholder becomes a constraint of the lexically constrained beam
search, and in the output each placeholder is replaced by the text it stands for. The guarantee
that every span comes back exactly as written, as often as in the source, holds for any model
because restoring enforces it: a placeholder the search emitted twice keeps its first
occurrence, and one it never emitted (greedy search, a prefix, a length limit) is appended at
the end. The model only decides where the spans go.

Lines without spans take the unchanged path (no constraints), so protecting clean text changes
nothing. A line whose only content is spans (`{0}`, `<br/>`) is returned as it is. Whether a
span touched its neighbours (`<b>here`, `file%d.txt`) is remembered, and restoring glues it to
the words beside it in the output the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from mt.decode.requests import Request
from mt.decode.search import Hypothesis
from mt.spans import RESERVED, Span, find_spans, placeholder, reserved_symbols
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
    words: list[tuple[int, int]]  # `src` offsets of each word of `text`
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


def mask(
    src: str, ph: Placeholders, spans: Sequence[Span] | None = None, keep_empty: bool = False
) -> Masked | None:
    """`src` with `spans` (default: `find_spans(src)`) as placeholders; None without spans
    (unless `keep_empty`: markup needs the words of every line).

    Past the placeholder limit, the last placeholder covers everything from there to the end of
    the last span: untranslated, but kept.
    """
    spans = list(find_spans(src) if spans is None else spans)
    if not spans and not keep_empty:
        return None
    if len(spans) > ph.limit:
        last = spans[ph.limit - 1]
        end = spans[-1].end
        spans = spans[: ph.limit - 1] + [Span(last.start, end, "merged", src[last.start : end])]
    letter = ph.pick(src)
    words: list[tuple[int, int]] = []
    texts: list[str] = []
    glue, names, pos = [], [], 0
    for k, s in enumerate(spans):
        for m in re.finditer(r"\S+", src[pos : s.start]):
            words.append((pos + m.start(), pos + m.end()))
            texts.append(m.group())
        name = ph.spell(k, letter)
        names.append(name)
        words.append((s.start, s.end))
        texts.append(name)
        glue.append((s.start > 0 and not src[s.start - 1].isspace(),
                     s.end < len(src) and not src[s.end].isspace()))  # fmt: skip
        pos = s.end
    for m in re.finditer(r"\S+", src[pos:]):
        words.append((pos + m.start(), pos + m.end()))
        texts.append(m.group())
    return Masked(src, " ".join(texts), spans, glue, words, names, ph.finder(letter))


def restore(m: Masked, out: str, extra: Callable[[str], str] | None = None) -> str:
    """`out` (a translation of `m.text`) with each placeholder replaced by its span, each span
    exactly once: repeats are dropped, missing ones appended. `extra` may rewrite the text
    before the spans are spelled out (markup inserts its tags there)."""
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
    if extra is not None:
        text = extra(text)

    def spell(hit: re.Match[str]) -> str:
        k = int(hit.group(2))
        left, right = m.glue[k]
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
    """`translator.translate_requests(requests)` with every span of every source kept.

    Lines without spans are translated together exactly as without protection. Lines with
    spans: with a `data.protect` tokenizer, masked and constrained (the model learned where
    placeholders go); with any other, translated without their spans, which are put back by
    alignment (`mt.decode.place`), so the text is translated as if they were not there. A
    line with a prefix or constraints of its own is masked: placing needs the plain search.
    """
    from mt.decode.markup import text_unit
    from mt.decode.place import translate_units
    from mt.decode.translator import Translation

    ph = placeholders_for(translator.tokenizer)
    spans = [find_spans(r.src) for r in requests]
    out: list = [None] * len(requests)
    plain = [i for i, s in enumerate(spans) if not s]
    if plain:
        for i, t in zip(plain, translator.translate_requests([requests[i] for i in plain])):
            out[i] = t
    inline = [i for i, s in enumerate(spans) if s and (ph.reserved or _asks(requests[i]))]
    placed = [i for i, s in enumerate(spans) if s and i not in set(inline)]
    if placed:
        units = [text_unit(requests[i].src.strip(), spans_of(requests[i].src)) for i in placed]
        for i, t in zip(placed, translate_units(translator, units)):
            out[i] = t
    todo = []
    masks = {i: mask(requests[i].src, ph, spans[i]) for i in inline}
    for i, m in masks.items():
        if not m.content and not requests[i].prefix:  # type: ignore[union-attr]
            src = requests[i].src.strip()
            out[i] = Translation(src, [Hypothesis([], 0.0)], [src])
        else:
            todo.append(i)
    if todo:
        constrain = can_constrain(translator)
        reqs = [masked_request(requests[i], masks[i], constrain) for i in todo]  # type: ignore[arg-type]
        for i, t in zip(todo, translator.translate_requests(reqs)):
            texts = [restore(masks[i], x) for x in t.texts]  # type: ignore[arg-type]
            out[i] = Translation(texts[0] if texts else "", t.hypotheses, texts, t.pieces)
    return out


def _asks(r: Request) -> bool:
    """Whether a request asks for more than a translation (a prefix, constraints)."""
    return bool(r.prefix or r.constraints)


def spans_of(src: str) -> list[Span]:
    """The spans of a stripped source line (offsets as `text_unit` sees it)."""
    return find_spans(src.strip())

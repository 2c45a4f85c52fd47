"""Protected spans: the stage (mt.translation.stages) that keeps them, for a request whose plan
says `protect`.

Under protection every search bans the tokens that would write a span its source does not
hold (`mt.spans.bans`). `protect_stage` sends each request down one of four paths:

- no span (most lines): the usual search, so clean text is translated as without protection
  unless the model would have written a span of its own;
- a model that reads and writes the spans' characters (trained on text with such spans, as on
  software strings), and no tag pair in the line: the source as it is, the search allowed the
  source's own spans and no other; `exact` then drops a span written too often and appends
  one never written;
- a model that does not (trained on prose: `%` or `{` is unknown to it), or a line with tag
  pairs: the spans are lifted out and put back by alignment (`mt.spans.place`), so the text
  is translated as it would be without them, and tags nest as they did;
- a model trained with `data.protect` (its tokenizer reserves `｟0｠`, `｟1｠`, ...), or a request
  with a prefix or constraints of its own: each span becomes a placeholder word, every
  placeholder a constraint of the lexically constrained beam search, and each placeholder in
  the output is replaced by its span. A model without reserved pieces gets placeholders spelled
  from ordinary pieces (`Z00`, `Z01`, ...).

On every path search may also write the spans its text holds that the request's formats read as
text (`%qD` without gettext's flags, `{0}` in a `c-format` string): the ban is for spans a
model invents, and copying the source's own text is translating it.

On every path each span comes back exactly as written, as often as in the source, for any
model: restoring enforces it (a placeholder emitted twice keeps its first occurrence, one never
emitted, as with greedy search or a prefix, is appended at the end). A line whose only content
is spans (`{0}`, `<br/>`) is returned as it is. Whether a span touched the text beside it
(`<b>here`, `file%d.txt`) is remembered, and it is glued the same way in the output where the
span survives it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from mt.search.steps import Hypothesis
from mt.spans import WIDEST, find_spans
from mt.spans.markup import text_unit
from mt.spans.place import Unit, fold_wordless, lift, place
from mt.spans.placeholders import Masked, exact, mask, placeholders_for, restore, writable
from mt.tokenizer import Tokenizer
from mt.translation.requests import Request, Translation
from mt.translation.stages import Ask, Rounds, Stage


@dataclass(frozen=True)
class SearchBelow:
    """What the protection stage must know of the search below it (no translator)."""

    tokenizer: Tokenizer
    nbest: int
    constrain: bool  # the search takes constraints (`mt.decode_rules.can_constrain`)


def masked_request(r: Request, m: Masked, constrain: bool) -> Request:
    """The request search sees: placeholders as constraints (unless a prefix is given, which
    constrained search refuses; restoring still keeps every span)."""
    constraints = r.constraints + (m.placeholders if constrain and not r.prefix else [])
    return _writing(replace(r, src=m.text, constraints=constraints), m.text)


def _writing(r: Request, text: str, spans: tuple[str, ...] = ()) -> Request:
    """`r` with the spans search may write: `spans` (the protected spans of a line
    translated as it is) and the text `text` search reads holds verbatim though the
    request's formats do not count it a span (`%qD` in a line without gettext's flags, where
    it is text). The ban forbids the spans a model would invent; text the source holds is
    the model's to copy, and banning it cost the line its words (`%qD sollte initialisiert
    werden` came out as `initialized uninitialized ...`)."""
    found = spans + tuple(x.text for x in find_spans(text, WIDEST))
    return replace(r, keep=tuple(dict.fromkeys(found))) if found else r


def protect_stage(s: SearchBelow) -> Stage:
    """The stage: every span of every source kept (the paths of the module's docstring)."""
    return lambda requests: _protected(s, requests)


def _protected(s: SearchBelow, requests: list[Request]) -> Rounds:
    ph = placeholders_for(s.tokenizer)
    srcs = [r.src.strip() for r in requests]
    spans = [find_spans(x, r.formats) for x, r in zip(srcs, requests)]
    out: list = [None] * len(requests)
    plain = [i for i, x in enumerate(spans) if not x]
    masked = [i for i, x in enumerate(spans) if x and (ph.reserved or _asks(requests[i]))]
    placed = [i for i, x in enumerate(spans) if x and i not in set(masked)]
    units = {i: text_unit(srcs[i], spans[i]) for i in placed}
    writes = writable(s.tokenizer)
    in_text = [i for i in placed if not units[i].pairs and all(writes(x.text) for x in spans[i])]
    # The plain lines and those translated as they are share one round, so they are batched
    # as without protection (a round of its own for each would cost search steps).
    keep = {i: tuple({x.text for x in spans[i]}) for i in in_text}
    first = sorted(plain + in_text)
    if first:
        reqs = [_writing(requests[i], srcs[i], keep.get(i, ())) for i in first]
        done = yield Ask(reqs)
        for i, t in zip(first, done):
            if i not in keep:
                out[i] = t
                continue
            texts = [exact(x, spans[i], requests[i].formats) for x in t.texts]
            if all(x is not None for x in texts):
                out[i] = Translation(texts[0] or "", t.hypotheses, texts, t.pieces)
        placed = [i for i in placed if out[i] is None]
    if placed:
        done = yield from units_rounds(s, [units[i] for i in placed])
        for i, t in zip(placed, done):
            out[i] = t
    masks: dict[int, Masked] = {}
    for i in masked:
        m = mask(srcs[i], ph, spans[i])
        assert m is not None
        if m.content or requests[i].prefix:
            masks[i] = m
        else:
            out[i] = unchanged(srcs[i], s.nbest)
    if masks:
        reqs = [masked_request(requests[i], m, s.constrain) for i, m in masks.items()]
        done = yield Ask(reqs)
        for (i, m), t in zip(masks.items(), done):
            texts = [restore(m, x) for x in t.texts]
            out[i] = Translation(texts[0] if texts else "", t.hypotheses, texts, t.pieces)
    return out


def unchanged(line: str, nbest: int) -> Translation:
    """A line that is its only translation (nothing but spans), as each of the n best."""
    return Translation(line, [Hypothesis([], 0.0)] * nbest, [line] * nbest)


def units_rounds(s: SearchBelow, units: list[Unit]) -> Rounds:
    """Translations of `units`, in order: the text translated as if it had no spans (one
    round of search with alignments), the spans and tags put back. A unit with nothing but
    spans comes back as it is."""
    units = [fold_wordless(u) for u in units]
    out: list = [None] * len(units)
    todo, lifts = [], []
    for i, u in enumerate(units):
        lifted = lift(u.text, u.atoms)
        if not re.search(r"\w", lifted.text):
            out[i] = unchanged(u.line.strip(), s.nbest)
        else:
            todo.append(i)
            lifts.append(lifted)
    asks = [_writing(Request(x.text), x.text) for x in lifts]
    results = (yield Ask(asks, alignment=True)) if todo else []
    for i, lifted, t in zip(todo, lifts, results):
        texts = [place(s.tokenizer, units[i], lifted, h.tokens, h.alignment) for h in t.hypotheses]
        out[i] = Translation(texts[0], t.hypotheses, texts, t.pieces)
    return out


def _asks(r: Request) -> bool:
    """Whether a request asks for more than a translation (a prefix, constraints): placing
    by alignment needs the plain search, so such a line takes the masked path."""
    return bool(r.prefix or r.constraints)

"""Numbers kept: every digit sequence of the source appears in its translation.

A model drops or changes digits now and then (a year, a price, a time), and a reader trusts a
translation's numbers more than its words. Separators may change with the language (`2.500`
-> `2,500`, `3,5` -> `3.5`), so numbers are compared by their digits: `2.500` and `2,500`
are one number, `2500`.

`kept(src, out)` is the check (`mt eval --check-numbers` reports its rate); `numbers_stage`
is the guard: a line whose translation lost a number of its source is translated again with each of
its numbers as a placeholder word, through the protection machinery (mt.spans.placeholders:
`Z00`-style placeholders, all of one length, constraints of the beam search where it can
take them), and each placeholder is replaced by its number as the source wrote it, exactly
once; one the model never wrote is appended at the end. Only the lines that lost a number pay
for the second search. Constraining the numbers themselves was tried first and measured
worse: a number that begins another (`10` and `100000`) counts as written
(docs/studies/text-as-people-send-it.md). Separators are the source's (`2.500` stays `2.500`
in English).
"""

from __future__ import annotations

import re
from collections import Counter

from mt.spans import WIDEST, Span, find_spans
from mt.spans.placeholders import mask, placeholders_for, restore
from mt.tokenizer import Tokenizer
from mt.translation.doubt import Bounds, flags
from mt.translation.protect import masked_request
from mt.translation.requests import Request
from mt.translation.stages import Ask, Rounds, Stage

# Digits, with `.`, `,`, `:`, thin or no-break spaces between groups (`2.500`, `3,5`,
# `10 000`, a time `14:35`): one number, so a time is put back whole.
NUMBER = re.compile(r"\d+(?:[.,:\u202f\u00a0]\d+)*")


def number_matches(text: str) -> list[re.Match[str]]:
    """The numbers of `text`, but those inside a protected span (`{1}`, `%1$s`, a URL, a tag's
    attribute): such a span is kept whole by the protection stage, and its digits are part of
    it, not a number a reader checks."""
    found = list(NUMBER.finditer(text))
    if not found:
        return found
    # Both readings: the default formats' (`%L2`, Qt's) and the widest's (`%L` then `2`).
    spans = find_spans(text) + find_spans(text, WIDEST)
    return [m for m in found if not any(s.start < m.end() and m.start() < s.end for s in spans)]


def span_texts(text: str) -> tuple[list[str], list[str]]:
    """The protected spans of `text` in both readings. A number glued to other text, once a
    placeholder word, can make a span of what was none (`x.de/a?b=` after `b=1` is masked), so
    the guard leaves a line as translated where masking changes these."""
    return [s.text for s in find_spans(text)], [s.text for s in find_spans(text, WIDEST)]


def numbers(text: str) -> list[str]:
    """The numbers of `text` as written (outside protected spans)."""
    return [m.group() for m in number_matches(text)]


def digits(number: str) -> str:
    return re.sub(r"\D", "", number)


def missing(src: str, out: str) -> list[str]:
    """The numbers of `src` (as written) whose digits `out` lacks, as often as it lacks them."""
    have = Counter(digits(n) for n in numbers(out))
    lost = []
    for n in numbers(src):
        d = digits(n)
        if have[d] > 0:
            have[d] -= 1
        else:
            lost.append(n)
    return lost


def kept(src: str, out: str) -> bool:
    return not missing(src, out)


def kept_rate(sources: list[str], outputs: list[str]) -> dict[str, float]:
    """`mt eval --check-numbers`: of the lines whose source has digits, the share (in %) whose
    translation keeps every number."""
    pairs = [(s, o) for s, o in zip(sources, outputs) if numbers(s)]
    rate = sum(kept(s, o) for s, o in pairs) / len(pairs) if pairs else 1.0
    return {"lines": len(pairs), "kept": round(100 * rate, 2)}


def numbers_stage(tokenizer: Tokenizer, constrain: bool, bounds: Bounds) -> Stage:
    """The guard, as a stage (mt.translation.stages): the lines that lost a number translated
    again with their numbers as placeholders, put back as written (a request with a prefix
    or constraints of its own is left as it is); `constrain`: the search takes constraints;
    `bounds`: the length bounds the new translation is flagged with."""
    ph = placeholders_for(tokenizer)

    def rounds(requests: list[Request]) -> Rounds:
        out = yield Ask(requests)
        retry = [
            i
            for i, (r, t) in enumerate(zip(requests, out))
            if not (t.error or r.prefix or r.constraints) and missing(r.src, t.text)
        ]
        masks = {}
        for i in retry:
            src = requests[i].src.strip()
            spans = [Span(m.start(), m.end(), "number", m.group()) for m in number_matches(src)]
            masked = mask(src, ph, spans)
            if masked is not None and span_texts(masked.text) == span_texts(src):
                masks[i] = masked
        again = [masked_request(requests[i], m, constrain) for i, m in masks.items() if m]
        second = (yield Ask(again, isolate=True)) if again else []
        for (i, m), t in zip(((i, m) for i, m in masks.items() if m), second):
            if t.error:
                continue
            t.texts = [restore(m, x) for x in t.texts]
            t.text = t.texts[0] if t.texts else restore(m, t.text)
            t.flags = flags(requests[i].src, t.text, bounds(requests[i]))
            out[i] = t
        return out

    return rounds

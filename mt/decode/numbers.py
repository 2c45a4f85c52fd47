"""Numbers kept: every digit sequence of the source appears in its translation.

A model drops or changes digits now and then (a year, a price, a time), and a reader trusts a
translation's numbers more than its words. Separators may change with the language (`2.500`
-> `2,500`, `3,5` -> `3.5`), so numbers are compared by their digits: `2.500` and `2,500`
are one number, `2500`.

`kept(src, out)` is the check (`mt eval --check-numbers` reports its rate); `guarded` is the
guard: a line whose translation lost a number of its source is translated again with every
number of its source, as written, a constraint of the lexically constrained beam search
(mt.decode.constrained), which writes every constraint. Only the lines that lost one pay for
the second search, and the first translation stays where the second loses as many. A number
with a digit the target vocabulary cannot spell (UNK) is not asked for.
Greedy search and sampling have no constrained search: there the guard only checks. A number
that begins another number of its line (`3` beside `35`) can be taken by the search for the
start of the longer one (constraints are pieces, not words).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from mt.decode.requests import Request
from mt.decode.translator import Translation, Translator, isolated
from mt.tokenizer import UNK

# Digits, with `.`, `,`, thin or no-break spaces between groups (`2.500`, `3,5`, `10 000`);
# a time's `:` separates two numbers.
NUMBER = re.compile(r"\d+(?:[.,\u202f\u00a0]\d+)*")


def numbers(text: str) -> list[str]:
    """The numbers of `text` as written."""
    return NUMBER.findall(text)


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
    pairs = [(s, o) for s, o in zip(sources, outputs) if NUMBER.search(s)]
    rate = sum(kept(s, o) for s, o in pairs) / len(pairs) if pairs else 1.0
    return {"lines": len(pairs), "kept": round(100 * rate, 2)}


def guarded(translator: Translator) -> Callable[[list[Request]], list[Translation]]:
    """`translator.translate`, with the lines that lost a number translated again with the
    lost numbers as constraints (beam search only; a request that has a prefix or constraints
    of its own is left as it is)."""
    c = translator.cfg  # what constrained search cannot combine with: the guard only checks
    beam = not (translator.greedy or translator.sampling is not None or translator.alignment)
    beam = beam and not (c.stop_early or c.no_repeat_ngram)

    def writable(r: Request) -> list[str]:
        """The source's numbers the target vocabulary can spell (no piece unknown)."""
        found = numbers(r.src)
        ids = translator.tokenizer.encode_tgt(found) if found else []
        return [n for n, i in zip(found, ids) if UNK not in i]

    def translate(requests: list[Request]) -> list[Translation]:
        out = translator.translate(requests)
        if not beam:
            return out
        retry = [
            i
            for i, (r, t) in enumerate(zip(requests, out))
            if not (t.error or r.prefix or r.constraints) and missing(r.src, t.text)
        ]
        if not retry:
            return out
        again = [replace(requests[i], constraints=writable(requests[i])) for i in retry]
        keep = [k for k, r in enumerate(again) if r.constraints]
        retry, again = [retry[k] for k in keep], [again[k] for k in keep]
        second = isolated(translator.translate, again)
        for i, t in zip(retry, second):
            if not t.error and len(missing(requests[i].src, t.text)) < len(
                missing(requests[i].src, out[i].text)
            ):
                out[i] = t
        return out

    return translate

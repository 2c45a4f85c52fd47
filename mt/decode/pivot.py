"""Translation through a pivot language with one multilingual model: src -> pivot -> target.

The comparison point for zero-shot directions (de->fr from a model trained on X<->en only):
the same model, asked twice, through the language it has seen with both. Wraps the translator
from outside, buffer by buffer, so input order, streaming and one line out per line in hold.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import replace

from mt.decode.requests import Request
from mt.decode.translator import Translation, Translator
from mt.errors import MtError


def translate_via(
    translator: Translator, requests: Iterable[Request], pivot: str
) -> Iterator[Translation]:
    """Each request translated into `pivot`, then that into the request's target language."""
    targets = translator.targets
    if targets.languages is None:
        raise MtError("--pivot needs a multilingual model; this one translates one pair")
    targets.languages.check(pivot, None, "--pivot")
    it = iter(requests)
    while True:
        chunk = list(itertools.islice(it, translator.cfg.buffer_lines))
        if not chunk:
            return
        ends = [targets.resolve(r.to, where=r.where) for r in chunk]
        middle = translator.translate(
            [replace(r, to=pivot, prefix="", constraints=[]) if r.src.strip() else r for r in chunk]
        )
        # The second leg keeps what the request asked for (prefix, constraints, formats).
        yield from translator.translate(
            [replace(r, src=m.text, to=end, frm=None) for m, r, end in zip(middle, chunk, ends)]
        )

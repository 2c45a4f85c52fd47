"""Translation through a pivot language with one multilingual model: src -> pivot -> target.

The comparison point for zero-shot directions (de->fr from a model trained on X<->en only):
the same model, asked twice, through the language it has seen with both. A stage
(mt.translation.stages): two rounds of search per buffer, so input order, streaming and one line
out per line in hold.
"""

from __future__ import annotations

from dataclasses import replace

from mt.errors import MtError
from mt.translation.requests import Request
from mt.translation.stages import Ask, Rounds, Stage
from mt.translation.target import Targets


def check_pivot(targets: Targets, pivot: str) -> None:
    """A pivot needs a multilingual model that writes `pivot`: one line naming the flag."""
    if targets.languages is None:
        raise MtError("--pivot needs a multilingual model; this one translates one pair")
    targets.languages.check(pivot, None, "--pivot")


def pivot_stage(targets: Targets, pivot: str) -> Stage:
    """Each request translated into `pivot`, then that into the request's target language."""
    check_pivot(targets, pivot)

    def rounds(requests: list[Request]) -> Rounds:
        ends = [targets.resolve(r.to, where=r.where) for r in requests]
        middle = yield Ask(
            [
                replace(r, to=pivot, prefix="", constraints=[]) if r.src.strip() else r
                for r in requests
            ]
        )
        # The second leg keeps what the request asked for (prefix, constraints, formats).
        return (
            yield Ask(
                [
                    replace(r, src=m.text, to=end, frm=None)
                    for m, r, end in zip(middle, requests, ends)
                ]
            )
        )

    return rounds

"""HTML fragments: a stage (mt.translation.stages) for requests whose plan says `html`.

Each request's source is one fragment; its markup is parsed (mt.spans.markup: malformed input
is one `FILE:LINE` error, the request's `where`), its text translated in one round of search
with alignments, and its tags and atoms (with `protect`, the spans of the text too) put back
by alignment (mt.spans.place), nested as they were.
"""

from __future__ import annotations

from mt.spans.markup import html_unit, parse_fragment
from mt.translation.protect import SearchBelow, units_rounds
from mt.translation.requests import Request
from mt.translation.stages import Rounds, Stage


def html_stage(search: SearchBelow, protect: bool) -> Stage:
    def rounds(requests: list[Request]) -> Rounds:
        units = [html_unit(parse_fragment(r.src, r.where), protect) for r in requests]
        return (yield from units_rounds(search, units))

    return rounds

"""The steps around search a caller chooses, each defined once: `PlanOptions`.

Protection, capitals, the number guard, sentences, a pivot language and a glossary are steps a
request takes around search (mt.translation.stages); a request carries them as its `Plan`
(mt.translation.requests: `Plan.of` these options). Each option is one field below with its one
description, and every door is made from the fields, as DecodeConfig's settings are: the flags
of `mt translate`, `mt eval` and `mt serve` (mt.cli.options.plan_flags), the keys of a
`/v1/translate` body a request chooses itself, with their JSON schema (each field's `request`
key, read by mt.serve.bodies), `mt serve`'s configuration (`ServeConfig.plan`), the description
of a job shared out (`mt translate --shard`) and the rules (mt.decode_rules.plan_checks).
`OFFERED` says which door offers which option, as mt.translation.options.OFFERED does for the
decode settings. This module imports no torch: the CLI builds its flags from it when it starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mt.schema import Key


def step(default: Any, text: str, metavar: str | None = None, request: Key | None = None) -> Any:
    """A plan option: its default and its one description (the flag's help), the flag's
    `metavar`, and `request`: the key a `/v1/translate` body chooses it by, when a request may
    (its own type there: a glossary is its terms, not a file)."""
    meta = {"help": " ".join(text.split()), "metavar": metavar, "request": request}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class PlanOptions:
    """What a caller chose of the steps around search; the defaults are `mt translate`'s."""

    protect: bool = step(
        True,
        "Keep placeholders (%s, {0}, $VAR), entities, tags, URLs and e-mail addresses "
        "exactly as written (docs/decoding.md: Software strings and HTML).",
    )
    pivot: str | None = step(
        None, "Translate through this language (a multilingual model): src->pivot->to."
    )
    split_sentences: bool = step(
        False,
        "Cut each line into sentences and translate those (one output line per input "
        "line stays): for paragraphs.",
        request=Key(
            "split_sentences",
            {
                "type": "boolean",
                "description": "translate each item sentence by sentence (default true; off "
                "with alignment)",
            },
            "true or false",
            default=True,
        ),
    )
    recase: bool = step(
        True,
        "Translate an ALL-CAPS or Title Case line in its usual case and write the "
        "output back in the line's case.",
    )
    keep_numbers: bool = step(
        True,
        "Translate a line that lost a number of its source again, its numbers as "
        "placeholders put back as written, so every number comes through (only such lines "
        "pay a second search).",
    )
    glossary: Path | None = step(
        None,
        "Terms the translation must use: TSV or CSV (source, target; a first row of "
        "language codes is a header), TBX or TMX. Terms are found in any case and inflected "
        "form; a line that misses one is translated again with it as a constraint.",
        metavar="FILE",
        request=Key(
            "glossary",
            {
                "description": 'terms every translation must use ({"Hund": "hound"}) or the '
                "id of an uploaded glossary (POST /v1/glossaries)",
                "oneOf": [
                    {"type": "object", "additionalProperties": {"type": "string"}},
                    {"type": "string"},
                ],
            },
            "an object of terms or an id",
        ),
    )
    glossary_hard: bool = step(
        False,
        "Constrain every term a --glossary finds from the first search: its target "
        "verbatim, one search, the model's inflection of it lost.",
    )
    glossary_soft: bool = step(
        False,
        "The --glossary terms written into the source (a model trained with terms, "
        "data.terms) and / or raised by --glossary-boost, and nothing more: one search at "
        "full speed, no constraint, no second search for a line that misses a term.",
    )


# The options each door lets a caller choose, by PlanOptions' names; the rest keep their
# defaults there.
OFFERED: dict[str, tuple[str, ...]] = {
    "translate": (
        "protect", "pivot", "split_sentences", "recase", "keep_numbers", "glossary",
        "glossary_hard", "glossary_soft",
    ),
    "eval": (  # the pivot is a route between languages, not a step to score
        "protect", "split_sentences", "recase", "keep_numbers", "glossary", "glossary_hard",
        "glossary_soft",
    ),
    "serve": ("keep_numbers", "glossary", "glossary_hard"),  # the server's, for every request
    "request": ("split_sentences", "glossary"),  # a /v1/translate body's own (`request` keys)
}  # fmt: skip

"""The rules of what a caller asks of one decode, beside a config's own (mt.config_rules): its
overrides of a checkpoint's decode settings, the searches that take constraints, and the steps
around search it chooses (mt.plan). Each rule lives here once; the session, the translator, the
commands and the server ask it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from mt.config import DecodeConfig
from mt.config_bounds import raise_first
from mt.config_decode import validate_decode
from mt.errors import MtError
from mt.plan import PlanOptions
from mt.search.dispatch import is_greedy


def _key(key: str) -> str:
    return key


# Settings that mean something only with another switched on (DecodeConfig's `needs`).
NEEDS = {
    f.name: f.metadata["needs"] for f in dataclasses.fields(DecodeConfig) if f.metadata.get("needs")
}


def explicit_search(given: dict[str, Any], n: Callable[[str], str] = _key) -> dict[str, Any]:
    """The search a caller's options ask for wins over the checkpoint's default search.

    A checkpoint names a default search (an imported OPUS-MT folder without `num_beams` says
    greedy); a caller who gives `--beam 4` or `--nbest 2` means beam search, and `--sample`
    means sampling, whatever that default. Only the caller's own flags can contradict each
    other, and then the caller must choose: one line. Returns `given` with the switches of the
    other searches turned off where the caller did not set them."""
    out = dict(given)
    wide = next(
        (f"{n('decode.' + k)} {given[k]}" for k in ("beam", "nbest") if given.get(k, 1) > 1),
        None,
    )
    if given.get("greedy") and wide is not None:
        raise MtError(
            f"{n('decode.greedy')} and {wide} contradict each other: greedy search keeps one "
            f"hypothesis; give one of them"
        )
    if wide is not None or given.get("sample"):
        out.setdefault("greedy", False)
    if wide is not None or given.get("greedy"):
        out.setdefault("sample", False)
    return out


def with_overrides(
    d: DecodeConfig, given: dict[str, Any], device: str, name: Callable[[str], str] = _key
) -> DecodeConfig:
    """The decode settings `d` (a checkpoint's) with a caller's `given` overrides applied and
    checked, for a decode on `device` ("cpu", "cuda"): an override that needs a switch the
    caller left off, searches the caller asked for at once, then the settings' own rules."""
    knob = next((k for k, on in NEEDS.items() if k in given and not given.get(on)), None)
    if knob is not None:
        raise MtError(f"{name('decode.' + knob)} needs {name('decode.' + NEEDS[knob])}")
    if given.get("sample") and ("beam" in given or given.get("greedy")):
        raise MtError(
            f"{name('decode.sample')} draws one output per line: it cannot be combined with "
            f"{name('decode.greedy')}, {name('decode.beam')} or {name('decode.nbest')}"
        )
    out = dataclasses.replace(d, **explicit_search(given, name))
    validate_decode(out, name)
    if out.int8 and device != "cpu":
        raise MtError(f"int8 decoding ({name('decode.int8')}) runs on CPU only; use the CPU")
    return out


def constraint_checks(d: DecodeConfig, alignment: bool) -> list[tuple[bool, str]]:
    """Whether a search with these settings can take constraints (target phrases a request
    gives, or the placeholders and terms the protection, numbers and glossary stages turn into
    constraints): beam search, and none of the settings the constrained beam search does not
    implement (mt.search.constrained)."""
    return [
        (
            not (is_greedy(d) or d.sample),
            "constraints need beam search: drop --greedy / --sample (or beam 1)",
        ),
        (
            not (alignment or d.stop_early or d.no_repeat_ngram),
            "constraints cannot be combined with --alignment, --stop-early or --no-repeat-ngram",
        ),
    ]


def can_constrain(d: DecodeConfig, alignment: bool) -> bool:
    """`constraint_checks` all pass: the one rule the translator, the stages and the server's
    glossary check ask."""
    return all(ok for ok, _ in constraint_checks(d, alignment))


def validate_constraints(d: DecodeConfig, alignment: bool) -> None:
    """One line saying why a search with these settings takes no constraints, if it takes none."""
    raise_first(constraint_checks(d, alignment))


def plan_checks(
    plan: PlanOptions, html: bool = False, alignment: bool = False
) -> list[tuple[bool, str]]:
    """The rules of the steps around search a caller chose (mt.plan), for a decode whose
    source is HTML (`html`) or that writes alignments (`alignment`): a paragraph cut into
    sentences has no one alignment, and a glossary's terms are found in plain text."""
    return [
        (
            not (plan.split_sentences and (plan.pivot is not None or alignment or html)),
            "--split-sentences cannot be combined with --pivot, --alignment or html",
        ),
        (
            not plan.glossary_hard or plan.glossary is not None,
            "--glossary-hard needs --glossary FILE",
        ),
        (
            not plan.glossary_soft or plan.glossary is not None,
            "--glossary-soft needs --glossary FILE",
        ),
        (
            not (plan.glossary_soft and plan.glossary_hard),
            "--glossary-soft and --glossary-hard cannot be combined",
        ),
        (
            plan.glossary is None or not (plan.pivot is not None or html),
            "--glossary cannot be combined with --pivot or --input-format html",
        ),
    ]


def validate_plan(plan: PlanOptions, html: bool = False, alignment: bool = False) -> None:
    """One line for the first rule of `plan_checks` the options break."""
    raise_first(plan_checks(plan, html, alignment))

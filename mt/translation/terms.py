"""Glossaries: the stage (mt.translation.stages) that makes a translation use a request's terms.

A request may carry a glossary (`--glossary FILE`, a server request's `"glossary"`); its terms
are found in the source (mt.glossary: case-insensitively, at word boundaries, in inflected
forms, longest first, none inside a protected span), and the translation must write each one's
target term. The lexically constrained beam search (mt.search.constrained) is what guarantees
it; the stage decides which phrases it is given:

- the guard (the default): the line is translated as usual, and kept when its translation
  already writes every term's target in some form of its words (`hounds` for `hound`: the
  model inflected it for the sentence). A line that misses one is translated again with
  constraints: the missing targets as the glossary writes them, and the terms it had, in the
  form it wrote them, so the second translation keeps what the first got right. Only lines
  that missed a term pay for constrained search.
- hard (`--glossary-hard`, `Plan.glossary_hard`): every found term's target, verbatim, is a
  constraint of the first and only search: one search, the exact forms, the model's
  inflection lost.

A model trained with terms (`data.terms`; its tokenizer holds the markers:
mt.glossary.inline.takes_terms) is told its terms in the source: every search of a line with
terms reads it annotated (`｟term｠ Hund｟to｠ dog｟/term｠`), so a model that learnt to read
them writes the terms itself, inflected, and the guard or the hard path above add
constraints where it must (docs/decoding.md measures how much a small model learns).
`Plan.glossary_soft` (`--glossary-soft`) is the annotation alone: one search, no constraint,
no second search (such a model only).

With `decode.glossary_boost` > 0 the first search of a line with terms (the guard's, the soft
one's) raises the terms' pieces (mt.glossary.boost): the model writes more of them itself,
inflected, so fewer lines need the guard's constrained second search; and `--glossary-soft`
then works with any model, the boost alone.

A line without a term, a request without a glossary, and a request with a prefix (constrained
search takes none) are passed down untouched, so they translate exactly as without the
glossary. A glossary applies to requests into its own target language; its terms are checked
in a translation by that language's stemmer.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from mt.errors import MtError
from mt.glossary import Match, uses
from mt.glossary.inline import annotate
from mt.glossary.words import base_language
from mt.search.steps import Hypothesis
from mt.spans import find_spans
from mt.translation.requests import Request, Translation
from mt.translation.stages import Ask, Rounds, Stage

NEEDS_BEAM = (
    "a glossary needs the constrained beam search: drop --greedy, --sample, --alignment, "
    "--stop-early and --no-repeat-ngram"
)
NEEDS_TERMS = (
    "--glossary-soft needs a model trained with terms (data.terms) or --glossary-boost: "
    "this model's tokenizer has no term markers"
)


def terms_of(r: Request) -> list[Match]:
    """The glossary terms of request `r`'s source (none when it has no glossary, a prefix,
    or a target language other than its glossary's)."""
    g = r.glossary
    if g is None or r.prefix or not r.src.strip():
        return []
    if r.to is not None and g.tgt_lang is not None:
        if base_language(r.to) != base_language(g.tgt_lang):
            return []
    protected = [(s.start, s.end) for s in find_spans(r.src, r.formats)]
    return g.find(r.src, protected)


def glossary_stage(
    constrain: bool, hard: bool, inline: bool = False, soft: bool = False, boost: bool = False
) -> Stage:
    """The stage: `constrain` says whether the search below takes constraints (a glossary
    with terms to apply is refused otherwise); `hard`: every term a constraint at once;
    `inline`: the model takes terms written into its source; `boost`: the search below
    raises a request's favoured terms (decode.glossary_boost). `soft` is the first search
    alone: it needs the annotation or the boost."""
    if soft and hard:
        raise MtError("--glossary-soft and --glossary-hard cannot be combined")
    if soft and not (inline or boost):
        raise MtError(NEEDS_TERMS)

    def rounds(requests: list[Request]) -> Rounds:
        found = {i: ms for i, r in enumerate(requests) if (ms := terms_of(r))}
        requests = list(requests)
        for i, ms in found.items():
            src = requests[i].src
            if inline:
                src = annotate(src, [(m.start, m.end, m.entry.tgt) for m in ms])
            # The first search favours the terms where the boost is on (the hard path's
            # constraints are the terms themselves).
            favour = [m.entry.tgt for m in ms] if boost and not hard else []
            # Of the first search's outputs, the best one holding every term is taken.
            prefer = [m.entry.tgt for m in ms] if not hard else []
            requests[i] = replace(requests[i], src=src, favour=favour, prefer=prefer)
        if soft:
            return (yield Ask(requests))
        if found and not constrain:
            raise MtError(NEEDS_BEAM)
        if hard:
            asked = list(requests)
            for i, ms in found.items():
                asked[i] = _constrained(requests[i], [m.entry.tgt for m in ms])
            return (yield Ask(asked))
        done = yield Ask(requests)
        again: dict[int, list[str]] = {}
        for i, ms in found.items():
            if done[i].error:
                continue
            phrases, complete = written(ms, done[i].text, requests[i].glossary.tgt_lang)  # type: ignore[union-attr]
            if not complete:
                again[i] = phrases
        if again:
            asked = [_constrained(requests[i], phrases) for i, phrases in again.items()]
            second: list[Translation] = yield Ask(asked, isolate=True)
            for i, t in zip(again, second):
                if not t.error:
                    done[i] = t
        return done

    return rounds


def written(matches: list[Match], text: str, lang: str | None) -> tuple[list[str], bool]:
    """The phrases that make a translation hold every term of `matches`: each target as
    `text` writes it where it does (as often as the source has the term), else as the
    glossary writes it; and whether `text` already holds them all."""
    wanted = Counter(m.entry.tgt for m in matches)
    phrases: list[str] = []
    complete = True
    for tgt, n in wanted.items():
        found = uses(tgt, text, lang)
        phrases += [text[u.start : u.end] for u in found[:n]]
        if len(found) < n:
            complete = False
            phrases.append(tgt)
    return list(dict.fromkeys(phrases)), complete


def missing(terms: list[str], text: str, lang: str | None, exact: bool = False) -> list[str]:
    """The terms of `terms` that `text` does not write in some form of its words (`exact`: as
    the glossary writes them, case aside), each as many times as it falls short."""
    out: list[str] = []
    for t, n in Counter(terms).items():
        out += [t] * max(0, n - sum(exact <= u.exact for u in uses(t, text, lang)))
    return out


def preferred(
    hyps: list[Hypothesis], texts: list[str], r: Request, nbest: int
) -> tuple[list[Hypothesis], list[str]]:
    """Search's outputs for `r` (best first, with their `texts`), cut to `nbest`; where `r`
    prefers terms and its best output misses some, the best output that writes them goes
    first: every term in some form, and those the best missed as the glossary writes them,
    which is what the guard's constrained search would make it write. A beam's other outputs
    often hold the terms its best one left out (a synonym chosen, the term a little less
    likely), and choosing one costs no search: the guard has fewer lines to translate again."""
    lang = _lang(r)
    lacking = missing(r.prefer, texts[0], lang) if r.prefer and texts else []
    if lacking:
        ok = (not missing(r.prefer, x, lang) and not missing(lacking, x, lang, True) for x in texts)
        j = next((j for j, good in enumerate(ok) if good), 0)
        order = [j, *(k for k in range(len(hyps)) if k != j)]
        hyps, texts = [hyps[k] for k in order], [texts[k] for k in order]
    return hyps[:nbest], texts[:nbest]


def _lang(r: Request) -> str | None:
    return r.glossary.tgt_lang if r.glossary is not None else None


def _constrained(r: Request, phrases: list[str]) -> Request:
    """`r` with `phrases` added to its own constraints (each once), favouring and preferring
    nothing more: the constraints hold the terms."""
    extra = [p for p in dict.fromkeys(phrases) if p not in r.constraints]
    return replace(r, constraints=[*r.constraints, *extra], favour=[], prefer=[])

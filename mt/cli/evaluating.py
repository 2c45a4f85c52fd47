"""`mt eval`: a checkpoint's translations (or given ones) scored against references, with the
doubt flags, numbers kept and term accuracy beside BLEU, and the gates a CI run checks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from mt.cli.app import app
from mt.cli.options import (
    AdapterOption,
    DeviceOption,
    FromOption,
    MaxDoubtOption,
    TargetVocabOption,
    ThreadsOption,
    ToOption,
    check_max_doubt,
    check_plan,
    decode_flags,
    gate_doubt,
    open_glossary,
    open_session,
    plan_flags,
    settled_heap,
    use_threads,
)
from mt.errors import EXIT_GATE, MtError
from mt.plan import OFFERED as PLAN_OFFERED
from mt.plan import PlanOptions
from mt.translation.doubt import DoubtCount
from mt.translation.options import OFFERED, DecodeOptions
from mt.translation.session import keep_learned


@dataclass
class Scored:
    """What `mt eval` scores: the translations, their references and (where known) their
    sources, the glossary their terms are checked against, and the doubt flags counted."""

    hyps: list[str]
    refs: list[str]
    sources: list[str] | None
    terms: Any = None  # mt.glossary.Glossary
    doubts: DoubtCount = field(default_factory=DoubtCount)


@app.command(name="eval")
@decode_flags(OFFERED["eval"])
@plan_flags(PLAN_OFFERED["eval"])
def evaluate(
    checkpoints: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Checkpoint to translate with (a run directory means its best.pt); several "
            "decode as an ensemble.",
            metavar="CHECKPOINT",
        ),
    ] = None,
    src: Annotated[
        Path | None,
        typer.Option(
            help="Source file to translate; a TMX or XLIFF file (.tmx, .xlf, .xliff, .sdlxliff) "
            "holds the references too (inline codes left out of the scores)."
        ),
    ] = None,
    ref: Annotated[Path | None, typer.Option(help="Reference translations.")] = None,
    hyp: Annotated[Path | None, typer.Option(help="Score this output instead.")] = None,
    *,
    options: DecodeOptions,  # the decode flags, here in --help (mt.cli.options.decode_flags)
    device: DeviceOption = "auto",
    adapter: AdapterOption = None,
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    min_bleu: Annotated[
        float | None, typer.Option(help="Exit 1 when BLEU is below this (a CI gate).")
    ] = None,
    plan: PlanOptions,  # the plan flags, here in --help (mt.cli.options.plan_flags)
    to: ToOption = None,
    frm: FromOption = None,
    target_vocab: TargetVocabOption = True,
    threads: ThreadsOption = None,
    max_doubt: MaxDoubtOption = None,
    check_numbers: Annotated[
        bool, typer.Option(help="Report the share of lines whose source numbers all appear.")
    ] = False,
    min_term_accuracy: Annotated[
        float | None,
        typer.Option(
            help="Exit 1 when the lemma-matched term accuracy (%, with --glossary) is below "
            "this (a CI gate)."
        ),
    ] = None,
) -> None:
    """Score a checkpoint or an ensemble (CHECKPOINT... --src --ref) or a translation (--hyp
    --ref)."""
    use_threads("eval", threads)
    check_max_doubt(max_doubt)
    check_plan(plan)
    bilingual = _check_inputs(src, ref, plan, min_term_accuracy)
    refs = _read_refs(ref)
    if hyp is not None:
        if checkpoints:  # --src with --hyp is the output's source: flags, --check-numbers
            raise MtError("mt eval: give either --hyp or CHECKPOINT, not both")
        scored, where = _given(hyp, src, refs, bilingual, plan, frm, to), hyp
    else:
        if not checkpoints or src is None:
            raise MtError("mt eval needs CHECKPOINT and --src (or --hyp)")
        session = open_session(checkpoints, device, options.dtype, adapter)
        scored = _translated(session, src, ref, refs, bilingual, options, plan, frm, to,
                             target_vocab)  # fmt: skip
        where = src
    if len(scored.hyps) != len(scored.refs):
        raise MtError(
            f"{where} has {len(scored.hyps)} lines but {ref or src} has {len(scored.refs)}"
        )
    report, lines, bleu, accuracy = _report(scored, src, hyp is not None, bilingual,
                                            check_numbers)  # fmt: skip
    typer.echo(json.dumps(report) if json_ else "\n".join(lines))
    if min_bleu is not None and bleu < min_bleu:
        typer.echo(f"BLEU {bleu:.2f} is below --min-bleu {min_bleu}", err=True)
        raise typer.Exit(EXIT_GATE)
    if min_term_accuracy is not None and accuracy is not None:
        if accuracy.lemma < min_term_accuracy:
            typer.echo(
                f"term accuracy {accuracy.lemma:.2f}% is below --min-term-accuracy "
                f"{min_term_accuracy}",
                err=True,
            )
            raise typer.Exit(EXIT_GATE)
    gate_doubt(scored.doubts, max_doubt, "mt eval")


def _check_inputs(
    src: Path | None, ref: Path | None, plan: PlanOptions, min_term_accuracy: float | None
) -> str | None:
    """The input flags' rules, before anything is read; the bilingual format of `src` (a
    TMX or XLIFF file holds the references too), None for plain text."""
    from mt.cat import format_of

    bilingual = format_of(src) if src is not None else None
    if bilingual and ref is not None:
        raise MtError(f"mt eval: {src} holds the references; give no --ref")
    if ref is None and not bilingual:
        raise MtError("mt eval needs --ref (or a TMX or XLIFF --src, which holds them)")
    if plan.glossary is not None and src is None:
        raise MtError("--glossary needs --src (the terms are found in the source)")
    if min_term_accuracy is not None and plan.glossary is None:
        raise MtError("--min-term-accuracy needs --glossary FILE")
    return bilingual


def _read_refs(ref: Path | None) -> list[str]:
    from mt.data.corpus import read_lines

    if ref is None:
        return []
    refs = read_lines(ref)
    if not refs:  # sacrebleu fails deep inside on no sentences; exit 1 would read as the gate
        raise MtError(f"{ref} is empty: no reference lines to score against")
    return refs


def _given(
    hyp: Path,
    src: Path | None,
    refs: list[str],
    bilingual: str | None,
    plan: PlanOptions,
    frm: str | None,
    to: str | None,
) -> Scored:
    """A translation given (--hyp): its references from --ref or the bilingual --src."""
    from mt.cat.bilingual import read_bilingual
    from mt.data.corpus import read_lines

    sources = None
    if bilingual:
        if frm is None or to is None:
            raise MtError(f"mt eval --hyp: give --from and --to, the languages of {src}")
        sources, refs = read_bilingual(src, frm, to)  # type: ignore[arg-type]
    scored = Scored(read_lines(hyp), refs, sources)
    if plan.glossary is not None:
        from mt.glossary.files import read_glossary

        scored.terms = read_glossary(plan.glossary, frm, to)
    return scored


def _translated(
    session: Any,  # mt.translation.session.Session
    src: Path,
    ref: Path | None,
    refs: list[str],
    bilingual: str | None,
    options: DecodeOptions,
    plan: PlanOptions,
    frm: str | None,
    to: str | None,
    target_vocab: bool,
) -> Scored:
    """The checkpoint's translations of --src (doubt flags counted as they come)."""
    from mt.cat.bilingual import read_bilingual
    from mt.data.corpus import read_lines
    from mt.runtime.workers import spread
    from mt.translation.requests import Plan, Request
    from mt.translation.translator import translate_stream

    if bilingual:
        pair = (frm or session.source_language(), to or session.cfg.data.tgt_lang)
        sources, refs = read_bilingual(src, *pair)
    else:
        sources = read_lines(src)
        if len(sources) != len(refs):
            raise MtError(f"{src} has {len(sources)} lines but {ref} has {len(refs)}")
    targets = session.targets(to, frm, target_vocab, options.target_vocab_ratio)
    translator = session.translator(options, targets=targets)
    terms = open_glossary(plan.glossary, session, targets, frm, translator, plan.glossary_soft)
    steps = Plan.of(plan, frm or session.source_language())
    requests = [Request(x, plan=steps, glossary=terms) for x in sources]
    scored = Scored([], refs, sources, terms)
    with settled_heap(), spread(translator) as decoder:
        done = translate_stream(decoder, requests, steps)
        scored.hyps = [t.text for t in scored.doubts.watch(done)]
    keep_learned()
    return scored


def _report(
    scored: Scored, src: Path | None, given: bool, bilingual: str | None, check_numbers: bool
) -> tuple[dict[str, Any], list[str], float, Any]:
    """The scores as one JSON object and as lines, BLEU, and the term accuracy (None without
    a glossary). Inline codes (tags, mt.cat) are kept by construction: a TMX or XLIFF pair is
    scored on its text."""
    from mt.cat import strip_codes
    from mt.data.corpus import read_lines
    from mt.glossary.accuracy import term_accuracy
    from mt.metrics import format_scores, score
    from mt.translation.doubt import flags
    from mt.translation.number_guard import kept_rate

    hyps, refs, sources = scored.hyps, scored.refs, scored.sources
    if bilingual:
        scores = score([strip_codes(h) for h in hyps], [strip_codes(r) for r in refs])
    else:
        scores = score(hyps, refs)
    report = scores.as_dict()
    lines = [format_scores(scores)]
    if sources is None and src is not None:
        sources = read_lines(src)
    if given and sources is not None:  # a given output: its flags against its source
        for s, h in zip(sources, hyps):
            scored.doubts.add(flags(s, h))
    if scored.doubts.lines:
        report["doubt"] = scored.doubts.as_dict()
        lines.append(f"doubt: {scored.doubts.summary()}")
    if check_numbers:
        if sources is None:
            raise MtError("--check-numbers needs --src (the numbers are the source's)")
        report["numbers"] = kept_rate(sources, hyps)
        lines.append(
            "numbers kept: {kept}% of {lines} lines with digits".format(**report["numbers"])
        )
    accuracy = None
    if scored.terms is not None and sources is not None:
        accuracy = term_accuracy(scored.terms, sources, hyps, refs)
        report["terms"] = accuracy.as_dict()
        lines.append(accuracy.summary())
    return report, lines, scores.bleu, accuracy

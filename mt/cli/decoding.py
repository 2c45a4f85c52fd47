"""`mt translate` and `mt eval`: commands that translate with a trained model."""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from mt.cli.app import app
from mt.cli.options import (
    AdapterOption,
    CheckpointsArg,
    ChunkLinesOption,
    DeviceOption,
    FromOption,
    MaxDoubtOption,
    ShardOption,
    TargetVocabOption,
    ThreadsOption,
    ToOption,
    check_max_doubt,
    check_plan,
    chunked_job,
    decode_flags,
    gate_doubt,
    open_glossary,
    open_session,
    plan_flags,
    settled_heap,
    text_lines,
    use_threads,
    warn_truncated,
    write_output,
)
from mt.cli.xliff import fill_xliff, read_xliff, xliff_languages
from mt.errors import EXIT_GATE, EXIT_LINES, MtError
from mt.plan import OFFERED as PLAN_OFFERED
from mt.plan import PlanOptions
from mt.translation.options import OFFERED, DecodeOptions
from mt.translation.session import keep_learned


@app.command()
@decode_flags(OFFERED["translate"])
@plan_flags(PLAN_OFFERED["translate"])
def translate(
    checkpoints: CheckpointsArg,
    input: Annotated[Path | None, typer.Option("--input", "-i", help="Default: stdin.")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Default: stdout.")] = None,
    *,
    options: DecodeOptions,  # the decode flags, here in --help (mt.cli.options.decode_flags)
    device: DeviceOption = "auto",
    adapter: AdapterOption = None,
    alignment: Annotated[
        bool, typer.Option(help="Append a tab and 'src-tgt' attention alignment pairs.")
    ] = False,
    input_format: Annotated[
        str,
        typer.Option(
            help='text, html (one fragment per line), jsonl: {"src": ..., "prefix": ..., '
            '"constraints": [...], "format": "c-format"}, po (a gettext catalogue: one line '
            "per msgid, its format flags deciding its placeholders), or xliff (1.2 or 2.x: "
            "OUT is the document with its empty targets filled, inline codes kept)."
        ),
    ] = "text",
    output_format: Annotated[
        str, typer.Option(help="text, or jsonl: translation, score, nbest, tokens, alignment.")
    ] = "text",
    plan: PlanOptions,  # the plan flags, here in --help (mt.cli.options.plan_flags)
    to: ToOption = None,
    frm: FromOption = None,
    target_vocab: TargetVocabOption = True,
    threads: ThreadsOption = None,
    shard: ShardOption = None,
    chunk_lines: ChunkLinesOption = None,
    max_doubt: MaxDoubtOption = None,
) -> None:
    """Translate one sentence per line, from stdin (or --input) to stdout (or --output).

    Under `torchrun --nproc_per_node=N` (or with --shard K/N) each process translates its
    share of --input's chunks and OUT is the one-process output, in order."""
    from mt.runtime.workers import spread
    from mt.translation.pivot import check_pivot
    from mt.translation.requests import Plan, Request
    from mt.translation.translator import translate_stream

    use_threads("translate", threads)
    check_formats(input, input_format, output_format)
    check_plan(plan, input_format == "html", alignment)
    check_max_doubt(max_doubt)
    document = None
    if input_format == "xliff":
        document = read_xliff(input, output_format, alignment, options, shard, chunk_lines)
    typing = document is None and input is None and sys.stdin.isatty()  # answer each line
    if typing:
        options = dataclasses.replace(options, buffer_lines=1)
    session = open_session(checkpoints, device, options.dtype, adapter)
    if document is not None:
        to, frm = xliff_languages(session, document, to, frm)
    targets = session.targets(to, frm, target_vocab, options.target_vocab_ratio)
    translator = session.translator(
        options, alignment, with_scores=output_format == "jsonl", targets=targets
    )
    if plan.pivot is not None and input_format != "html":
        check_pivot(targets, plan.pivot)
    terms = open_glossary(plan.glossary, session, targets, frm, translator, plan.glossary_soft)
    steps = Plan.of(plan, frm or session.source_language(), html=input_format == "html")
    name = str(input) if input is not None else "<stdin>"
    lines = _Lines(name, input_format, output_format, steps, terms, translator)
    settings = {
        "command": "translate",
        "checkpoints": [str(c) for c in checkpoints],
        "adapter": None if adapter is None else str(adapter),
        "decode": asdict(translator.cfg),
        "formats": [input_format, output_format],
        "alignment": alignment,
        "languages": [to, frm, target_vocab],
        # the glossary file's content, not only its name: a resumed job must use the same terms
        "plan": asdict(plan) | {"glossary": terms.digest if terms else None},
    }
    job = chunked_job([input], output, shard, chunk_lines, translator.cfg.buffer_lines, settings)
    if job is not None and input_format in ("po", "xliff"):
        raise MtError(f"--input-format {input_format} is one document: it cannot be shared out")
    with settled_heap(), spread(translator, 1 if typing else None) as decoder:
        if document is not None:
            slots = document.slots
            requests = (Request(x.text, where=x.where, plan=steps, glossary=terms) for x in slots)
            done = lines.doubts.watch(translate_stream(decoder, requests))
            fill_xliff(document, done, output, lines.failures)
        elif job is not None:
            job.run(
                lambda first, ins, out: lines.write(decoder, ins[0], out, first), "mt translate"
            )
        else:
            src = open(input, "rb") if input is not None else sys.stdin.buffer
            with src:
                write_output(output, lambda out: lines.write(decoder, text_lines(src), out))
    lines.finish(max_doubt)


def check_formats(input: Path | None, input_format: str, output_format: str) -> None:
    """`--input` and the formats of `mt translate`, before a model loads."""
    if input is not None and not input.is_file():
        raise MtError(f"{input}: input file not found")
    if input_format not in ("text", "jsonl", "html", "po", "xliff"):
        raise MtError(
            f"--input-format must be text, jsonl, html, po or xliff, got {input_format!r}"
        )
    if output_format not in ("text", "jsonl"):
        raise MtError(f"--output-format must be text or jsonl, got {output_format!r}")


class _Lines:
    """What `mt translate` writes of its input and says at the end: each line's translation
    in order, a line that could not be translated written empty and named on stderr, the
    doubts counted (for --max-doubt)."""

    def __init__(
        self, name: str, input_format: str, output_format: str, plan, terms, translator
    ) -> None:  # noqa: ANN001
        from mt.translation.doubt import DoubtCount

        self.name, self.input_format, self.jsonl = name, input_format, output_format == "jsonl"
        self.plan, self.terms, self.translator = plan, terms, translator
        self.failures: list[int] = []
        self.doubts = DoubtCount()

    def failed(self, line: int, error: str) -> None:
        self.failures.append(line)
        typer.echo(f"{self.name}:{line}: could not translate this line ({error})", err=True)

    def write(self, decoder, lines, out, first: int = 0) -> None:  # noqa: ANN001
        """Translate `lines` (the input from line `first` + 1 on) with `decoder`, into `out`."""
        from mt.translation.requests import read_requests
        from mt.translation.translator import translate_stream, write_translations

        requests = read_requests(lines, self.input_format, self.name, first, self.plan, self.terms)
        write_translations(
            self.doubts.watch(translate_stream(decoder, requests)),
            out,
            nbest=self.translator.cfg.nbest,
            alignment=self.translator.alignment,
            jsonl=self.jsonl,
            failed=self.failed,
            start=first,
        )

    def finish(self, max_doubt: float | None) -> None:
        """The warnings and gates after the last line: truncated lines, doubts, failures."""
        keep_learned()
        warn_truncated(self.translator.truncated, self.translator.max_src, "input")
        gate_doubt(self.doubts, max_doubt, "mt translate")
        if self.failures:
            typer.echo(
                f"mt translate: {len(self.failures)} line(s) could not be translated and were "
                "written empty; the others were translated",
                err=True,
            )
            raise typer.Exit(EXIT_LINES)


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
    from mt.cat import format_of, strip_codes
    from mt.cat.bilingual import read_bilingual
    from mt.data.corpus import read_lines
    from mt.glossary.accuracy import term_accuracy
    from mt.metrics import format_scores, score
    from mt.runtime.workers import spread
    from mt.translation.doubt import DoubtCount, flags
    from mt.translation.number_guard import kept_rate
    from mt.translation.requests import Plan, Request
    from mt.translation.translator import translate_stream

    use_threads("eval", threads)
    check_max_doubt(max_doubt)
    check_plan(plan)
    bilingual = format_of(src) if src is not None else None  # a TMX/XLIFF file: src and ref
    if bilingual and ref is not None:
        raise MtError(f"mt eval: {src} holds the references; give no --ref")
    if ref is None and not bilingual:
        raise MtError("mt eval needs --ref (or a TMX or XLIFF --src, which holds them)")
    if plan.glossary is not None and src is None:
        raise MtError("--glossary needs --src (the terms are found in the source)")
    if min_term_accuracy is not None and plan.glossary is None:
        raise MtError("--min-term-accuracy needs --glossary FILE")
    terms = None
    doubts = DoubtCount()
    sources: list[str] | None = None
    refs: list[str] = []
    if ref is not None:
        refs = read_lines(ref)
        if not refs:  # sacrebleu fails deep inside on no sentences; exit 1 would read as the gate
            raise MtError(f"{ref} is empty: no reference lines to score against")
    if hyp is not None:
        if checkpoints:  # --src with --hyp is the output's source: flags, --check-numbers
            raise MtError("mt eval: give either --hyp or CHECKPOINT, not both")
        if bilingual:
            if frm is None or to is None:
                raise MtError(f"mt eval --hyp: give --from and --to, the languages of {src}")
            sources, refs = read_bilingual(src, frm, to)  # type: ignore[arg-type]
        hyps, where = read_lines(hyp), hyp
        if plan.glossary is not None:
            from mt.glossary.files import read_glossary

            terms = read_glossary(plan.glossary, frm, to)
    else:
        if not checkpoints or src is None:
            raise MtError("mt eval needs CHECKPOINT and --src (or --hyp)")
        session = open_session(checkpoints, device, options.dtype, adapter)
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
        with settled_heap(), spread(translator) as decoder:
            done = translate_stream(decoder, requests, steps)
            hyps, where = [t.text for t in doubts.watch(done)], src
        keep_learned()
    if len(hyps) != len(refs):
        raise MtError(f"{where} has {len(hyps)} lines but {ref or src} has {len(refs)}")
    if bilingual:  # inline codes (tags, mt.cat) are kept by construction: score the text
        scores = score([strip_codes(h) for h in hyps], [strip_codes(r) for r in refs])
    else:
        scores = score(hyps, refs)
    report = scores.as_dict()
    lines = [format_scores(scores)]
    if sources is None and src is not None:
        sources = read_lines(src)
    if hyp is not None and sources is not None:  # a given output: its flags against its source
        for s, h in zip(sources, hyps):
            doubts.add(flags(s, h))
    if doubts.lines:
        report["doubt"] = doubts.as_dict()
        lines.append(f"doubt: {doubts.summary()}")
    if check_numbers:
        if sources is None:
            raise MtError("--check-numbers needs --src (the numbers are the source's)")
        report["numbers"] = kept_rate(sources, hyps)
        lines.append(
            "numbers kept: {kept}% of {lines} lines with digits".format(**report["numbers"])
        )
    accuracy = None
    if terms is not None and sources is not None:
        accuracy = term_accuracy(terms, sources, hyps, refs)
        report["terms"] = accuracy.as_dict()
        lines.append(accuracy.summary())
    typer.echo(json.dumps(report) if json_ else "\n".join(lines))
    if min_bleu is not None and scores.bleu < min_bleu:
        typer.echo(f"BLEU {scores.bleu:.2f} is below --min-bleu {min_bleu}", err=True)
        raise typer.Exit(EXIT_GATE)
    if min_term_accuracy is not None and accuracy is not None:
        if accuracy.lemma < min_term_accuracy:
            typer.echo(
                f"term accuracy {accuracy.lemma:.2f}% is below --min-term-accuracy "
                f"{min_term_accuracy}",
                err=True,
            )
            raise typer.Exit(EXIT_GATE)
    gate_doubt(doubts, max_doubt, "mt eval")

"""`mt translate`: the command that translates with a trained model (`mt eval` is in
evaluating.py)."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from mt.cli.app import app
from mt.cli.cat import FORMATS as CAT_FORMATS
from mt.cli.cat import cat_languages, fill_cat, read_cat
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
from mt.errors import EXIT_LINES, MtError
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
            "per msgid, its format flags deciding its placeholders), xliff (1.2 or 2.x: "
            "OUT is the document with its empty targets filled, inline codes kept), or tmx "
            "(OUT is the memory with each unit's target-language variant added)."
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
    if input_format in CAT_FORMATS:
        document = read_cat(
            input, input_format, output_format, alignment, options, shard, chunk_lines
        )
    typing = document is None and input is None and sys.stdin.isatty()  # answer each line
    if typing:
        options = dataclasses.replace(options, buffer_lines=1)
    session = open_session(checkpoints, device, options.dtype, adapter)
    if document is not None:
        to, frm = cat_languages(session, document, to, frm)
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
    if job is not None and input_format in ("po", *CAT_FORMATS):
        raise MtError(f"--input-format {input_format} is one document: it cannot be shared out")
    with settled_heap(), spread(translator, 1 if typing else None) as decoder:
        if document is not None:
            slots = document.slots
            requests = (Request(x.text, where=x.where, plan=steps, glossary=terms) for x in slots)
            done = lines.doubts.watch(translate_stream(decoder, requests))
            fill_cat(document, done, output, lines.failures)
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
    if input_format not in ("text", "jsonl", "html", "po", "xliff", "tmx"):
        raise MtError(
            f"--input-format must be text, jsonl, html, po, xliff or tmx, got {input_format!r}"
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

"""`mt translate --input-format xliff`: the document read, its languages checked against the
model's, and its targets filled and written, beside the line-by-line path of mt.cli.decoding."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from mt.errors import MtError


def read_xliff(input, output_format, alignment, options, shard, chunk_lines):  # noqa: ANN001, ANN202
    """The XLIFF document `mt translate --input-format xliff` fills, once the flags that
    shape line output (which a document does not have) are refused."""
    from mt.cat.fill import XliffFill

    for given, flag in (
        (output_format != "text", "--output-format jsonl"),
        (alignment, "--alignment"),
        (options.nbest not in (None, 1), "--nbest"),
        (shard is not None or chunk_lines is not None, "--shard and --chunk-lines"),
    ):
        if given:
            raise MtError(f"--input-format xliff writes the document: not with {flag}")
    name = str(input) if input is not None else "<stdin>"
    data = input.read_bytes() if input is not None else sys.stdin.buffer.read()
    return XliffFill(data, name)


def xliff_languages(session, document, to, frm):  # noqa: ANN001, ANN202
    """(to, from) for a document: its own languages, which a bilingual model must translate
    and a multilingual one takes as its target and source unless told otherwise."""
    from mt.cat import primary

    src, tgt = document.languages
    if session.languages is None:
        d = session.cfg.data
        if (primary(src), primary(tgt)) != (primary(d.src_lang), primary(d.tgt_lang)):
            raise MtError(
                f"{document.name}: translates {src} -> {tgt}, but this model translates "
                f"{d.src_lang}-{d.tgt_lang}"
            )
        return to, frm
    if to is not None and primary(to) != primary(tgt):
        raise MtError(f"{document.name}: its target language is {tgt}, not --to {to}")
    return to or primary(tgt), frm or primary(src)


def fill_xliff(document, done, output: Path | None, failures: list[int]) -> None:  # noqa: ANN001
    """The translations into the document's targets, the document written whole (atomically
    to OUT, else to stdout); a segment that failed stays empty, named on stderr."""
    from mt.atomic import write_bytes

    texts: list[str | None] = []
    for slot, t in zip(document.slots, done):
        if t.error:
            failures.append(len(texts) + 1)
            typer.echo(f"{slot.where}: could not translate this segment ({t.error})", err=True)
        texts.append(None if t.error else t.text)
    filled = document.fill(texts)
    data = document.to_bytes()
    if output is not None:
        write_bytes(output, data, "the output")
    else:
        try:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    typer.echo(
        f"mt translate: {document.name}: {filled} target(s) filled, {document.kept} kept "
        f"(already translated), {document.skipped} unit(s) not to translate",
        err=True,
    )

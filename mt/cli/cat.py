"""`mt translate --input-format xliff | tmx`: the document read, its languages settled with
the model's, and its targets filled and written, beside the line-by-line path of
mt.cli.decoding."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from mt.errors import MtError

FORMATS = ("xliff", "tmx")


def read_cat(input, input_format, output_format, alignment, options, shard, chunk_lines):  # noqa: ANN001, ANN202
    """The XLIFF or TMX document `mt translate` fills, once the flags that shape line output
    (which a document does not have) are refused."""
    for given, flag in (
        (output_format != "text", "--output-format jsonl"),
        (alignment, "--alignment"),
        (options.nbest not in (None, 1), "--nbest"),
        (shard is not None or chunk_lines is not None, "--shard and --chunk-lines"),
    ):
        if given:
            raise MtError(f"--input-format {input_format} writes the document: not with {flag}")
    name = str(input) if input is not None else "<stdin>"
    data = input.read_bytes() if input is not None else sys.stdin.buffer.read()
    if data[:2] == b"\x1f\x8b":
        raise MtError(f"{name}: gzip-compressed: mt translate fills a plain file (gunzip it first)")
    if input_format == "tmx":
        from mt.cat.tmx_fill import TmxFill

        return TmxFill(data, name)
    from mt.cat.fill import XliffFill

    return XliffFill(data, name)


def cat_languages(session, document, to, frm):  # noqa: ANN001, ANN202
    """(to, from) for a document. An XLIFF file names both of its languages, which a
    bilingual model must translate and a multilingual one takes unless told otherwise. A TMX
    file names its source at most (`srclang`): a bilingual model translates its own pair
    (the file's srclang, when it names one, must be the model's source), a multilingual one
    needs --to, and --from where the file names no source. A TMX document's slots are chosen
    here, once the pair is known."""
    from mt.cat import primary
    from mt.cat.tmx_fill import TmxFill

    if isinstance(document, TmxFill):
        return _tmx_languages(session, document, to, frm)
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


def _tmx_languages(session, document, to, frm):  # noqa: ANN001, ANN202
    from mt.cat import primary

    if session.languages is None:
        d = session.cfg.data
        said = frm or document.srclang
        if said is not None and primary(said) != primary(d.src_lang):
            what = f"--from {frm}" if frm else f"its srclang is {document.srclang}"
            raise MtError(
                f"{document.name}: {what}, but this model translates {d.src_lang}-{d.tgt_lang}"
            )
        document.choose(d.src_lang, d.tgt_lang)
        return to, frm
    if to is None:
        raise MtError(f"{document.name}: a TMX file names no target language: give --to")
    src = frm or document.srclang
    if src is None:
        raise MtError(f"{document.name}: its header's srclang is *all*: give --from")
    document.choose(primary(src), primary(to))
    return primary(to), primary(src)


def fill_cat(document, done, output: Path | None, failures: list[int]) -> None:  # noqa: ANN001
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
    typer.echo(f"mt translate: {document.report(filled)}", err=True)

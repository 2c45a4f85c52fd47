"""`mt import` and `mt export`: a model of another toolkit (HF Marian / OPUS-MT, M2M-100 /
NLLB) into an mt checkpoint, and a checkpoint out to CTranslate2 or HF transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mt.cli.app import app
from mt.cli.options import ThreadsOption, use_threads
from mt.errors import MtError


@app.command(name="import")
def import_command(
    source: Annotated[
        str,
        typer.Argument(
            help="A folder in HF format (config.json, model.safetensors or pytorch_model.bin, "
            "tokenizer files) or a hub id such as Helsinki-NLP/opus-mt-de-en (needs network)."
        ),
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The checkpoint to write.")],
    force: Annotated[bool, typer.Option(help="Replace an existing OUTPUT.")] = False,
    src_lang: Annotated[
        str | None, typer.Option(help="Source language code (default: the tokenizer config's).")
    ] = None,
    tgt_lang: Annotated[
        str | None, typer.Option(help="Target language code (default: the tokenizer config's).")
    ] = None,
    threads: ThreadsOption = None,
) -> None:
    """Import a pretrained model (MarianMTModel: OPUS-MT; M2M-100 and NLLB) as an ordinary mt
    checkpoint."""
    from mt.hub.convert import import_model

    use_threads("import", threads)
    if output.exists() and not force:
        raise MtError(f"{output} exists; add --force to replace it")
    data = import_model(source, output, src_lang, tgt_lang)
    m, d = data["config"]["model"], data["config"]["data"]
    langs = data["tokenizer"]["languages"]
    pair = f"{d['src_lang']}-{d['tgt_lang']}"
    if langs is not None:
        count = len({p.split("-")[0] for p in langs["pairs"]})
        pair = f"{count} languages (source by default: {d['src_lang']})"
    typer.echo(
        f"imported {source} to {output}: {pair}, "
        f"{m['encoder_layers']}+{m['decoder_layers']} layers, d_model {m['d_model']}, "
        f"{len(data['tokenizer']['pieces'][1]):,} target pieces",
        err=True,
    )


@app.command(name="export")
def export_model(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint written by mt train.")],
    out_dir: Annotated[Path, typer.Argument(help="Folder to write (must not exist).")],
    to: Annotated[str, typer.Option("--to", help="ctranslate2 or marian (HF transformers).")],
    quantization: Annotated[
        str | None, typer.Option(help="ctranslate2: int8, int8_float16, float16, bfloat16, ...")
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing OUT_DIR.")] = False,
    threads: ThreadsOption = None,
) -> None:
    """Export a checkpoint for CTranslate2 or HF transformers (needs `pip install 'mt[export]'`)."""
    from mt.export import export

    use_threads("export", threads)
    how = export(checkpoint, to, out_dir, quantization, force)
    typer.echo(f"exported {checkpoint} to {out_dir} ({to})", err=True)
    for line in how:  # a multilingual model: how to ask it for a language
        typer.echo(line, err=True)

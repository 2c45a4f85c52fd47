"""`mt attention` and `mt vectors`: commands that show what a model does inside."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from mt.cli.app import app
from mt.cli.options import (
    AdapterOption,
    DeviceOption,
    ToOption,
    decode_flags,
    open_session,
    use_threads,
)
from mt.errors import MtError
from mt.translation.options import OFFERED, DecodeOptions


@app.command()
@decode_flags(OFFERED["attention"])
def attention(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint (or run directory).")],
    src: Annotated[str, typer.Option("--src", help="The sentence to translate and show.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="PNG file (default attn.png).")
    ] = None,
    html: Annotated[
        Path | None, typer.Option(help="Write an interactive page (every layer and head).")
    ] = None,
    layer: Annotated[int, typer.Option(help="Layer; negative counts from the top.")] = -1,
    head: Annotated[
        int | None, typer.Option(help="One head; -1 draws every head; default: head mean.")
    ] = None,
    *,
    options: DecodeOptions,  # --beam (mt.cli.options.decode_flags)
    device: DeviceOption = "cpu",
    adapter: AdapterOption = None,
    to: ToOption = None,
) -> None:
    """Draw encoder, decoder and encoder-decoder attention for one translated sentence."""
    from mt.views.attention import attention_json, layer_label

    if not src.strip():
        raise MtError("--src is empty")
    use_threads("attention", None, say=False)  # one sentence: the policy's count, unsaid
    session = open_session([checkpoint], device, adapter=adapter)
    n_heads = session.cfg.model.n_heads
    if head is not None and not -1 <= head < n_heads:
        raise MtError(f"--head must be -1 or between 0 and {n_heads - 1}, got {head}")
    att = session.attention(src, options, to=to)
    try:
        views = att.views(layer)
    except IndexError:
        raise MtError(f"--layer {layer} is out of range for this model") from None
    if html is not None:
        from mt.viewer import write_html

        write_html(html, attention_json(att), f"attention: {att.source}")
        typer.echo(f"wrote {html}", err=True)
    if output is not None or html is None:
        from mt.plot import attention_figure, save_figure

        where = layer_label(layer, len(att.maps.encoder))
        title = f"{att.source}  ->  {att.translation}   ({where})"
        save_figure(attention_figure(views, title, head), output or Path("attn.png"))
        typer.echo(f"wrote {output or Path('attn.png')}", err=True)
    typer.echo(att.translation)


@app.command()
def vectors(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint (or run directory).")],
    word: Annotated[
        list[str],
        typer.Option(
            help="The word to follow (a whole word, case as given); repeat it to follow "
            "several together, e.g. one word in several languages."
        ),
    ],
    src: Annotated[list[str] | None, typer.Option("--src", help="A sentence (repeatable).")] = None,
    input: Annotated[
        Path | None, typer.Option("--input", "-i", help="Sentences, one per line.")
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="PNG file.")] = None,
    html: Annotated[Path | None, typer.Option(help="Write an interactive page.")] = None,
    json_: Annotated[
        bool, typer.Option("--json", help="Print every number drawn as one JSON object.")
    ] = False,
    centre: Annotated[
        bool,
        typer.Option(help="Remove each depth's mean over the occurrences before the PCA."),
    ] = False,
    device: DeviceOption = "cpu",
    adapter: AdapterOption = None,
) -> None:
    """Follow a word's vector from its embedding through every encoder layer, in each
    sentence, and name the keys whose attention pushed it most."""
    from mt.views.vectors import read_sentences, summary, word_vectors

    sentences = read_sentences(src or [], input)
    use_threads("vectors", None, say=False)  # one sentence: the policy's count, unsaid
    session = open_session([checkpoint], device, adapter=adapter)
    model = session.single_model("mt vectors")
    found = word_vectors(model, session.tokenizer, sentences, word, centre)
    if any(len(o.tokens) > 1 for o in found.occurrences):
        typer.echo(f"note: '{found.word}' is several pieces; their vectors are averaged", err=True)
    if output is not None:
        from mt.plot import save_figure, vectors_figure

        save_figure(vectors_figure(found), output)
        typer.echo(f"wrote {output}", err=True)
    if html is not None:
        from mt.viewer import write_html

        write_html(html, found.to_json(), f"vectors: {found.word}")
        typer.echo(f"wrote {html}", err=True)
    typer.echo(json.dumps(found.to_json(), ensure_ascii=False) if json_ else summary(found))

"""`mt attention`: commands that show what a model does inside."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mt.cli.app import app
from mt.cli.options import BeamOption, DeviceOption, open_session
from mt.errors import MtError


@app.command()
def attention(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint (or run directory).")],
    src: Annotated[str, typer.Option("--src", help="The sentence to translate and show.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="PNG file.")] = Path("attn.png"),
    layer: Annotated[int, typer.Option(help="Layer; negative counts from the top.")] = -1,
    head: Annotated[
        int | None, typer.Option(help="One head; -1 draws every head; default: head mean.")
    ] = None,
    beam: BeamOption = None,
    device: DeviceOption = "cpu",
) -> None:
    """Draw encoder, decoder and encoder-decoder attention for one translated sentence."""
    from mt.decode.session import DecodeOptions
    from mt.plot import attention_figure, save_figure

    if not src.strip():
        raise MtError("--src is empty")
    session = open_session([checkpoint], device)
    n_heads = session.cfg.model.n_heads
    if head is not None and not -1 <= head < n_heads:
        raise MtError(f"--head must be -1 or between 0 and {n_heads - 1}, got {head}")
    text, views = session.attention(src, DecodeOptions(beam=beam), layer)
    title = f"{src.strip()}  ->  {text}   (layer {layer})"
    save_figure(attention_figure(views, title, head), output)
    typer.echo(text)

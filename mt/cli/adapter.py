"""`mt adapter merge`: commands on adapters (a run with `finetune.adapter`, mt/adapt)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mt.cli.app import app

adapter_app = typer.Typer(
    no_args_is_help=True, help="Work with adapters (runs trained with finetune.adapter)."
)
app.add_typer(adapter_app, name="adapter")


@adapter_app.command()
def merge(
    base: Annotated[Path, typer.Argument(help="The base checkpoint the adapter was trained on.")],
    adapter: Annotated[Path, typer.Argument(help="The adapter (its best.pt or run directory).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The merged checkpoint.")],
) -> None:
    """Fold an adapter into its base's weights: an ordinary checkpoint that decodes as
    `--adapter` does (within float rounding), as fast as the base, and with --int8."""
    from mt.adapt.files import merged
    from mt.checkpoint import save

    save(merged(base, adapter), output)
    typer.echo(f"merged {adapter} into {base}: wrote {output}", err=True)

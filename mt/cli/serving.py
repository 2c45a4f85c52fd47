"""`mt serve`: a trained model behind HTTP (the app itself is mt/serve/)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mt.cli.app import app
from mt.cli.options import DeviceOption, ThreadsOption, decode_flags, plan_flags, use_threads
from mt.plan import OFFERED as PLAN_OFFERED
from mt.plan import PlanOptions
from mt.translation.options import OFFERED, DecodeOptions


@app.command()
@decode_flags(OFFERED["serve"])
@plan_flags(PLAN_OFFERED["serve"])
def serve(
    checkpoints: Annotated[
        list[str],
        typer.Argument(
            help="Models to serve, each [NAME=]CHECKPOINT[,CHECKPOINT...] (several paths: an "
            "ensemble; a run directory means its best.pt). The first is the default.",
            metavar="MODEL...",
        ),
    ],
    host: Annotated[
        str, typer.Option(help="Address to bind; other than loopback needs --api-key-file.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    device: DeviceOption = "auto",
    *,
    # --dtype; a request chooses its search (mt.translation.options.OFFERED)
    options: DecodeOptions,
    api_key_file: Annotated[
        Path | None, typer.Option(help="File of API keys, one per line; requests must give one.")
    ] = None,
    cors_origin: Annotated[
        list[str] | None, typer.Option(help="Allow browser pages of this origin (repeatable).")
    ] = None,
    max_items: Annotated[int, typer.Option(help="Sentences per request.")] = 100,
    max_chars: Annotated[int, typer.Option(help="Characters per sentence.")] = 5000,
    max_queue: Annotated[int, typer.Option(help="Sentences queued per model (then 503).")] = 2000,
    batch_window_ms: Annotated[
        float, typer.Option(help="How long a worker pools concurrent requests' sentences.")
    ] = 5.0,
    max_glossary_entries: Annotated[
        int, typer.Option(help="Entries of one glossary, given inline or uploaded.")
    ] = 10000,
    adapter: Annotated[
        list[str] | None,
        typer.Option(
            help="An adapter held on the first model, NAME=PATH (or on another, "
            "MODEL:NAME=PATH; repeatable); a request chooses it by name ('adapter')."
        ),
    ] = None,
    max_file_segments: Annotated[
        int,
        typer.Option(
            help="Texts (lines, paragraphs...) of one uploaded document (<= --max-queue)."
        ),
    ] = 1000,
    max_file_chars: Annotated[
        int, typer.Option(help="Characters of one uploaded document's texts.")
    ] = 100_000,
    max_unzipped_bytes: Annotated[
        int, typer.Option(help="Bytes an uploaded .docx may unzip to (a zip bomb: 413).")
    ] = 32 << 20,
    threads: ThreadsOption = None,
    plan: PlanOptions,  # the plan flags, here in --help: the server's steps for every request
) -> None:
    r"""Serve models over HTTP: JSON API, LibreTranslate's API and a page at / (needs the
    serve extra: pip install 'mt\[serve]')."""
    from mt.serve import serve as run_server
    from mt.serve.limits import Limits

    chosen = use_threads("serve", threads, say=False)  # each model's worker runs with it
    limits = Limits(
        max_items=max_items,
        max_chars=max_chars,
        max_queue=max_queue,
        batch_window_ms=batch_window_ms,
        max_glossary_entries=max_glossary_entries,
        max_file_segments=max_file_segments,
        max_file_chars=max_file_chars,
        max_unzipped_bytes=max_unzipped_bytes,
    )
    run_server(
        checkpoints,
        host,
        port,
        device,
        api_key_file,
        cors_origin,
        limits,
        start_line=f"mt serve: {chosen.describe()}",  # said once it listens
        dtype=options.dtype,
        plan=plan,
        adapters=adapter,
    )

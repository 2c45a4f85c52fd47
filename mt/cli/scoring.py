"""`mt score`: given translations scored by a trained model (forced decoding)."""

from __future__ import annotations

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
    ShardOption,
    ThreadsOption,
    ToOption,
    chunked_job,
    decode_flags,
    open_session,
    settled_heap,
    use_threads,
    warn_truncated,
    write_output,
)
from mt.errors import MtError
from mt.translation.options import OFFERED, DecodeOptions


@app.command()
@decode_flags(OFFERED["score"])
def score(
    checkpoints: CheckpointsArg,
    src: Annotated[Path, typer.Option(help="Source sentences, one per line.")],
    tgt: Annotated[Path, typer.Option(help="Their translations to score, line by line.")],
    json_: Annotated[
        bool, typer.Option("--json", help="One JSON object per line, with token scores.")
    ] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Default: stdout.")] = None,
    *,
    options: DecodeOptions,  # the decode flags, here in --help (mt.cli.options.decode_flags)
    device: DeviceOption = "auto",
    adapter: AdapterOption = None,
    protect: Annotated[
        bool,
        typer.Option(help="A model trained with data.protect: score spans as its placeholders."),
    ] = True,
    to: ToOption = None,
    threads: ThreadsOption = None,
    shard: ShardOption = None,
    chunk_lines: ChunkLinesOption = None,
) -> None:
    """Score given translations (forced decoding): 'LOGPROB<TAB>SCORE' per pair, SCORE
    length-normalised as beam search ranks it."""
    from mt.views.score import count_parallel, score_chunk, score_files, write_scores

    use_threads("score", threads)
    for path in (src, tgt):
        if not path.is_file():
            raise MtError(f"{path}: file not found")
    count_parallel(src, tgt)  # unequal files or bad UTF-8 fail before the model loads
    session = open_session(checkpoints, device, options.dtype, adapter)
    scorer = session.scorer(options, protect=protect, to=to)
    n = scorer.cfg.buffer_lines
    settings = {
        "command": "score",
        "checkpoints": [str(c) for c in checkpoints],
        "adapter": None if adapter is None else str(adapter),
        "decode": asdict(scorer.cfg),
        "json": json_,
        "protect": protect,
        "to": to,
    }
    job = chunked_job([src, tgt], output, shard, chunk_lines, n, settings)
    with settled_heap():
        if job is not None:
            job.run(
                lambda first, lines, out: write_scores(
                    score_chunk(scorer, lines[0], lines[1], first, n, tgt), out, json_
                ),
                "mt score",
            )
        else:
            scores = score_files(scorer, src, tgt, n)
            write_output(output, lambda out: write_scores(scores, out, json_))
    warn_truncated(scorer.truncated, scorer.max_src, "source")

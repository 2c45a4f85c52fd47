"""`mt train`, `mt prepare`, `mt plot`, `mt average` and `mt text-stats`: commands about runs
and what their checkpoints hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from mt.cli.app import app
from mt.cli.options import ConfigArg, RunDirOption, SetOption, load_run_config


@app.command()
def train(
    config: ConfigArg,
    set_: SetOption = None,
    run_dir: RunDirOption = None,
    resume: Annotated[bool, typer.Option(help="Continue the run in the run directory.")] = False,
    init_from: Annotated[
        Path | None,
        typer.Option(
            help="Fine-tune: start from this checkpoint's weights, tokenizer and model "
            "(sets train.init_from)."
        ),
    ] = None,
) -> None:
    """Train a tokenizer and a Transformer as CONFIG says."""
    from mt.memory import check_model_fits, keep_freed_memory

    keep_freed_memory()

    if init_from is not None:  # an override, so validation sees it (train.freeze needs it)
        set_ = [*(set_ or []), f"train.init_from={json.dumps(str(init_from))}"]
    cfg = load_run_config(config, set_, run_dir)  # before importing torch: config errors come fast
    # A model too big for this machine, refused before the data is prepared (the vocabulary
    # is the configured size here; build_model checks again with the trained one).
    check_model_fits(cfg.model, cfg.tokenizer.vocab_size, cfg.tokenizer.vocab_size)
    from mt.adapt.replay import prepare as prepare_replay

    folder = Path(cfg.train.run_dir)
    origin = prepare_replay(cfg, folder, str(config), resume)  # finetune.replay_sources
    from mt.train.trainer import train as run_training

    state = run_training(cfg, folder, resume, origin=origin)
    from mt.translation.session import keep_learned

    keep_learned()  # what the dev translations taught the span ban: `mt translate` starts there
    typer.echo(f"done: step {state.step}, checkpoints in {cfg.train.run_dir}", err=True)


@app.command()
def prepare(
    config: ConfigArg,
    set_: SetOption = None,
    run_dir: RunDirOption = None,
) -> None:
    """Train the tokenizer and build the token stores, without training.

    A cluster job can prepare once on a CPU node; `mt train` on the same run directory (and
    data.cache_dir) then maps the stores and starts at once.
    """
    from mt.data.prepare import prepare as run_prepare
    from mt.train import finetune
    from mt.train.rundir import lock_run_dir

    cfg = load_run_config(config, set_, run_dir)
    folder = Path(cfg.train.run_dir)
    lock = lock_run_dir(folder, "prepare")
    try:
        # A fine-tuning run (train.init_from) prepares its data with the checkpoint's tokenizer.
        given = finetune.Sections(cfg.train, cfg.model, cfg.tokenizer, cfg.finetune)
        init, run = finetune.load_init(given, folder, resume=False)
        finetune.write_tokenizer(init, folder)
        if cfg.finetune.replay_sources:  # the base's translations are training data too
            from mt.adapt import replay

            record = replay.translate(cfg, folder, str(config))  # one process: all chunks
            replay.use(cfg, folder, str(config), record, main=True)  # type: ignore[arg-type]
        run_prepare(cfg.data, run.tokenizer, run.train.seed, folder)
    finally:
        lock.release()


@app.command()
def plot(
    run_dir: Annotated[Path, typer.Argument(help="A run directory of mt train.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="PNG file.")] = Path("curves.png"),
) -> None:
    """Draw training loss, validation loss, dev BLEU and learning rate over steps."""
    from mt.plot import curves_figure, read_metrics, save_figure

    records = read_metrics(run_dir / "metrics.jsonl")
    save_figure(curves_figure(records, str(run_dir)), output)
    typer.echo(f"wrote {output}", err=True)


@app.command()
def average(
    checkpoints: Annotated[list[Path], typer.Argument(help="Checkpoints of one run.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Averaged checkpoint.")],
    force: Annotated[
        bool, typer.Option(help="Average checkpoints even when they are of different runs.")
    ] = False,
) -> None:
    """Average the weights of several checkpoints (e.g. the last ones of a run) into one."""
    from mt.checkpoint import average as average_weights
    from mt.checkpoint import save

    save(average_weights(checkpoints, force), output)
    typer.echo(f"averaged {len(checkpoints)} checkpoints into {output}", err=True)


@app.command(name="text-stats")
def text_stats(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint (or run directory).")],
    source: Annotated[
        Path, typer.Option("--source", help="Text in the source language, one sentence a line.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The checkpoint to write.")],
    target: Annotated[
        Path | None,
        typer.Option(help="Its translation, line by line: also count the length bounds."),
    ] = None,
    src_lang: Annotated[
        str | None, typer.Option(help="SOURCE's language (default: the model's source).")
    ] = None,
    tgt_lang: Annotated[
        str | None, typer.Option(help="TARGET's language (default: the model's target).")
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing OUTPUT.")] = False,
) -> None:
    """Add a case table (and, with --target, length bounds) counted from text to a checkpoint
    that has none, such as an imported or older one: capitals are then recased and doubtful
    lengths flagged by the training text's statistics, not the fallback guesses."""
    from mt.checkpoint import a_model, load, resolve_checkpoint, save, with_text_stats
    from mt.data.prepare import count_files
    from mt.errors import MtError

    checkpoint = resolve_checkpoint(checkpoint)
    if output.exists() and not force:
        raise MtError(f"{output} exists; add --force to replace it")
    data = a_model(load(checkpoint), checkpoint)
    pair = data["config"].get("data", {})
    src = src_lang or pair.get("src_lang")
    tgt = tgt_lang or pair.get("tgt_lang")
    if not src or not tgt:
        raise MtError(f"{checkpoint}: names no language pair; give --src-lang and --tgt-lang")
    stats = count_files(source, target, src, tgt)
    save(with_text_stats(data, stats), output)
    bounds = stats.lengths.get(f"{src}-{tgt}")
    typer.echo(
        f"wrote {output}: a {src} case table of {len(stats.case[src]):,} words"
        + (f", {src}-{tgt} length bounds {bounds[0]} / {bounds[1]}" if bounds else ""),
        err=True,
    )


@app.command()
def shortlist(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint (or run directory).")],
    source: Annotated[
        Path, typer.Option("--source", help="Training text in the source language (.gz read).")
    ],
    target: Annotated[
        Path, typer.Option("--target", help="Its translation, line by line (.gz read).")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The checkpoint to write.")],
    k: Annotated[
        int, typer.Option(help="Best target pieces kept per source piece (--shortlist's most).")
    ] = 100,
    frequent: Annotated[
        int, typer.Option(help="Most frequent target pieces, always candidates.")
    ] = 100,
    force: Annotated[bool, typer.Option(help="Replace an existing OUTPUT.")] = False,
) -> None:
    """Add a lexical shortlist counted from parallel text to a checkpoint: decoding with
    --shortlist K then computes only each batch's candidate rows of the output layer, and
    `mt export --to ctranslate2` writes it as CTranslate2's vocabulary map."""
    from mt.checkpoint import a_model, load, resolve_checkpoint, save
    from mt.errors import MtError
    from mt.shortlist import build, read_pairs
    from mt.tokenizer import Tokenizer

    if not 1 <= k <= 100_000:
        raise MtError(f"--k must be in [1, 100,000], not {k}")
    if not 0 <= frequent <= 1_000_000:
        raise MtError(f"--frequent must be in [0, 1,000,000], not {frequent}")
    checkpoint = resolve_checkpoint(checkpoint)
    if output.exists() and not force:
        raise MtError(f"{output} exists; add --force to replace it")
    data = a_model(load(checkpoint), checkpoint)
    tokenizer = Tokenizer.from_stored(data["tokenizer"])
    built = build(tokenizer, read_pairs(source, target), k, frequent)
    data["shortlist"] = built.to_dict()
    save(data, output)
    mean = len(built.targets) / max(1, int((built.offsets[1:] > built.offsets[:-1]).sum()))
    typer.echo(
        f"wrote {output}: a shortlist of {built.lines:,} pairs, {mean:.1f} target pieces per "
        f"source piece seen (at most {k}), {len(built.frequent)} frequent",
        err=True,
    )

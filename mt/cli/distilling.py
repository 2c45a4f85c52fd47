"""`mt distill`: a student trained on its teachers' translations (mt/distill.py)."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Annotated

import typer

from mt.cli.app import app
from mt.cli.options import ConfigArg, RunDirOption, SetOption, load_run_config, use_threads
from mt.errors import MtError

ShardOption = Annotated[
    str | None,
    typer.Option(
        help="K/N: translate share K (0..N-1) of N of the chunks and stop (array jobs); the "
        "last share to finish merges the translations. Under torchrun each rank takes its own."
    ),
]


@app.command()
def distill(
    config: ConfigArg,
    set_: SetOption = None,
    run_dir: RunDirOption = None,
    resume: Annotated[
        bool, typer.Option(help="Continue the student's training in the run directory.")
    ] = False,
    shard: ShardOption = None,
) -> None:
    """Translate CONFIG's training sources with the teachers of its distill section (beam
    search), then train the model CONFIG describes, the student, on those translations.

    The translations are kept in RUN/distill/ by what made them: a rerun (of a killed job
    too) translates only what is missing. Under `torchrun --nproc_per_node=N` each process
    translates its share of the chunks, then all train together; with --shard K/N (array
    jobs) a process translates its share and stops."""
    from mt.atomic import write_text
    from mt.config_rules import validate
    from mt.data.corpus import train_sources
    from mt.distill import Teachers, distil, origin, say, student_data, teacher_paths
    from mt.memory import check_model_fits, keep_freed_memory
    from mt.runtime.shards import this_shard
    from mt.train.rundir import lock_run_dir, make_run_dir, refuse_finished_run

    keep_freed_memory()
    cfg = load_run_config(config, set_, run_dir)  # before torch: config errors come fast
    paths = teacher_paths(cfg.distill, str(config))
    folder = Path(cfg.train.run_dir)
    refuse_finished_run(folder, resume)  # before the translation, not hours into it
    check_model_fits(cfg.model, cfg.tokenizer.vocab_size, cfg.tokenizer.vocab_size)
    share = this_shard(shard)
    group = _join_group(cfg) if share is not None and shard is None else None
    lock = lock_run_dir(folder, "distill") if share is None else None
    if lock is None:  # the processes of one job share the folder; the chunks keep them apart
        make_run_dir(folder)
    use_threads("distill", cfg.train.threads or None)
    teachers = Teachers(cfg, paths, cfg.train.device, str(config))
    sources = train_sources(cfg.data)
    limit, root = cfg.data.max_train_examples, folder / "distill"
    done = [distil(teachers, s, limit, root, share) for s in sources]
    if lock is not None:
        lock.release()  # the trainer takes it again
    elif group is None:  # --shard: an array job's task ends with its share
        say(f"share {share.index}/{share.count} translated; once every share is, mt distill "
            "without --shard trains the student")  # fmt: skip
        return
    else:
        from mt.train.distributed import barrier

        barrier(group)  # every chunk is written and merged now: each process reads the result
        done = [distil(teachers, s, limit, root) for s in sources]
    distilled = [x for x in done if x is not None]
    if len(distilled) != len(sources):  # a bug: every chunk was written
        raise MtError(f"{root}: a distilled corpus is missing after every share was written")
    cfg.data = student_data(cfg.data, distilled, cfg.distill.keep_original)
    try:
        validate(cfg)
    except MtError as err:
        raise MtError(f"{config}: the student's data: {err}") from None
    record = origin(teachers, distilled)
    if group is None or group.main:
        write_text(folder / "distill.json", json.dumps(record, indent=1) + "\n", "the record")
    del teachers, done
    gc.collect()  # the teachers' weights, before the student's training allocates
    from mt.train.trainer import train as run_training

    state = run_training(cfg, folder, resume, origin=record)
    typer.echo(f"done: step {state.step}, the student's checkpoints in {folder}", err=True)


def _join_group(cfg):  # noqa: ANN001, ANN202
    """The process group torchrun describes, joined before the translation so that the
    processes can wait for one another's chunks; the training then uses the same group."""
    from mt.device import resolve_device
    from mt.train.distributed import init

    group, _ = init(resolve_device(cfg.train.device), cfg.train.collective_timeout_s)
    return group

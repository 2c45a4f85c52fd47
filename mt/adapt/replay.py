"""Self-replay: general source text translated by the frozen base, trained beside the domain.

Fine-tuning on a domain forgets what the base knew; mixing the base's own training data back in
(replay, `data.corpora`) keeps it best of what docs/fine-tuning.md measured, but an imported
model's data is not at hand. General text in the *source* language is (any monolingual text a
user has). `finetune.replay_sources` names such a file: before the run trains, the base of
`train.init_from` translates it once (with a beam of `finetune.replay_beam`) and the
pairs become one more corpus of `data.corpora`, at `finetune.replay_weight`, beside the domain's.
The model thus keeps being shown what the base says on general text: sequence-level
distillation from the base (Kim and Rush 2016) confined to general text, where the KL term of
`finetune.keep: kl` also pulls on the domain's own batches (the trade measured there).

The translation is `mt distill`'s (mt/distill.py: the translator `mt translate` builds, chunked,
each chunk written once, a killed run resumed where it stopped, the chunks shared out over
torchrun's processes) and is kept the same way, in `RUN/replay/KEY/text.{SRC,TGT}` where KEY is
a digest of the base's fingerprint, the search and the source lines: a rerun or a resumed run
finds it and translates nothing, another base or beam translates again.

Why a key of `mt train` and not a recipe of `mt distill` or `mt translate` plus `data.corpora`:
the translation has to come from the very base the run starts from, with the settings it is
recorded with; a recipe leaves the user to keep a translated file in step with the base (a
fine-tune of a fine-tune, another checkpoint), which the digest does here, and a fine-tuning
config then says in one place what keeps the general domain.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from mt.adapt.defaults import keeping
from mt.config import Config, CorpusConfig, DataConfig, DistillConfig
from mt.errors import MtError

FOLDER = "replay"  # RUN/replay/KEY: the base's translations of the replay sources


def sources_path(cfg: Config, where: str) -> Path:
    """`finetune.replay_sources` as a file that exists."""
    path = Path(cfg.finetune.replay_sources)
    if not path.is_file():
        raise MtError(f"{where}: finetune.replay_sources: {path}: no such file")
    return path


def base_path(cfg: Config, run_dir: Path, where: str) -> str:
    """The base that translates: `train.init_from`, or as the run's config.yaml records it
    (a resumed run, which may be given neither)."""
    from mt.train.finetune import recorded_init_from

    base = cfg.train.init_from or (recorded_init_from(run_dir) if run_dir.is_dir() else "")
    if not base:
        raise MtError(
            f"{where}: finetune.replay_sources is translated by the base of train.init_from: "
            "set it (or --init-from)"
        )
    return base


def base_config(cfg: Config, base: str) -> Config:
    """The run's config as `mt distill` would see it with the base as its one teacher and the
    replay's search: what mt.distill.Teachers reads."""
    teacher = DistillConfig(teachers=[base], beam=cfg.finetune.replay_beam)
    return dataclasses.replace(cfg, distill=teacher)


def translate(cfg: Config, run_dir: Path, where: str, shard: Any = None) -> dict[str, Any] | None:
    """The base's translation of the replay sources in `run_dir`/replay, found or made (this
    process's share with `shard`): its record (folder, lines, whether it was found), or None
    when other processes' chunks are still missing."""
    from mt.data.corpus import line_chunks
    from mt.distill import Teachers, teacher_paths, translate_lines

    path = sources_path(cfg, where)
    tcfg = base_config(cfg, base_path(cfg, run_dir, where))
    paths = teacher_paths(tcfg.distill, where)
    teachers = Teachers(tcfg, paths, cfg.train.device, where, who="mt train: replay")
    limit = cfg.finetune.replay_max_lines
    langs = (cfg.data.src_lang, cfg.data.tgt_lang)
    found = translate_lines(
        teachers, _first(line_chunks(path), limit, path), langs, str(path), run_dir / FOLDER, shard,
        limit,
    )  # fmt: skip
    if found is None:
        return None
    folder, key, lines, cached = found
    return {
        "sources": str(path),
        "folder": str(folder),
        "key": key,
        "lines": lines,
        "cached": cached,
        "base": teachers.teachers[0].fingerprint,
        "beam": cfg.finetune.replay_beam,
        "weight": keeping(cfg.finetune).replay_weight,
    }


def _first(chunks: Any, limit: int, path: Path) -> Any:
    """The chunks' lines up to `limit` (0: all); an empty file is an error (a wrong file,
    never an intended input)."""
    seen = 0
    for chunk in chunks:
        if limit and seen + len(chunk) >= limit:
            yield chunk[: limit - seen]
            return
        seen += len(chunk)
        yield chunk
    if not seen:
        raise MtError(f"{path}: finetune.replay_sources is empty")


def with_replay(d: DataConfig, record: dict[str, Any]) -> DataConfig:
    """The run's data section with the replayed pairs as one more corpus: the domain's corpora
    as they were (`data.train` becomes the first of `data.corpora`) and the base's
    translations at the replay weight."""
    from mt.data.corpus import train_sources

    corpora = [
        CorpusConfig(s.name, s.root, s.format, s.hf_subset, s.weight, s.general)
        for s in train_sources(d)
    ]
    if any(Path(c.root) == Path(record["folder"]) for c in corpora):
        return d  # the run's own config.yaml, which holds the replayed corpus already
    corpora.append(
        CorpusConfig(
            name="text", root=record["folder"], format="text", weight=record["weight"], general=True
        )
    )
    return dataclasses.replace(d, corpora=corpora)


def prepare(cfg: Config, run_dir: Path, where: str, resume: bool) -> dict[str, Any] | None:
    """Before `mt train` trains: with `finetune.replay_sources`, the base's translation made
    or found (under the run directory's lock, as `mt distill` takes it; under torchrun each
    process translates its share of the chunks, then all wait for the whole) and `cfg.data`
    given the replayed corpus. Its record (also RUN/replay.json, and the checkpoints' origin);
    None without replay sources."""
    if not cfg.finetune.replay_sources:
        return None
    from mt.runtime.shards import this_shard
    from mt.train.rundir import lock_run_dir, make_run_dir, refuse_finished_run

    base_path(cfg, run_dir, where)  # no base or a wrong path fails before the base is loaded
    sources_path(cfg, where)
    refuse_finished_run(run_dir, resume)  # before the translation, not minutes into it
    share = this_shard(None)
    if share is None:
        lock = lock_run_dir(run_dir, "replay")
        try:
            record = translate(cfg, run_dir, where)
        finally:
            lock.release()  # the trainer takes it again
    else:  # torchrun: each process its share of the chunks, then the whole for all
        from mt.cli.distilling import _join_group
        from mt.train.distributed import barrier

        make_run_dir(run_dir)
        group = _join_group(cfg)
        translate(cfg, run_dir, where, share)
        barrier(group)
        record = translate(cfg, run_dir, where)
    if record is None:  # a bug: every chunk was written
        raise MtError(f"{run_dir / FOLDER}: the replay translation is missing after every share")
    use(cfg, run_dir, where, record, share is None or share.index == 0)
    import gc

    gc.collect()  # the base's weights, before the training allocates
    return {"replay": record}


def use(cfg: Config, run_dir: Path, where: str, record: dict[str, Any], main: bool) -> None:
    """`cfg.data` given the replayed corpus of `record`, checked as a config's data is, and
    the record written to RUN/replay.json (by the `main` process)."""
    from mt.atomic import write_text
    from mt.config_rules import validate

    cfg.data = with_replay(cfg.data, record)
    try:
        validate(cfg)
    except MtError as err:
        raise MtError(f"{where}: the data with the replay: {err}") from None
    if main:
        text = json.dumps({"replay": record}, indent=1) + "\n"
        write_text(run_dir / "replay.json", text, "the replay record")

"""The Python face of `mt`: load a model, translate, score, train from a config.

`mt/__init__.py` names these and imports this module on first use, so `import mt` stays cheap.
Each function is a thin layer over what the CLI calls: `mt.translation.session.Session` (the
one door into a trained or imported model; `Session.translator(...).translate(requests)` and
`Session.scorer(...).score_lines`) and `mt.train.trainer.train`. A user's error is an `MtError`
with one line, as on the command line; decode settings are named as the keywords of
`translate` (`beam`, not `--beam`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

from mt.config import Config
from mt.errors import MtError
from mt.translation.requests import Request
from mt.translation.session import DecodeOptions, Session
from mt.views.score import PairScore, TargetTooLong

OPTIONS = tuple(f.name for f in dataclasses.fields(DecodeOptions))


def keyword(key: str) -> str:
    """`decode.beam` -> `beam`: how this API names a setting in its errors."""
    return key.split(".")[-1]


def load(
    checkpoint: str | Path | Sequence[str | Path],
    device: str = "auto",
    adapter: str | Path | None = None,
) -> Session:
    """A model to translate and score with: a checkpoint file, a run directory (its `best.pt`)
    or several checkpoints (an ensemble), on `device` ("cpu", "cuda" or "auto"); `adapter`: a
    LoRA adapter trained on the checkpoint, applied beside its weights (`finetune.adapter`)."""
    paths = [checkpoint] if isinstance(checkpoint, (str, Path)) else list(checkpoint)
    session = Session(paths, device, name=keyword)
    return session if adapter is None else session.with_adapter(adapter)


def _options(given: dict[str, Any]) -> DecodeOptions:
    unknown = sorted(set(given) - set(OPTIONS))
    if unknown:
        raise MtError(f"unknown decode setting {unknown[0]!r}; known: {', '.join(OPTIONS)}")
    return DecodeOptions(**given)


@overload
def translate(model: Session, text: str, to: str | None = None, **options: Any) -> str: ...
@overload
def translate(
    model: Session, text: Sequence[str], to: str | None = None, **options: Any
) -> list[str]: ...
def translate(
    model: Session, text: str | Sequence[str], to: str | None = None, **options: Any
) -> str | list[str]:
    """The translation of `text` (one sentence, or a list: a list back, in order) into `to`
    (a multilingual model's target language; a bilingual model writes its own). `options`
    override the checkpoint's decode settings by their names in the config's decode section
    (`beam=5`, `greedy=True`, `max_len_a=1.5`...). Placeholders, tags and URLs are kept as
    written, as `mt translate` keeps them."""
    lines = [text] if isinstance(text, str) else list(text)
    given = _options(options)
    targets = model.targets(to, ratio=given.target_vocab_ratio)
    translator = model.translator(given, targets=targets)
    out = [t.text for t in translator.translate([Request(line) for line in lines])]
    return out[0] if isinstance(text, str) else out


def score(
    model: Session, sources: Sequence[str], targets: Sequence[str], to: str | None = None
) -> list[PairScore]:
    """How likely `model` finds each target given its source (forced decoding, as `mt score`):
    per pair the log-probability, the length-normalised `score` beam search ranks by, and the
    log-probability of each target token."""
    if len(sources) != len(targets):
        raise MtError(f"{len(sources)} sources but {len(targets)} targets")
    try:
        return model.scorer(to=to).score_lines(list(sources), list(targets))
    except TargetTooLong as err:
        raise MtError(f"targets[{err.index}]: {err}") from None


def fit(
    config: str | Path | Config,
    run_dir: str | Path | None = None,
    overrides: Sequence[str] = (),
    resume: bool = False,
    init_from: str | Path | None = None,
) -> Path:
    """Train as `config` (a YAML file with `overrides` as `--set` takes them, or a Config) says,
    as `mt train` does; returns the run directory, whose `best.pt` `load` reads. The same
    process may train and then translate. (`mt.train` is the package of the training code,
    hence the name.)"""
    from mt.config_file import load_config
    from mt.memory import check_model_fits
    from mt.train.trainer import train

    given = list(overrides)
    if init_from is not None:  # an override, so validation sees it (train.freeze needs it)
        given.append(f"train.init_from={json.dumps(str(init_from))}")
    if isinstance(config, Config):
        if given:
            raise MtError("overrides apply to a config file; change the Config's fields instead")
        cfg = config
    else:
        cfg = load_config(config, given)
    if run_dir is not None:
        cfg.train.run_dir = str(run_dir)
    # A model too big for this machine, refused before the data is prepared (as `mt train`).
    check_model_fits(cfg.model, cfg.tokenizer.vocab_size, cfg.tokenizer.vocab_size)
    folder = Path(cfg.train.run_dir)
    train(cfg, folder, resume)
    return folder

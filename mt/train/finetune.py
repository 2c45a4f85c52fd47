"""Fine-tuning: a new run that starts from another run's checkpoint (`train.init_from`).

A fine-tuning run is a fresh run directory whose model starts from a checkpoint's weights
instead of random ones. Those weights only mean something with the vocabulary and the shape
they were trained with, so the run takes both from the checkpoint:

- the tokenizer embedded in the checkpoint is written into the run directory before data
  preparation, which then finds it and trains none (the config's `tokenizer.*` are not used);
- the model config is the checkpoint's. A `model.*` key of the new config that is left at its
  default counts as unset and takes the checkpoint's value; one set to another value than the
  checkpoint's is refused with one line, except the dropout keys, which fine-tuning often
  changes. (The loaded config cannot tell "written in the file" from "default", so a key
  written with its default value, e.g. `norm: post` for a pre-norm checkpoint, also takes the
  checkpoint's value; the start line prints the model that is trained.)

By default the optimizer is fresh: Adam's moments start at zero and the step at 1, so the
learning-rate schedule warms up again (a fine-tuning config sets a lower `train.lr` and a short
`train.warmup`). `train.init_keep_optimizer` instead keeps the checkpoint's optimizer state and
step: Adam's moments and the schedule continue where the base run stopped (`train.max_steps`
then counts from the base run's step), as if the base run went on with new data.

`train.freeze` stops gradients to `embeddings`, `encoder` or `decoder` (requires_grad False,
left out of the optimizer). With tied embeddings the output projection is the target embedding
matrix, so freezing `embeddings` freezes it too; untied, it belongs to `decoder`.

`finetune.adapter: lora` trains a LoRA adapter alone on the frozen checkpoint (mt/adapt): the
model is the checkpoint's with its projections wrapped (`init_model`), and the run's
checkpoints hold the adapter and the base's fingerprint (mt.adapt.files), a few percent of the
model. A resumed adapter run reads its base again from `init_from` and checks its fingerprint.

The trainer calls `load_init` (every process, before data preparation), `write_tokenizer`
(the process holding the run directory's lock), `init_model` (after building the model) and
`start` (after building the optimizer). `--resume` continues from the run's own `last.pt`
and ignores `init_from`: the model config, `init_from` and `freeze` are the ones `last.pt`
records, so resuming needs neither the base checkpoint nor `--init-from` again.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from mt import checkpoint
from mt.adapt.files import BaseRef, fingerprint
from mt.adapt.lora import LoraSpec, attach
from mt.config import DROPOUT_KEYS, FinetuneConfig, ModelConfig, TokenizerConfig, TrainConfig
from mt.config_file import expand_env, from_dict
from mt.errors import MtError
from mt.model import Transformer
from mt.tokenizer import Tokenizer
from mt.train.shrink import shrink
from mt.train.vocab_update import announce, load_with_new_vocab


@dataclass
class Init:
    """What a fine-tuning run takes from `train.init_from`, held until the trainer uses it."""

    path: Path
    step: int  # the checkpoint's step
    tokenizer: Tokenizer
    weights: dict[str, torch.Tensor] | None  # dropped once loaded into the model
    train_state: dict[str, Any] | None  # optimizer and scaler, for train.init_keep_optimizer
    freeze: list[str]
    keep_optimizer: bool
    new_vocab: bool = False  # train.init_vocab: new (the run trains its own tokenizer)
    adapter: LoraSpec | None = None  # finetune.adapter: lora, trained alone on the base
    base: BaseRef | None = None  # the base's fingerprint, which the adapter's files carry


def merge_model(config: ModelConfig, stored: ModelConfig, source: str) -> ModelConfig:
    """The checkpoint's model config with the config's dropout; refuse a contradicting key."""
    default = ModelConfig()
    merged: dict[str, Any] = {}
    for f in dataclasses.fields(ModelConfig):
        new, old = getattr(config, f.name), getattr(stored, f.name)
        if new == getattr(default, f.name) or new == old:  # a default counts as unset
            merged[f.name] = old
        elif f.name in DROPOUT_KEYS:
            merged[f.name] = new
        else:
            raise MtError(
                f"model.{f.name} is {new!r} in the config but {old!r} in {source}: fine-tuning "
                f"keeps the checkpoint's model; remove the key or set it to {old!r}"
            )
    return ModelConfig(**merged)


def _load(path: Path) -> dict[str, Any]:
    try:
        return checkpoint.a_model(checkpoint.load(path), path)
    except MtError as err:
        raise MtError(f"train.init_from: {err}") from None


def recorded_init_from(run_dir: Path) -> str:
    """`train.init_from` as the run directory's `config.yaml` records it ("" when none)."""
    try:
        raw = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
        return str(raw["train"].get("init_from") or "")
    except (OSError, yaml.YAMLError, TypeError, KeyError, AttributeError):
        return ""


@dataclass(frozen=True)
class Sections:
    """The sections of a run's config that `train.init_from` decides: the model and tokenizer
    become the checkpoint's, and `train` records what the run started from."""

    train: TrainConfig
    model: ModelConfig
    tokenizer: TokenizerConfig
    finetune: FinetuneConfig = dataclasses.field(default_factory=FinetuneConfig)


def _resume_as_recorded(s: Sections, last: Path) -> Sections:
    """A resumed fine-tuning run keeps what it started with, as its `last.pt` records it.

    `init_from` may be missing from the config now (it came from `--init-from`) and model keys
    left at their defaults mean the checkpoint's; the frozen parts must stay the same, since the
    optimizer state in `last.pt` covers exactly the trainable ones.
    """
    t = s.train
    stored = from_dict(checkpoint.load(last)["config"], f"{last} (stored config)")
    if t.freeze and t.freeze != stored.train.freeze:
        raise MtError(
            f"train.freeze is {t.freeze} but {last} was trained with {stored.train.freeze}; "
            "a resumed run keeps its frozen parts"
        )
    if s.finetune != FinetuneConfig() and s.finetune != stored.finetune:
        raise MtError(
            f"the finetune section differs from the one {last} was trained with; a resumed "
            "run keeps its adapter"
        )
    kept = stored.train
    t = dataclasses.replace(
        t,
        init_from=kept.init_from,
        freeze=kept.freeze,
        init_keep_optimizer=kept.init_keep_optimizer,
    )
    model = merge_model(s.model, stored.model, str(last))
    return Sections(t, model, stored.tokenizer, stored.finetune)


def _base_again(s: Sections, last: Path, log: bool) -> Init:
    """The base of a resumed adapter run: its `last.pt` holds the adapter alone, so the
    weights under it are read again from `train.init_from`, and must be the ones it was
    trained on."""
    path = Path(s.train.init_from)
    data = _load(path)
    base = _base_ref(data, path)
    recorded = (checkpoint.load(last).get("adapter") or {}).get("base")
    if recorded != base.fingerprint:
        raise MtError(
            f"{last} is an adapter of another model than {path} (train.init_from): base "
            f"fingerprint {str(recorded)[:12]}, {path} is {base.fingerprint[:12]}"
        )
    if log:
        print(f"the adapter's base: {path}", file=sys.stderr, flush=True)
    tokenizer = Tokenizer.from_stored({**data["tokenizer"], "languages": None})
    step = int(data.get("step") or 0)
    spec = LoraSpec.of(s.finetune)
    return Init(path, step, tokenizer, data["model"], None, [], False, adapter=spec, base=base)


def load_init(
    s: Sections, run_dir: Path, resume: bool, log: bool = True
) -> tuple[Init | None, Sections]:
    """Read `train.init_from`, and the sections `s` of the fine-tuning run's config.

    The model section becomes the checkpoint's (see `merge_model`), the tokenizer section the
    checkpoint's settings and `train.init_from` the expanded path, so `config.yaml` and every
    checkpoint of the run record what was trained and from what (the caller puts the returned
    sections into its config; `s` is not changed). The Init is None when there is nothing to
    load: no `init_from`, or a resumed run (whose `last.pt` has its own weights and tokenizer),
    except a resumed adapter run, whose `last.pt` holds the adapter alone: its Init is the base.
    """
    t = s.train
    last = run_dir / "last.pt"
    lora = s.finetune.adapter == "lora"
    if resume and last.exists():
        if t.init_from or t.freeze or lora or recorded_init_from(run_dir):
            s = _resume_as_recorded(s, last)
            return (_base_again(s, last, log) if s.finetune.adapter == "lora" else None), s
        return None, s
    if not t.init_from:
        _refuse_without_init(s)
        return None, s
    path = Path(expand_env(t.init_from))
    t = dataclasses.replace(t, init_from=str(path))
    data = _load(path)
    stored = from_dict(data["config"], f"{path} (stored config)")
    weights, whole = data["model"], stored.model
    if t.init_shrink:
        refused = "finetune.adapter: lora" if lora else ""
        refused = refused or ("train.init_keep_optimizer" if t.init_keep_optimizer else "")
        whole, weights, kept = shrink(s.model, whole, weights, str(path), refused)
        if log:
            print(kept, file=sys.stderr, flush=True)
    model = merge_model(s.model, whole, str(path))
    new_vocab = t.init_vocab == "new"
    if s.tokenizer != stored.tokenizer and log and not new_vocab:
        print(
            f"note: the tokenizer of {path} is used; the config's tokenizer settings are not",
            file=sys.stderr,
            flush=True,
        )
    tokenizer_cfg = s.tokenizer if new_vocab else stored.tokenizer
    try:
        tokenizer = Tokenizer.from_stored({**data["tokenizer"], "languages": None})
    except Exception:
        raise MtError(f"train.init_from: {path}: the embedded tokenizer cannot be read") from None
    step = int(data.get("step") or 0)
    if t.init_keep_optimizer:
        _check_kept_optimizer(t, data, path, step)
    spec = LoraSpec.of(s.finetune) if lora else None
    if log:
        _announce(t, model, path, step, spec)
    init = Init(
        path=path,
        step=step,
        tokenizer=tokenizer,
        weights=weights,
        train_state=data.get("train_state") if t.init_keep_optimizer else None,
        freeze=list(t.freeze),
        keep_optimizer=t.init_keep_optimizer,
        new_vocab=new_vocab,
        adapter=spec,
        base=None if spec is None else _base_ref(data, path),
    )
    return init, Sections(t, model, tokenizer_cfg, s.finetune)


def _refuse_without_init(s: Sections) -> None:
    """The settings that mean nothing without `train.init_from`, refused by name."""
    t = s.train
    given = [("freeze", t.freeze), ("init_keep_optimizer", t.init_keep_optimizer)]
    given.append(("init_shrink", t.init_shrink))
    for key, value in given + [("init_vocab", t.init_vocab == "new")]:
        if value:
            raise MtError(f"train.{key} needs train.init_from (a checkpoint to start from)")
    if s.finetune.adapter == "lora":
        raise MtError("finetune.adapter needs train.init_from (the base to adapt)")


def _check_kept_optimizer(t: TrainConfig, data: dict[str, Any], path: Path, step: int) -> None:
    """`train.init_keep_optimizer` needs the optimizer state (last.pt's) and steps left."""
    if data.get("train_state") is None:
        raise MtError(
            f"train.init_from: {path} holds no optimizer state (only last.pt does), which "
            "train.init_keep_optimizer needs"
        )
    if t.max_steps <= step:
        raise MtError(
            f"train.max_steps ({t.max_steps:,}) must exceed the step of {path} ({step:,}): "
            "train.init_keep_optimizer continues its step count"
        )


def _announce(t: TrainConfig, m: ModelConfig, path: Path, step: int, spec: LoraSpec | None) -> None:
    """The start line of a fine-tuning: from what, which model, what is trained."""
    start = "optimizer state and step kept" if t.init_keep_optimizer else "fresh optimizer"
    frozen = f", frozen: {', '.join(t.freeze)}" if t.freeze else ""
    if spec is not None:
        frozen = (
            f", the base frozen: a LoRA adapter of rank {spec.rank} (alpha {spec.alpha:g}) "
            f"on {', '.join(spec.targets)}"
        )
    new_vocab = t.init_vocab == "new"
    print(
        f"fine-tuning from {path} (step {step:,}): its "
        f"{'model (a new vocabulary)' if new_vocab else 'tokenizer and model'} "
        f"(d_model {m.d_model}, {m.encoder_layers}+{m.decoder_layers} layers, dropout "
        f"{m.dropout}), {start}{frozen}",
        file=sys.stderr,
        flush=True,
    )


def _base_ref(data: dict[str, Any], path: Path) -> BaseRef:
    return BaseRef(fingerprint(data["model"], data["config"]["model"]), str(path))


def write_tokenizer(init: Init | None, run_dir: Path) -> None:
    """Make the checkpoint's tokenizer the run's, so data preparation trains none.

    A run directory that already has another tokenizer (prepared without `train.init_from`) is
    refused: its token stores hold ids the checkpoint cannot read. `mt prepare` calls this too,
    so a fine-tuning run can be prepared ahead like any other.
    """
    if init is None or init.new_vocab:  # a new vocabulary: preparation trains it
        return
    existing = Tokenizer.load(run_dir)
    if existing is None:
        init.tokenizer.save(run_dir)
    elif existing.fingerprint() != init.tokenizer.fingerprint():
        raise MtError(
            f"{run_dir}: holds a tokenizer other than the one of {init.path}; fine-tuning needs "
            "the checkpoint's: use a new run directory"
        )


def freeze(model: Transformer, parts: list[str]) -> int:
    """Stop gradients to the named parts; returns the number of frozen parameter values.

    The modules are named, not parameter-name patterns, so a tied output projection (the same
    Parameter as the target embeddings) follows `embeddings` by construction.
    """
    tied = model.output.weight is model.tgt_embed.weight
    modules: dict[str, list[torch.nn.Module]] = {
        "embeddings": [model.src_embed, model.tgt_embed],
        "encoder": [model.encoder, model.encoder_norm],
        "decoder": [model.decoder, model.decoder_norm] + ([] if tied else [model.output]),
    }
    frozen: dict[int, torch.nn.Parameter] = {}
    for part in parts:
        for module in modules[part]:
            for p in module.parameters():
                p.requires_grad_(False)
                frozen[id(p)] = p
    return sum(p.numel() for p in frozen.values())


def init_model(
    init: Init | None, model: Transformer, parts: list[str], tokenizer: Tokenizer | None = None
) -> None:
    """Load the checkpoint's weights (fresh runs, and the base of an adapter run), then freeze
    `parts` (fresh and resumed), or wrap the model in the adapter that alone trains. With a new
    vocabulary (`tokenizer`, the run's), the shared pieces' rows are the checkpoint's
    (mt/train/vocab_update.py)."""
    if init is not None and init.weights is not None and init.new_vocab and tokenizer:
        announce(load_with_new_vocab(model, init.weights, init.tokenizer, tokenizer))
        init.weights = None
    if init is not None and init.weights is not None:
        try:
            model.load_state_dict(init.weights)
        except RuntimeError:
            raise MtError(
                f"train.init_from: {init.path}: weights do not match its stored model config"
            ) from None
        init.weights = None
    freeze(model, parts)
    if init is not None and init.adapter is not None:
        attach(model, init.adapter)


def start(
    init: Init,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    write: Callable[[dict[str, Any]], None] | None,
) -> int:
    """The step the run starts from; with `init_keep_optimizer`, the checkpoint's optimizer.

    Kept are Adam's moments and step counts (and the fp16 scaler); the config's betas, eps and
    weight decay still apply. `write` (rank 0's metrics log) gets one record naming the start.
    """
    step = 0
    if init.keep_optimizer and init.train_state is not None:
        ts = init.train_state
        settings = [
            {k: g[k] for k in ("betas", "eps", "weight_decay")} for g in optimizer.param_groups
        ]
        try:
            optimizer.load_state_dict(ts["optimizer"])
        except (ValueError, KeyError, RuntimeError):
            raise MtError(
                f"train.init_from: {init.path}: its optimizer state does not fit this model's "
                "trainable parameters"
            ) from None
        for g, s in zip(optimizer.param_groups, settings):
            g.update(s)
        if scaler.is_enabled() and ts.get("scaler"):
            scaler.load_state_dict(ts["scaler"])
        step = init.step
    init.train_state = None
    if write is not None:
        write(
            {
                "step": step,
                "init_from": str(init.path),
                "init_step": init.step,
                "init_keep_optimizer": init.keep_optimizer,
                "freeze": init.freeze,
                **({"adapter": init.adapter.to_dict()} if init.adapter else {}),
            }
        )
    return step

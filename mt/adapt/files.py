"""Adapter files: what a run with `finetune.adapter` writes, reading one back, and its base.

An adapter file is a checkpoint (mt.checkpoint's format, written atomically the same way)
whose `model` holds only the adapter's tensors and whose `adapter` says what it is (the
LoraSpec) and which base it belongs to: the base's fingerprint, and the path it was trained
from (for messages). It holds no tokenizer: the base's is used. `last.pt` of such a run adds
the training state, so `--resume` works as for any run.

The fingerprint is a SHA-256 of the base's weights (every tensor's name, type, shape and
bytes) and of its model config without the dropout keys (which fine-tuning may change, and
which compute nothing at decoding). An adapter applied to another model would decode
garbage without an error, so the fingerprint is checked wherever one is applied.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mt import checkpoint
from mt.adapt.lora import LoraSpec, adapter_state, fold, with_adapter
from mt.config import DROPOUT_KEYS, Config, to_dict
from mt.config_file import from_dict
from mt.errors import MtError


def fingerprint(weights: Mapping[str, torch.Tensor], model: Mapping[str, Any]) -> str:
    """The base's fingerprint: its weights `weights` (a checkpoint's `model`) and its model
    config `model` (a checkpoint's `config["model"]`), hex."""
    h = hashlib.sha256()
    shape = {k: v for k, v in model.items() if k not in DROPOUT_KEYS}
    h.update(json.dumps(shape, sort_keys=True).encode())
    for key in sorted(weights):
        t = weights[key].detach().cpu().contiguous()
        h.update(f"\0{key}:{t.dtype}:{tuple(t.shape)}\0".encode())
        h.update(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))
    return h.hexdigest()


@dataclass(frozen=True)
class BaseRef:
    """The base an adapter belongs to."""

    fingerprint: str
    path: str  # where it was read from when the adapter was trained


def payload(cfg: Config, model: torch.nn.Module, spec: LoraSpec, base: BaseRef, **extra: Any):
    """What an adapter checkpoint holds; `extra` adds step, metrics or training state."""
    return {
        "format": checkpoint.FORMAT,
        "version": checkpoint.VERSION,
        "config": to_dict(cfg),
        "adapter": {**spec.to_dict(), "base": base.fingerprint, "base_path": base.path},
        "model": adapter_state(model),
        **extra,
    }


@dataclass
class Adapter:
    """An adapter file, read."""

    path: Path
    spec: LoraSpec
    base: BaseRef
    cfg: Config  # the fine-tuning run's (its decode section is what decoding with it uses)
    weights: dict[str, torch.Tensor]


def read(path: str | Path) -> Adapter:
    """An adapter file; a model checkpoint or a broken file is one line."""
    path = checkpoint.resolve_checkpoint(Path(path))
    data = checkpoint.load(path)
    meta = data.get("adapter")
    if not isinstance(meta, dict):
        raise MtError(f"{path}: a model checkpoint, not an adapter (an adapter is written by "
                      "a run with finetune.adapter)")  # fmt: skip
    try:
        spec = LoraSpec.from_dict(meta)
        base = BaseRef(str(meta["base"]), str(meta.get("base_path", "")))
    except (KeyError, TypeError, ValueError):
        raise MtError(f"{path}: its adapter description is incomplete") from None
    cfg = from_dict(data["config"], f"{path} (stored config)")
    return Adapter(path, spec, base, cfg, data["model"])


def check_base(adapter: Adapter, base_path: Path | str, base_fingerprint: str) -> None:
    """Refuse an adapter on another base than its own, in one line naming both files."""
    if adapter.base.fingerprint != base_fingerprint:
        trained = f" (it was trained on {adapter.base.path})" if adapter.base.path else ""
        raise MtError(
            f"{adapter.path} is an adapter of another model than {base_path}{trained}: base "
            f"fingerprint {adapter.base.fingerprint[:12]}, {base_path} is {base_fingerprint[:12]}"
        )


def merged(base_path: Path, adapter_path: Path) -> dict[str, Any]:
    """The checkpoint `mt adapter merge` writes: the base's with the adapter folded into its
    weights and the adapter's decode settings (those `--adapter` decodes with)."""
    base_path = checkpoint.resolve_checkpoint(Path(base_path))
    loaded = checkpoint.load_model(base_path)
    adapter = read(adapter_path)
    data = loaded.data
    check_base(adapter, base_path, fingerprint(data["model"], data["config"]["model"]))
    try:
        model = fold(with_adapter(loaded.model, adapter.spec, adapter.weights))
    except ValueError as err:
        raise MtError(f"{adapter.path}: {err}") from None
    data = {k: v for k, v in data.items() if k not in ("train_state", "model")}
    data["config"] = {**data["config"], "decode": to_dict(adapter.cfg)["decode"]}
    data["model"] = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    data["merged_adapter"] = {"path": str(adapter.path), **adapter.spec.to_dict()}
    return data

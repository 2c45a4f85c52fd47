"""Checkpoints: atomic save, safe load, and the model a checkpoint describes.

A checkpoint is one self-contained file: the resolved config, the tokenizer protos, the weights
and (for `last.pt`) the full training state needed to resume. It is written to a temporary file
in the same folder and renamed, so a crash mid-write never leaves a broken `last.pt`. Loading
uses `torch.load(weights_only=True)`: a file carrying pickled code is refused, never executed.
An adapter (mt.adapt.files) is a checkpoint of the adapter's weights alone, without a tokenizer,
read with its base.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mt.atomic import write_with
from mt.config import Config, ModelConfig, to_dict
from mt.config_file import from_dict
from mt.errors import MtError
from mt.memory import check_model_fits
from mt.model import Transformer
from mt.textstats import TextStats
from mt.tokenizer import Tokenizer

FORMAT = "mt-checkpoint"
VERSION = 1


def payload(
    cfg: Config, tokenizer: Tokenizer, model: torch.nn.Module, **extra: Any
) -> dict[str, Any]:
    """The dictionary every checkpoint holds; `extra` adds step, metrics or training state."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "config": to_dict(cfg),
        "tokenizer": {
            "src": tokenizer.src_proto,
            "tgt": None if tokenizer.joint else tokenizer.tgt_proto,
            "languages": tokenizer.languages.to_dict() if tokenizer.languages else None,
            # An imported model's piece tables (mt/vocab.py); absent for mt's own.
            **({"pieces": list(tokenizer.pieces)} if tokenizer.pieces is not None else {}),
            # The training text's case table and length bounds (mt/textstats.py); absent in
            # checkpoints written before them and in imported ones.
            **({"text": tokenizer.text_stats.to_dict()} if tokenizer.text_stats else {}),
        },
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        **extra,
    }


def save(data: dict[str, Any], path: Path) -> None:
    """Write atomically (see mt.atomic): a crash mid-write never leaves a broken checkpoint."""
    write_with(Path(path), "checkpoint", lambda f: torch.save(data, f))


def resolve_checkpoint(path: Path) -> Path:
    """A run directory stands for its best.pt, as users of other toolkits expect a run's path
    to work; a file is itself."""
    if path.is_dir():
        best = path / "best.pt"
        if not best.is_file():
            raise MtError(f"{path}: a folder without best.pt; name a checkpoint file")
        return best
    return path


def load(path: str | Path, raw: bytes | None = None) -> dict[str, Any]:
    """Read and check a checkpoint; every way it can be wrong is one MtError line. `raw`: the
    file's bytes, already read (sent by another process); `path` then only names it."""
    path = Path(path)
    if raw is None and not path.is_file():
        raise MtError(f"{path}: checkpoint not found")
    try:
        source = path if raw is None else io.BytesIO(raw)
        data = torch.load(source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        # Every refusal starts "Weights only load failed", corrupt bytes too; only a GLOBAL
        # (a class or function to import) means the file carries code or objects.
        if "GLOBAL" in str(err):
            raise MtError(
                f"{path}: refused, the file carries pickled code or objects "
                "(only plain tensors and values are loaded)"
            ) from None
        raise MtError(f"{path}: not a readable checkpoint (corrupt or truncated)") from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile, KeyError):
        raise MtError(f"{path}: not a readable checkpoint (corrupt or truncated)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise MtError(f"{path}: not an mt checkpoint")
    version = data.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise MtError(
            f"{path}: checkpoint format {version} is newer than this mt reads ({VERSION}); "
            "upgrade mt"
        )
    # An adapter (mt.adapt.files) holds no tokenizer: its base's is used.
    for key in ("config", "model") if "adapter" in data else ("config", "tokenizer", "model"):
        if key not in data:
            raise MtError(f"{path}: checkpoint lacks '{key}'")
    return data


def a_model(data: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """`data` (as `load` read it from `path`), refused in one line when it is an adapter
    (mt.adapt.files) where a model is wanted."""
    if "adapter" in data:
        base = data["adapter"].get("base_path") or "its base checkpoint"
        raise MtError(
            f"{path}: an adapter, not a model: decode with its base and --adapter {path} "
            f"(it was trained on {base}), or fold it in with mt adapter merge"
        )
    return data


def with_text_stats(data: dict[str, Any], stats: TextStats) -> dict[str, Any]:
    """The checkpoint `data` (as `load` read it) with `stats` (mt.textstats) added to what it
    holds: a language's case table, a direction's length bounds replace the ones it had."""
    tok = data["tokenizer"]
    old = TextStats.from_dict(tok["text"]) if tok.get("text") else TextStats()
    data["tokenizer"] = {**tok, "text": old.merged(stats).to_dict()}
    return data


@dataclass
class Loaded:
    cfg: Config
    tokenizer: Tokenizer
    model: Transformer
    data: dict[str, Any]


def build_model(m: ModelConfig, tokenizer: Tokenizer) -> Transformer:
    """The model of the model section `m` (sized by the tokenizer's vocabularies) in fp32 on
    the CPU, refused with one line if its weights cannot fit."""
    check_model_fits(m, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    return Transformer(m, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)


def load_model(path: str | Path, device: torch.device | str = "cpu") -> Loaded:
    """Model (eval mode), tokenizer and config from one checkpoint file."""
    data = a_model(load(path), path)
    cfg = from_dict(data["config"], f"{path} (stored config)")
    tok = data["tokenizer"]
    try:
        tokenizer = Tokenizer.from_stored(tok)
    except Exception:
        raise MtError(f"{path}: the embedded tokenizer cannot be read") from None
    model = build_model(cfg.model, tokenizer)
    try:
        model.load_state_dict(data["model"])
    except RuntimeError:
        raise MtError(f"{path}: weights do not match the stored model config") from None
    model.to(device).eval()
    return Loaded(cfg, tokenizer, model, data)


def _same_run(paths: list[Path], runs: list[Any]) -> None:
    """Refuse checkpoints of different runs: averaging unrelated models gives a broken one."""
    first = runs[0]
    for path, run in zip(paths[1:], runs[1:]):
        if run is None or first is None:
            missing = path if run is None else paths[0]
            raise MtError(
                f"{missing}: carries no run id, so it cannot be shown to be of the same run as "
                "the others; add --force to average anyway"
            )
        if run != first:
            raise MtError(
                f"{path}: is of another run than {paths[0]} (run ids {run[:8]} and "
                f"{first[:8]}); averaging unrelated models breaks them. Add --force to average "
                "anyway"
            )


def average(paths: list[Path], force: bool = False) -> dict[str, Any]:
    """Mean of the weights of several checkpoints of one run (config/tokenizer of the last).

    Checkpoints of different runs (by the `run_id` the trainer records) are refused unless
    `force`: their weights live in unrelated coordinates, and the mean translates badly.
    """
    if not paths:
        raise MtError("average: no checkpoints given")
    datas = [load(p) for p in paths]
    if not force:
        _same_run(paths, [d.get("run_id") for d in datas])
    base = datas[-1]
    total = {k: v.double().clone() for k, v in base["model"].items() if v.is_floating_point()}
    for p, data in zip(paths[:-1], datas[:-1]):
        weights = data["model"]
        if weights.keys() != base["model"].keys():
            raise MtError(f"{p}: weights differ in shape from {paths[-1]}; not the same model")
        for k in total:
            if weights[k].shape != total[k].shape:
                raise MtError(f"{p}: '{k}' differs in shape from {paths[-1]}")
            total[k] += weights[k].double()
    model = {
        k: (total[k] / len(paths)).to(v.dtype) if k in total else v
        for k, v in base["model"].items()
    }
    out = {k: v for k, v in base.items() if k != "train_state"}
    out["model"] = model
    out["averaged_from"] = [str(p) for p in paths]
    return out

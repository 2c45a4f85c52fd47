"""Config files: YAML (or a stored mapping) in, a checked `mt.config.Config` out.

Every key is checked (unknown keys, wrong types and impossible values raise MtError naming the
key and the file), so a typo never silently trains the wrong model. `--set section.key=value`
overrides go through the same checks. Strings may refer to environment variables as `${NAME}`
or `${NAME:-default}`, which is how a config names the data folder without hard-coding a
machine's path.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from mt.atomic import write_text
from mt.config import Config, to_dict
from mt.config_rules import validate
from mt.errors import MtError

_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: str) -> str:
    """Replace `${NAME}` and `${NAME:-default}`; an unset NAME without default is an error."""

    def sub(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ and os.environ[name] != "":
            return os.environ[name]
        if default is None:
            raise MtError(f"environment variable {name} is not set (used as ${{{name}}})")
        return default

    return _ENV.sub(sub, value)


def _check_type(value: Any, hint: Any, where: str) -> Any:
    """Return `value` converted to `hint` or raise MtError naming `where`."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        # By type as well: 1 == True, but `tensorboard: 1` is not `true`.
        if not any(value == c and type(value) is type(c) for c in typing.get_args(hint)):
            choices = ", ".join(repr(c) for c in typing.get_args(hint))
            raise MtError(f"{where} must be one of {choices}, got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            if arg is type(None) and value is None:
                return None
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _check_type(value, args[0], where)
    if origin is list:
        if not isinstance(value, list):
            raise MtError(f"{where} must be a list, got {value!r}")
        (item,) = typing.get_args(hint)
        return [_check_type(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if hint is bool:
        if not isinstance(value, bool):
            raise MtError(f"{where} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise MtError(f"{where} must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
            return float(value)  # PyYAML reads `5e-4` (no dot) as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MtError(f"{where} must be a number, got {value!r}")
        try:
            number = float(value)
        except OverflowError:  # an integer beyond any float
            number = math.inf
        if not math.isfinite(number):
            raise MtError(f"{where} must be a finite number, got {value!r}")
        return number
    if hint is str:
        if not isinstance(value, str):
            raise MtError(f"{where} must be a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config type {hint!r}")  # a bug in this module, not user input


def _unknown_key(key: object, section: str, names: set[str]) -> MtError:
    """An unknown key, with the closest known one of its section as the likely intent."""
    path = f"{section}.{key}" if section else str(key)
    close = difflib.get_close_matches(str(key), sorted(names), n=1, cutoff=0.6)
    if close:
        guess = f"{section}.{close[0]}" if section else close[0]
        return MtError(f"unknown key '{path}'; did you mean {guess}?")
    return MtError(f"unknown key '{path}' (known: {', '.join(sorted(names))})")


def _build(cls: type, raw: Any, where: str) -> Any:
    """The dataclass `cls` from the mapping `raw`; errors name the key but not the source."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise MtError(f"{where or 'top level'} must be a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in raw.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in names:
            raise _unknown_key(key, where, names)
        hint = hints[key]
        item = typing.get_args(hint)[0] if typing.get_origin(hint) is list else None
        if dataclasses.is_dataclass(hint):
            kwargs[key] = _build(hint, value, path)
        elif item is not None and dataclasses.is_dataclass(item):
            if not isinstance(value, list):
                raise MtError(f"{path} must be a list, got {value!r}")
            kwargs[key] = [_build(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        else:
            kwargs[key] = _check_type(value, hint, path)
    return cls(**kwargs)


def _checked(raw: Any) -> Config:
    cfg = _build(Config, raw, "")
    validate(cfg)
    return cfg


def from_dict(raw: Any, source: str) -> Config:
    """A checked Config from a mapping; errors start with `source` (a file, a checkpoint)."""
    try:
        return _checked(raw)
    except MtError as err:
        raise MtError(f"{source}: {err}") from None


def _set_path(raw: dict[str, Any], key: str, value: Any, item: str, source: str) -> None:
    """Put one `--set` value into the raw mapping; `item` is the flag's text for errors."""
    parts = key.split(".")
    node: Any = Config
    target = raw
    for i, part in enumerate(parts):
        names = (
            {f.name for f in dataclasses.fields(node)} if dataclasses.is_dataclass(node) else set()
        )
        if part not in names:
            err = _unknown_key(part, ".".join(parts[:i]), names) if names else None
            if err is None:
                err = MtError(f"unknown key '{'.'.join(parts[: i + 1])}'")
            raise MtError(f"--set {item} (on {source}): {err}")
        node = typing.get_type_hints(node)[part]
        if i == len(parts) - 1:
            if dataclasses.is_dataclass(node):
                raise MtError(f"--set {item}: '{key}' is a section, name one of its keys")
            target[part] = value
        else:
            if not isinstance(target.get(part), dict):
                target[part] = {}
            target = target[part]


def parse_override(item: str) -> tuple[str, Any]:
    """`train.max_steps=50` -> ("train.max_steps", 50); the value is read as YAML."""
    if "=" not in item:
        raise MtError(f"--set {item}: expected KEY=VALUE")
    key, text = item.split("=", 1)
    try:
        value = yaml.safe_load(text) if text != "" else ""
    except yaml.YAMLError:
        value = text
    return key.strip(), value


def load_config(path: str | os.PathLike[str], overrides: list[str] | None = None) -> Config:
    """Read a YAML config, apply `--set` overrides, check everything, expand `${ENV}`."""
    source = str(path)
    p = Path(path)
    if not p.is_file():
        raise MtError(f"{source}: config file not found")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise MtError(f"{source}: not valid UTF-8") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise MtError(f"{source}:{line} invalid YAML ({getattr(err, 'problem', err)})") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise MtError(f"{source}: top level must be a mapping of sections")
    cfg = _with_overrides(raw, overrides or [], source)
    cfg.data.root = expand_env(cfg.data.root)
    cfg.train.run_dir = expand_env(cfg.train.run_dir)
    # Unset in the config: the node's own cache folder when MT_CACHE is set (nodes of one job
    # share the config but not necessarily a filesystem).
    cfg.data.cache_dir = expand_env(cfg.data.cache_dir or "${MT_CACHE:-}")
    for c in cfg.data.corpora:
        c.root = expand_env(c.root)
    cfg.distill.teachers = [expand_env(t) for t in cfg.distill.teachers]
    return cfg


def _with_overrides(raw: dict[str, Any], overrides: list[str], source: str) -> Config:
    """The checked config of the file with `--set` items applied in order.

    An error is blamed where it comes from: the file when the file alone has it, else the
    first `--set` item after which it appears (an item may also fix a bad value of the file).
    """
    steps: list[tuple[str, dict[str, Any]]] = [(source, copy.deepcopy(raw))]
    for item in overrides:
        key, value = parse_override(item)
        raw = copy.deepcopy(raw)
        _set_path(raw, key, value, item, source)
        steps.append((f"--set {item}", raw))
    try:
        return _checked(raw)
    except MtError as err:
        final = str(err)
    for where, partial in steps:
        try:
            _checked(partial)
        except MtError as err:
            if str(err) == final:
                raise MtError(f"{where}: {final}") from None
    raise MtError(f"{source}: {final}")


def save_config(cfg: Config, path: Path) -> None:
    """Write the resolved config, so a run directory records what was actually trained."""
    write_text(path, yaml.safe_dump(to_dict(cfg), sort_keys=False), "the config")

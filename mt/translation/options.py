"""A caller's decode overrides, made from DecodeConfig, and which of them each door offers.

`DecodeOptions` has one field per DecodeConfig field, of the same type or None (None keeps the
checkpoint's value), so an override and a config key are one name and cannot drift apart: a
field added to DecodeConfig is an override at once, and a flag of `mt translate`
(mt/cli/options.py: `decode_flags`). It is a dataclass made from DecodeConfig's fields rather
than a dict of overrides because callers read it as one (`options.sample`, `astuple` as a cache
key in the server's worker) and its fields can be listed (`dataclasses.fields`); it checks the
type of each value given, so a wrong one is one line here instead of an error deep in search.

`OFFERED` says, in this one place, which settings each command and the server's requests let a
caller set; `mt translate` offers all of them. This module imports no torch: the CLI builds its
flags from it when it starts.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from mt.config import DecodeConfig
from mt.errors import MtError

SETTINGS: dict[str, Any] = typing.get_type_hints(DecodeConfig)  # name -> its type
NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(DecodeConfig))
HELP: dict[str, str] = {
    f.name: f.metadata.get("help", "") for f in dataclasses.fields(DecodeConfig)
}

# The settings each door lets a caller choose, by DecodeConfig's names; the rest keep the
# checkpoint's value there. A new setting is a `mt translate` flag by itself; name it below to
# offer it elsewhere too.
OFFERED: dict[str, tuple[str, ...]] = {
    "translate": NAMES,
    # one output per line, scored against the reference: no n-best, no sampling
    "eval": (
        "beam", "alpha", "greedy", "stop_early", "int8", "dtype", "gemm", "max_tokens",
        "max_len_a", "max_len_b", "workers", "shortlist", "glossary_boost",
    ),
    "score": ("max_tokens", "int8", "dtype", "buffer_lines"),  # forced decoding: no search
    "attention": ("beam",),  # one sentence, shown as the model translated it
    "serve": ("dtype",),  # how the server computes; the search is each request's
    # `options` of POST /v1/translate (mt/serve/bodies.py). The server's memory and threads
    # (int8, dtype, max_tokens, buffer_lines) are its runner's, not a request's.
    "request": (
        "beam", "nbest", "alpha", "greedy", "stop_early", "no_repeat_ngram", "max_len_a",
        "max_len_b", "sample", "topk", "topp", "temperature", "seed",
    ),
}  # fmt: skip


def base_type(hint: Any) -> type:
    """The type a setting's value has, from its annotation: bool, int, float or str (`int | None`
    is int; a Literal's choices are strings, checked by mt.config_rules)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is typing.Literal:
        return type(args[0])
    if args and typing.get_origin(hint) is not None:  # `X | None`, `Literal[...] | None`
        return base_type(args[0]) if len(args) == 1 else hint
    return hint


def choices(hint: Any) -> tuple[str, ...]:
    """A Literal setting's allowed values (`Literal["a", "b"] | None` too); () for the others."""
    if typing.get_origin(hint) is typing.Literal:
        return tuple(str(a) for a in typing.get_args(hint))
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return choices(args[0]) if len(args) == 1 else ()


def value_type(name: str) -> type:
    """The type a value of DecodeConfig's setting `name` has (`base_type`)."""
    return base_type(SETTINGS[name])


def accepts(want: type, value: Any) -> bool:
    """Whether `value` has the type `want` (an int is a float; a bool is not a number)."""
    if want is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if want is float:
        return isinstance(value, int | float)
    return isinstance(value, want)


TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _check(self: Any) -> None:
    """Each value given has its setting's type: a wrong one is one line, not a search error."""
    hints = typing.get_type_hints(type(self))
    for f in dataclasses.fields(self):
        value, want = getattr(self, f.name), base_type(hints[f.name])
        if value is not None and not accepts(want, value):
            raise MtError(f"decode setting {f.name!r} must be {TYPE_NAMES[want]}, got {value!r}")


def _given(self: Any) -> dict[str, Any]:
    """The settings given, by name: what is applied to the checkpoint's."""
    values = ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))
    return {name: value for name, value in values if value is not None}


def overrides_of(config: type) -> type:
    """The overrides class of a settings dataclass: each of its fields, of its type or None
    (default None), keeping the field's metadata (its help); by keyword only, since the order
    of the config's fields means nothing here."""
    hints = typing.get_type_hints(config)
    return dataclasses.make_dataclass(
        config.__name__.removesuffix("Config") + "Options",
        [
            (f.name, hints[f.name] | None, dataclasses.field(default=None, metadata=f.metadata))
            for f in dataclasses.fields(config)
        ],
        namespace={"__post_init__": _check, "given": _given, "__module__": __name__},
        kw_only=True,
    )


DecodeOptions = overrides_of(DecodeConfig)
DecodeOptions.__doc__ = (
    "A caller's overrides of the checkpoint's decode settings, one optional field per "
    "DecodeConfig field (None keeps the checkpoint's); see mt.translation.options."
)

"""Decode settings are defined once, in DecodeConfig: a caller's overrides (DecodeOptions), the
server's request schema and `mt translate`'s flags are checked against it here, so a new
option cannot be half wired (a flag that never reaches the search, a type that differs)."""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing

import pytest
from conftest import run_in_process

from mt.config import DecodeConfig
from mt.decode.session import DecodeOptions

CONFIG = typing.get_type_hints(DecodeConfig)
OPTIONS = typing.get_type_hints(DecodeOptions)


def _base(hint: object) -> object:
    """`Annotated[int | None, ...]` -> int: the value's type, without None or metadata."""
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        assert len(rest) == 1, hint
        hint = rest[0]
    if typing.get_origin(hint) is typing.Literal:  # a choice of strings, checked by the rules
        hint = type(typing.get_args(hint)[0])
    return hint


def test_every_override_is_a_decode_setting_of_the_same_type() -> None:
    for f in dataclasses.fields(DecodeOptions):
        assert f.name in CONFIG, f"DecodeOptions.{f.name} is no DecodeConfig field"
        assert f.default is None  # None keeps the checkpoint's value
        assert _base(OPTIONS[f.name]) == _base(CONFIG[f.name]), f.name


def test_the_server_schema_is_the_overrides() -> None:
    from mt.serve.bodies import CLIENT_OPTIONS, SERVER_SETTINGS

    names = {f.name for f in dataclasses.fields(DecodeOptions)}
    assert set(CLIENT_OPTIONS) | set(SERVER_SETTINGS) == names
    for name, t in CLIENT_OPTIONS.items():
        assert t == _base(CONFIG[name]), name


def test_every_override_is_a_translate_flag_of_the_same_type() -> None:
    from mt.cli.decoding import translate

    params = inspect.signature(translate).parameters
    hints = typing.get_type_hints(translate, include_extras=True)
    for f in dataclasses.fields(DecodeOptions):
        assert f.name in params, f"mt translate has no --{f.name.replace('_', '-')}"
        assert _base(hints[f.name]) == _base(CONFIG[f.name]), f.name
        assert params[f.name].default in (None, False), f.name  # the checkpoint's by default


class _Seen(Exception):
    pass


def test_every_translate_flag_reaches_the_settings(monkeypatch, capsys, tmp_path) -> None:
    """Each flag set to a value no default has arrives in the options the session applies."""
    import mt.cli.decoding as decoding

    given = {
        "beam": 3, "nbest": 2, "alpha": 0.7, "greedy": True, "stop_early": True, "int8": True,
        "max_tokens": 777, "max_len_a": 1.5, "max_len_b": 7, "no_repeat_ngram": 3,
        "buffer_lines": 9, "sample": True, "topk": 4, "topp": 0.8, "temperature": 1.3, "seed": 5,
    }  # fmt: skip
    seen: dict = {}

    class Session:
        def targets(self, *args: object) -> None:
            return None

        def translator(self, options: DecodeOptions, *args: object, **kw: object) -> None:
            seen["options"] = options
            raise _Seen

    def open_session(checkpoints, device, dtype=None):  # noqa: ANN001, ANN202
        seen["dtype"] = dtype
        return Session()

    monkeypatch.setattr(decoding, "open_session", open_session)
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    args = ["translate", tmp_path / "x.pt", "-i", src, "--dtype", "fp32"]
    for name, value in given.items():
        flag = "--" + name.replace("_", "-")
        args += [flag] if value is True else [flag, value]
    with pytest.raises(_Seen):
        run_in_process(args, capsys, monkeypatch)
    options = seen["options"].given()
    assert options == given
    assert seen["dtype"] == "fp32"  # how this process computes: the session's
    assert set(given) | {"dtype"} == {f.name for f in dataclasses.fields(DecodeOptions)}

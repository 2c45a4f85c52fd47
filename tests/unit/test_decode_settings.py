"""Decode settings are defined once, in DecodeConfig: a caller's overrides (DecodeOptions), the
commands' decode flags and the server's request schema are made from its fields
(mt.translation.options, mt.cli.options.decode_flags), so a new option cannot be half wired (a flag
that never reaches the search, a type that differs). The checks below walk DecodeConfig's
fields, and a setting added in a subclass shows up as an override and as a flag."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import dataclass
from typing import Any

import pytest
import typer
from support.inprocess import run_in_process
from typer.testing import CliRunner

from mt.config import DecodeConfig
from mt.config_decode import setting
from mt.errors import MtError
from mt.translation.options import OFFERED, DecodeOptions, base_type, overrides_of

CONFIG = typing.get_type_hints(DecodeConfig)
FIELDS = dataclasses.fields(DecodeConfig)


def _commands() -> dict[str, Any]:
    from mt.cli import app

    return {c.name or c.callback.__name__: c.callback for c in app.registered_commands}


def _changed(f: dataclasses.Field) -> Any:
    """A value of field `f`'s type that its default is not: what a caller would override."""
    hint = CONFIG[f.name]
    if typing.get_origin(hint) is typing.Literal:
        return next(a for a in typing.get_args(hint) if a != f.default)
    if hint is bool:
        return not f.default
    return f.default + (2 if hint is int else 0.25)


def test_the_overrides_are_the_config_fields_each_optional() -> None:
    options = dataclasses.fields(DecodeOptions)
    hints = typing.get_type_hints(DecodeOptions)
    assert [f.name for f in options] == [f.name for f in FIELDS]
    for f, o in zip(FIELDS, options):
        assert o.default is None, o.name  # None keeps the checkpoint's value
        assert hints[o.name] == CONFIG[f.name] | None, o.name
        assert o.metadata["help"] == f.metadata["help"] != "", o.name
    assert DecodeOptions().given() == {}


def test_an_override_of_the_wrong_type_is_one_line() -> None:
    assert DecodeOptions(alpha=1, beam=3).given() == {"alpha": 1, "beam": 3}  # an int is a float
    for name, value in (("beam", "3"), ("greedy", 1), ("alpha", True), ("dtype", 16)):
        with pytest.raises(MtError, match=f"decode setting '{name}' must be"):
            DecodeOptions(**{name: value})
    with pytest.raises(TypeError):
        DecodeOptions(3)  # by name only


@dataclass
class _Wider(DecodeConfig):
    lookahead: int = setting(0, "tokens the search looks ahead")


def test_a_setting_added_to_the_config_is_an_override_and_a_flag() -> None:
    from mt.cli.options import decode_flags

    Options = overrides_of(_Wider)
    assert Options(lookahead=3).given() == {"lookahead": 3}
    with pytest.raises(MtError, match="'lookahead' must be an integer"):
        Options(lookahead="3")
    seen: dict[str, Any] = {}
    app = typer.Typer()

    @app.command()
    @decode_flags(("beam", "lookahead"), Options)
    def command(path: str, *, options: Any, loud: bool = False) -> None:
        seen.update(path=path, options=options, loud=loud)

    runner = CliRunner()
    result = runner.invoke(app, ["x", "--lookahead", "3", "--loud"])
    assert result.exit_code == 0, result.output
    assert seen["path"] == "x" and seen["loud"] is True
    assert isinstance(seen["options"], Options)
    assert seen["options"].given() == {"lookahead": 3}
    assert runner.invoke(app, ["x", "--lookahead", "many"]).exit_code == 2  # a usage error
    params = inspect.signature(command).parameters
    assert list(params) == ["path", "beam", "lookahead", "loud"]  # in the place of `options`
    assert "Tokens the search looks ahead" in params["lookahead"].annotation.__metadata__[0].help
    assert params["lookahead"].default is None


def test_mt_translate_offers_every_setting_as_a_flag_of_its_type() -> None:
    callback = _commands()["translate"]
    params = inspect.signature(callback).parameters
    hints = typing.get_type_hints(callback, include_extras=True)
    for f in FIELDS:
        assert f.name in params, f"mt translate has no --{f.name.replace('_', '-')}"
        assert params[f.name].default is None, f.name  # the checkpoint's by default
        assert base_type(hints[f.name].__origin__) == base_type(CONFIG[f.name]), f.name
        help_text = hints[f.name].__metadata__[0].help
        assert f.metadata["help"].rstrip(".")[1:] in help_text, f.name


def test_a_setting_of_named_values_lists_them_in_help() -> None:
    """`--penalty [gnmt|power]`: the choices come from the field's Literal, every one of them."""
    hints = typing.get_type_hints(_commands()["translate"], include_extras=True)
    literal = [f for f in FIELDS if typing.get_origin(CONFIG[f.name]) is typing.Literal]
    assert {f.name for f in literal} >= {"penalty", "dtype"}
    for f in literal:
        shown = hints[f.name].__metadata__[0].metavar
        assert shown == "[" + "|".join(typing.get_args(CONFIG[f.name])) + "]", f.name
    assert hints["beam"].__metadata__[0].metavar is None  # a number keeps typer's own


def test_each_command_offers_the_settings_its_entry_names() -> None:
    names = {f.name for f in FIELDS}
    commands = _commands()
    for command, offered in OFFERED.items():
        if command == "request":
            continue
        params = set(inspect.signature(commands[command]).parameters)
        assert params & names == set(offered), command
        assert "options" not in params, command  # given as one DecodeOptions


class _Seen(Exception):
    pass


def _translate_sees(args: list[object], monkeypatch, capsys, tmp_path) -> dict[str, Any]:
    """What `mt translate ARGS` hands the session: its options, --dtype and the target-vocab
    ratio (the session is a stand-in; the command stops at the translator)."""
    import mt.cli.decoding as decoding

    seen: dict[str, Any] = {}

    class Session:
        def targets(self, to, frm, target_vocab, ratio=None) -> None:  # noqa: ANN001
            seen["ratio"] = ratio

        def translator(self, options: Any, *args: object, **kw: object) -> None:
            seen["options"] = options
            raise _Seen

    def open_session(checkpoints, device, dtype=None, adapter=None):  # noqa: ANN001, ANN202
        seen["dtype"], seen["adapter"] = dtype, adapter
        return Session()

    monkeypatch.setattr(decoding, "open_session", open_session)
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    with pytest.raises(_Seen):
        run_in_process(["translate", tmp_path / "x.pt", "-i", src, *args], capsys, monkeypatch)
    return seen


def test_every_translate_flag_reaches_the_settings(monkeypatch, capsys, tmp_path) -> None:
    """Each setting's flag, set to a value its default is not, arrives in the options the
    session applies; --dtype is also how the session's process computes."""
    given = {f.name: _changed(f) for f in FIELDS}
    given["dtype"] = "fp32"
    args: list[object] = []
    for name, value in given.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else "--no-" + flag[2:])
        else:
            args += [flag, value]
    seen = _translate_sees(args, monkeypatch, capsys, tmp_path)
    assert seen["options"].given() == given
    assert seen["dtype"] == "fp32"
    assert seen["ratio"] == given["target_vocab_ratio"]


def test_a_flag_left_out_keeps_the_checkpoints_and_no_x_says_false(
    monkeypatch, capsys, tmp_path
) -> None:
    seen = _translate_sees([], monkeypatch, capsys, tmp_path)
    assert seen["options"].given() == {} and seen["dtype"] is None and seen["ratio"] is None
    seen = _translate_sees(["--no-greedy", "--no-sample"], monkeypatch, capsys, tmp_path)
    assert seen["options"].given() == {"greedy": False, "sample": False}


def test_the_server_schema_is_made_from_the_settings() -> None:
    from mt.serve.bodies import CLIENT_OPTIONS, SERVER_SETTINGS, TRANSLATE_SCHEMA, parse_options
    from mt.serve.limits import ApiError

    assert set(CLIENT_OPTIONS) == set(OFFERED["request"])
    assert not set(SERVER_SETTINGS) & set(CLIENT_OPTIONS)
    schema = TRANSLATE_SCHEMA["properties"]["options"]["properties"]
    kinds = {bool: "boolean", int: "integer", float: "number", str: "string"}
    by_name = {f.name: f for f in FIELDS}
    for name, t in CLIENT_OPTIONS.items():
        assert t == base_type(CONFIG[name]), name
        assert schema[name] == {"type": kinds[t], "description": by_name[name].metadata["help"]}
        value = _changed(by_name[name])
        options, _ = parse_options({name: value})
        assert options.given() == {name: value}, name
        with pytest.raises(ApiError, match=f"options.{name} must be"):
            parse_options({name: "x" if t is not str else 1})
    for name in SERVER_SETTINGS:
        with pytest.raises(ApiError, match="a setting of the server"):
            parse_options({name: _changed(by_name[name])})

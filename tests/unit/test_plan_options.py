"""The steps around search are defined once, in mt.plan.PlanOptions: the flags of `mt translate`,
`mt eval` and `mt serve`, the keys of a /v1/translate body a request chooses itself and their
JSON schema, `mt serve`'s configuration, a request's `Plan` and the rules are made from its
fields. The tables below say which door offers which option, so dropping one from a door (or
adding one that reaches no door) fails here, and the checks walk the fields, so a field added to
the options shows up as a flag."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from mt.decode_rules import plan_checks, validate_plan
from mt.errors import MtError
from mt.plan import OFFERED, PlanOptions, step
from mt.translation.requests import Plan

FIELDS = {f.name: f for f in dataclasses.fields(PlanOptions)}
HINTS = typing.get_type_hints(PlanOptions)
# Which door offers which option: written out here, so that one dropped from a door fails.
DOORS = {
    "translate": {
        "protect", "pivot", "split_sentences", "recase", "keep_numbers", "glossary",
        "glossary_hard", "glossary_soft",
    },
    "eval": {
        "protect", "split_sentences", "recase", "keep_numbers", "glossary", "glossary_hard",
        "glossary_soft",
    },
    "serve": {"keep_numbers", "glossary", "glossary_hard"},
    "request": {"split_sentences", "glossary"},
}  # fmt: skip


def _commands() -> dict[str, Any]:
    from mt.cli import app

    return {c.name or c.callback.__name__: c for c in app.registered_commands}


def _click_options(command: str) -> dict[str, Any]:
    """The options of `mt COMMAND` as click builds them from its signature, by parameter."""
    from mt.cli import app

    group = typer.main.get_command(app)
    return {p.name: p for p in group.commands[command].params}


def test_each_door_offers_the_options_its_entry_names() -> None:
    assert {door: set(names) for door, names in OFFERED.items()} == DOORS
    assert set().union(*DOORS.values()) == set(FIELDS)  # every option reaches a door


@pytest.mark.parametrize("command", ["translate", "eval", "serve"])
def test_every_option_a_command_offers_is_its_flag_made_from_the_field(command: str) -> None:
    options = _click_options(command)
    for name in OFFERED[command]:
        f = FIELDS[name]
        option = options.get(name)
        assert option is not None, f"mt {command} has no --{name.replace('_', '-')}"
        assert option.help == f.metadata["help"] != "", (command, name)
        assert option.default == f.default, (command, name)
        assert f"--{name.replace('_', '-')}" in option.opts, (command, name)
        if HINTS[name] is bool:  # a switch both ways: --x / --no-x
            assert option.secondary_opts == [f"--no-{name.replace('_', '-')}"], (command, name)
    # and no option of the plan that the command does not offer
    assert set(options) & set(FIELDS) == set(OFFERED[command]), command
    params = inspect.signature(_commands()[command].callback).parameters
    assert "plan" not in params, command  # handed to the command as one PlanOptions


def test_the_flags_meet_the_plan_rules_before_a_model_loads(monkeypatch, capsys) -> None:
    from support.inprocess import run_in_process

    rc, _, err = run_in_process(
        ["eval", "--hyp", "h", "--ref", "r", "--glossary-hard"], capsys, monkeypatch
    )
    assert rc == 2 and err.strip().endswith("--glossary-hard needs --glossary FILE")
    rc, _, err = run_in_process(
        ["translate", "x.pt", "--split-sentences", "--pivot", "fr"], capsys, monkeypatch
    )
    assert rc == 2 and "--split-sentences cannot be combined with --pivot" in err


@dataclass(frozen=True)
class _More(PlanOptions):
    shortlist: bool = step(False, "Write only the pieces a shortlist allows.")


def test_an_option_added_to_the_plan_is_a_flag() -> None:
    from mt.cli.options import plan_flags

    seen: dict[str, Any] = {}
    app = typer.Typer()

    @app.command()
    @plan_flags(("keep_numbers", "shortlist"), _More)
    def command(path: str, *, plan: Any, loud: bool = False) -> None:
        seen.update(path=path, plan=plan, loud=loud)

    runner = CliRunner()
    result = runner.invoke(app, ["x", "--shortlist", "--no-keep-numbers", "--loud"])
    assert result.exit_code == 0, result.output
    assert seen["plan"] == _More(shortlist=True, keep_numbers=False) and seen["loud"]
    assert runner.invoke(app, ["x"]).exit_code == 0 and seen["plan"] == _More()
    params = inspect.signature(command).parameters
    assert list(params) == ["path", "keep_numbers", "shortlist", "loud"]  # where `plan` stood
    assert params["shortlist"].annotation.__metadata__[0].help == (
        "Write only the pieces a shortlist allows."
    )


def test_every_step_of_a_plan_is_an_option_of_the_same_name() -> None:
    """A request's Plan holds the options by their names (the stages read them there), plus
    what the caller's input decides: HTML, and the language sentences are cut in."""
    steps = {f.name: f for f in dataclasses.fields(Plan)}
    assert set(steps) - set(FIELDS) == {"html", "split"}
    assert set(FIELDS) - set(steps) == {"split_sentences", "glossary"}  # the terms: a Request's
    for name in set(steps) & set(FIELDS):
        assert steps[name].default == FIELDS[name].default, name
        if HINTS[name] is bool:
            flipped = PlanOptions(**{name: not FIELDS[name].default})
            assert getattr(Plan.of(flipped, "de"), name) is not FIELDS[name].default, name
    assert Plan.of(PlanOptions(pivot="fr"), "de").pivot == "fr"
    assert Plan.of(PlanOptions(), "de") == Plan()  # the defaults are one
    assert Plan.of(PlanOptions(split_sentences=True), "de").split == "de"
    assert Plan.of(PlanOptions(split_sentences=False), "de").split is None
    assert Plan.of(PlanOptions(), "de", html=True) == Plan(html=True)


def test_the_keys_a_request_chooses_are_the_options_request_keys() -> None:
    from mt.serve.bodies import TRANSLATE_KEYS, TRANSLATE_SCHEMA, parse_translate
    from mt.serve.limits import ApiError, Limits

    properties = TRANSLATE_SCHEMA["properties"]
    for name in OFFERED["request"]:
        key = FIELDS[name].metadata["request"]
        assert key.name == name and key in TRANSLATE_KEYS
        assert properties[name] == key.schema and key.schema["description"]
    body = {"items": [{"src": "Ein Hund."}]}
    assert parse_translate(body, Limits()).split is True  # a request's default: sentences
    assert parse_translate(body | {"split_sentences": False}, Limits()).split is False
    assert parse_translate(body | {"glossary": {"Hund": "hound"}}, Limits()).glossary
    with pytest.raises(ApiError, match="'split_sentences' must be true or false, got a string"):
        parse_translate(body | {"split_sentences": "yes"}, Limits())
    with pytest.raises(ApiError, match="'glossary' must be an object of terms or an id, got a"):
        parse_translate(body | {"glossary": ["Hund"]}, Limits())
    # the server's own steps are not a request's
    for name in set(FIELDS) - set(OFFERED["request"]):
        assert name not in properties, name
        with pytest.raises(ApiError, match=f"unknown key '{name}' in the body"):
            parse_translate(body | {name: True}, Limits())


def test_the_server_config_holds_the_plan_whole() -> None:
    from mt.serve.config import ServeConfig
    from mt.serve.prometheus import Metrics
    from mt.serve.worker import ModelWorker

    names = {f.name for f in dataclasses.fields(ServeConfig)}
    assert "plan" in names and not names & set(FIELDS)  # no option copied into a field
    assert ServeConfig(models={}).plan == PlanOptions()  # `mt translate`'s steps by default
    with pytest.raises(TypeError):
        ServeConfig({"tiny": [Path("a.pt")]})  # by keyword only
    plan = PlanOptions(keep_numbers=False, glossary_hard=True, glossary=Path("terms.tsv"))
    config = ServeConfig(models={"tiny": [Path("a.pt")], "b": [Path("b.pt")]}, plan=plan)
    worker = ModelWorker("b", config, Metrics())  # loads nothing until started
    assert worker.config is config and worker.config.plan is plan
    assert worker.paths == [Path("b.pt")] and worker.adapter_paths == {}


def test_mt_serve_hands_its_plan_flags_to_the_server(monkeypatch, capsys) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr("mt.serve.serve", lambda *args, **kwargs: seen.update(kwargs))
    from support.inprocess import run_in_process

    rc, _, err = run_in_process(
        ["serve", "a.pt", "--no-keep-numbers", "--glossary", "t.tsv", "--glossary-hard"],
        capsys,
        monkeypatch,
    )
    assert rc == 0, err
    assert seen["plan"] == PlanOptions(
        keep_numbers=False, glossary=Path("t.tsv"), glossary_hard=True
    )


@pytest.mark.parametrize(
    ("plan", "html", "alignment", "message"),
    [
        (PlanOptions(glossary_hard=True), False, False, "--glossary-hard needs --glossary FILE"),
        (PlanOptions(glossary_soft=True), False, False, "--glossary-soft needs --glossary FILE"),
        (
            PlanOptions(glossary=Path("g"), glossary_soft=True, glossary_hard=True),
            False,
            False,
            "--glossary-soft and --glossary-hard cannot be combined",
        ),
        (PlanOptions(split_sentences=True, pivot="fr"), False, False, "--split-sentences"),
        (PlanOptions(split_sentences=True), False, True, "--split-sentences"),
        (PlanOptions(split_sentences=True), True, False, "--split-sentences"),
        (PlanOptions(glossary=Path("g"), pivot="fr"), False, False, "--glossary cannot be"),
        (PlanOptions(glossary=Path("g")), True, False, "--glossary cannot be"),
    ],
)
def test_the_plan_rules_are_one_line(plan, html, alignment, message) -> None:
    with pytest.raises(MtError, match=message):
        validate_plan(plan, html, alignment)


def test_what_the_plan_rules_let_through() -> None:
    fine = [
        PlanOptions(),
        PlanOptions(split_sentences=True, glossary=Path("g"), glossary_hard=True),
        PlanOptions(pivot="fr", protect=False, recase=False, keep_numbers=False),
    ]
    for plan in fine:
        assert all(ok for ok, _ in plan_checks(plan)), plan
    assert all(ok for ok, _ in plan_checks(PlanOptions(), html=True, alignment=True))

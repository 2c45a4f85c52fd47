"""The manual's reference pages, generated from the code so they cannot drift from it.

`config_reference()` lists every key of a config file from the dataclasses of mt/config.py:
its type, default, allowed values and the description written beside the field (the comment
lines right above it, the comment on its line, or a string right below it; a decode setting's
`metadata["help"]`, which the CLI's `--help` shows too). The allowed range
of a number is not copied from anywhere: each value is tried against `mt.config_rules.validate` at
its extremes, and the rule that rejects it is quoted, so the page says what the check says.
`cli_reference()` lists every `mt` command with its arguments and flags from the Typer app.

MkDocs runs this file as a hook (mkdocs.yml: `hooks`), adding `reference/config.md` and
`reference/cli.md` to the build, and `reference/errors.md`, every one-line error the code can
raise; `python docs/hooks/reference.py config|cli|errors` prints a page.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import sys
import tokenize
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mt.config as config_module
import mt.config_rules as rules_module
from mt.config import Config
from mt.errors import MtError

CONFIG_PY = Path(config_module.__file__)
PAGES = {
    "reference/config.md": "config",
    "reference/cli.md": "cli",
    "reference/errors.md": "errors",
}


@dataclass
class Key:
    """One config key as the reference page shows it."""

    name: str  # "train.max_steps", "data.corpora[].weight"
    type: str
    default: str
    allowed: str
    description: str


# -- descriptions, read from the source of mt/config.py -------------------------------------------


def field_descriptions(source: str) -> dict[tuple[str, str], str]:
    """(class, field) -> the text written for the field: comment lines right above it (up to a
    blank line or the previous statement), the comment on its own line, and an attribute
    docstring (a string statement right after it)."""
    comments: dict[int, str] = {}  # line -> comment text
    code_lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_lines.update(range(tok.start[0], tok.end[0] + 1))
    found: dict[tuple[str, str], str] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        body = node.body
        for i, stmt in enumerate(body):
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            parts = []
            above, line = [], stmt.lineno - 1
            while line >= 1 and line in comments and line not in code_lines:
                above.insert(0, comments[line])
                line -= 1
            parts += above
            if stmt.end_lineno in comments and stmt.end_lineno in code_lines:
                parts.append(comments[stmt.end_lineno])
            after = body[i + 1] if i + 1 < len(body) else None
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                parts.append(" ".join(after.value.value.split()))
            found[(node.name, stmt.target.id)] = " ".join(p for p in parts if p)
    return found


# -- types, defaults and allowed values ------------------------------------------------------------


def type_name(hint: Any) -> str:
    """`int`, `list of float`, `str or bool`: the type as a user writes a value of it."""
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        kinds = dict.fromkeys(type(a).__name__ for a in typing.get_args(hint))
        return " or ".join(kinds)
    if origin is list:
        (item,) = typing.get_args(hint)
        return f"list of {type_name(item)}"
    return getattr(hint, "__name__", str(hint))


def value_text(value: Any) -> str:
    """A value as it is written in YAML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    if dataclasses.is_dataclass(value):
        return "(a section)"
    return repr(value)


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


PROBES: dict[Any, tuple[Any, ...]] = {
    int: (-1, 0, 2**62),
    float: (-1e300, 0.0, 1e300),
    list[float]: ([], [-1.0, 2.0]),
}


def allowed_values(section: str, name: str, hint: Any) -> str:
    """What `validate` accepts, found by asking it: the rule that rejects the key's extreme
    values (its message less the key and the ", got ..." part), or the choices of a Literal."""
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(value_text(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) is list and typing.get_origin(typing.get_args(hint)[0]):
        (choices,) = typing.get_args(hint)
        return "any of " + ", ".join(value_text(a) for a in typing.get_args(choices))
    if hint is bool:
        return "true or false"
    key = f"{section}.{name}"
    rules: list[str] = []
    for probe in PROBES.get(hint, ()) if section else ():
        cfg = Config()
        setattr(getattr(cfg, section), name, probe)
        try:
            rules_module.validate(cfg)
        except MtError as err:
            rule = str(err).split(", got ")[0]
            if key in rule:
                rule = rule.removeprefix(f"{key} must be ")
                if rule not in rules:
                    rules.append(rule)
    return "; ".join(rules)


def config_keys() -> list[Key]:
    """Every key of a config file, section by section, in the order of mt/config.py."""
    texts = field_descriptions(CONFIG_PY.read_text(encoding="utf-8"))
    keys = []
    for section in dataclasses.fields(Config):
        cls = typing.get_type_hints(Config)[section.name]
        keys += _section_keys(section.name, cls, texts)
    return keys


def _section_keys(prefix: str, cls: type, texts: dict[tuple[str, str], str]) -> list[Key]:
    hints = typing.get_type_hints(cls)
    keys = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        name = f"{prefix}.{f.name}"
        item = typing.get_args(hint)[0] if typing.get_origin(hint) is list else None
        section = prefix if "." not in prefix and "[" not in prefix else ""
        allowed = allowed_values(section, f.name, hint)  # section "": no probing
        if item is not None and dataclasses.is_dataclass(item):
            keys.append(
                Key(name, f"list of {item.__name__}", "[]", "", texts.get((cls.__name__, f.name)))
            )
            keys += _section_keys(f"{name}[]", item, texts)
            continue
        if dataclasses.is_dataclass(hint):  # a group of keys (`data.terms`): its own keys
            keys.append(Key(name, hint.__name__, "", "", texts.get((cls.__name__, f.name))))
            keys += _section_keys(name, hint, texts)
            continue
        description = f.metadata.get("help") or texts.get((cls.__name__, f.name), "")
        keys.append(Key(name, type_name(hint), value_text(default_of(f)), allowed, description))
    return keys


def section_docs() -> dict[str, str]:
    """Each section's class docstring, the page's paragraph above its table."""
    hints = typing.get_type_hints(Config)
    return {
        f.name: " ".join((hints[f.name].__doc__ or "").split()) for f in dataclasses.fields(Config)
    }


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def config_reference() -> str:
    """The page of every config key."""
    out = [
        "# Config keys",
        "",
        "Generated from the dataclasses of `mt/config.py` at every build of this manual "
        "(`docs/hooks/reference.py`): the type, the default, what the checks accept and the "
        "description written beside each field. A YAML file sets any of them by section "
        "(`train:` then `max_steps: 2000`), the command line with `--set train.max_steps=2000`. "
        "An unknown key, a wrong type or a value outside what is allowed is one line naming "
        "the key and the file, exit 2.",
        "",
    ]
    docs = section_docs()
    keys = config_keys()
    for section in docs:
        out += [f"## `{section}`", "", docs[section], ""]
        out += [
            "| key | type | default | allowed | what it is |",
            "| --- | --- | --- | --- | --- |",
        ]
        for k in keys:
            if k.name.split(".")[0] == section:
                out.append(
                    f"| `{k.name}` | {cell(k.type)} | `{cell(k.default)}` | {cell(k.allowed)} "
                    f"| {cell(k.description)} |"
                )
        out.append("")
    return "\n".join(out)


# -- the command line ----------------------------------------------------------------------------


def cli_reference() -> str:
    """The page of every `mt` command, its arguments and its flags, from the Typer app."""
    import typer

    from mt.cli import app

    group = typer.main.get_command(app)
    context = type(group).context_class
    root = context(group, info_name="mt")
    out = [
        "# Commands",
        "",
        "Generated from the `mt` command line (`mt/cli/`) at every build of this manual "
        "(`docs/hooks/reference.py`); `mt COMMAND --help` prints the same. A bad flag or "
        "value is one line naming it, exit 2.",
        "",
    ]
    commands = []  # (name, command, parent context): a group's commands as `mt GROUP NAME`
    for name, command in group.commands.items():
        if hasattr(command, "commands"):  # a group (mt adapter ...)
            parent = context(command, info_name=name, parent=root)
            commands += [(f"{name} {n}", c, parent) for n, c in command.commands.items()]
        else:
            commands.append((name, command, root))
    for name, command, parent in commands:
        ctx = context(command, info_name=name.split()[-1], parent=parent)
        out += [f"## `mt {name}`", "", " ".join((command.help or "").split()), ""]
        usage = command.get_usage(ctx).removeprefix("Usage: ")
        usage = re.sub(r"\{([^{}]+)\}", lambda m: m.group(1).upper(), usage)  # {config}: CONFIG
        usage = usage.replace("......", "...")  # {CHECKPOINT...}...: CHECKPOINT...
        out += ["```", usage, "```", ""]
        out += ["| argument or flag | default | what it does |", "| --- | --- | --- |"]
        for param in command.params:
            record = param.get_help_record(ctx)
            if record is None:  # hidden
                continue
            flag = record[0]
            default = param.default
            shown = "" if default is None or param.required else value_text(default)
            if param.param_type_name == "argument":
                shown = "required" if param.required else "optional"
            help_text = " ".join((getattr(param, "help", None) or "").split())
            out.append(f"| `{cell(flag)}` | {cell(shown)} | {cell(help_text)} |")
        out.append("")
    return "\n".join(out)


# -- the one-line errors -------------------------------------------------------------------------


@dataclass
class ErrorMessage:
    """One `MtError` the code can raise: its message with the variable parts named."""

    module: str  # "mt/cli/decoding.py"
    line: int
    text: str  # "‹ref› is empty: no reference lines to score against"


def message_text(node: ast.expr) -> str | None:
    """The message of `MtError(<node>)`, its f-string fields written as ‹field›; None when
    the message is built elsewhere (a variable)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                assert isinstance(value, ast.FormattedValue)
                parts.append(f"‹{ast.unparse(value.value)}›")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = (message_text(n) or f"‹{ast.unparse(n)}›" for n in (node.left, node.right))
        return left + right
    return None


def error_messages(root: Path | None = None) -> list[ErrorMessage]:
    """Every `MtError("...")` written in mt/, in file order."""
    package = root or CONFIG_PY.parent
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "MtError"
                and node.args
            ):
                text = message_text(node.args[0])
                if text is not None:
                    where = f"mt/{path.relative_to(package).as_posix()}"
                    found.append(ErrorMessage(where, node.lineno, " ".join(text.split())))
    return sorted(found, key=lambda e: (e.module, e.line))


def errors_reference() -> str:
    """The page of every one-line error, by the module that raises it."""
    out = [
        "# Errors",
        "",
        "Every one-line error `mt` can print (`mt: error: ...`, exit 2 unless the table of "
        "[Troubleshooting](../troubleshooting.md) says otherwise), generated from the "
        "`MtError` calls in `mt/` at every build of this manual (`docs/hooks/reference.py`). "
        "‹name› stands for what the message fills in: a file, a key, a value. The rules a config "
        "value must meet are on [Config keys](config.md) (column *allowed*); their messages "
        "name the key, e.g. `train.warmup must be > 0`. Causes and fixes of the ones met most "
        "are on [Troubleshooting](../troubleshooting.md).",
        "",
    ]
    lines: dict[tuple[str, str], list[str]] = {}  # one row per message, all its lines
    for e in error_messages():
        lines.setdefault((e.module, e.text), []).append(str(e.line))
    module = ""
    for (where, text), at in lines.items():
        if where != module:
            module = where
            out += ["", f"## `{module}`", "", "| message | line |", "| --- | --- |"]
        out.append(f"| {cell(text).replace('`', '')} | {', '.join(at)} |")
    out.append("")
    return "\n".join(out)


# -- the MkDocs hook -----------------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the build, as if they were files in docs/."""
    from mkdocs.structure.files import File

    for uri, page in PAGES.items():
        files.append(File.generated(config, uri, content=GENERATORS[page]()))
    return files


GENERATORS = {"config": config_reference, "cli": cli_reference, "errors": errors_reference}

if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    if which not in GENERATORS:
        sys.exit(f"usage: python docs/hooks/reference.py {'|'.join(GENERATORS)}")
    print(GENERATORS[which]())

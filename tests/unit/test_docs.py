"""The manual: `mkdocs build --strict` passes (no broken link or anchor, no page outside the
navigation, nothing fetched from the network), and its reference pages, generated from the
code, describe every config key and every command flag."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_generator():
    spec = importlib.util.spec_from_file_location(
        "docs_reference", REPO / "docs" / "hooks" / "reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_reference"] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    return module


def test_every_config_field_has_a_description():
    gen = load_generator()
    keys = gen.config_keys()
    missing = [k.name for k in keys if not k.description]
    assert not missing, f"config fields without a comment or docstring in mt/config.py: {missing}"
    # Every field of every section is on the page, once.
    from mt.config import Config

    sections = [f.name for f in dataclasses.fields(Config)]
    for section in sections:
        cls = type(getattr(Config(), section))
        for f in dataclasses.fields(cls):
            assert sum(k.name == f"{section}.{f.name}" for k in keys) == 1


def test_descriptions_are_read_from_comments_and_docstrings():
    gen = load_generator()
    source = '''
class A:
    """The class."""

    plain: int = 1
    trailing: int = 2  # said on its line
    # said above,
    # over two lines
    above: str = "x"

    documented: bool = False
    """said below"""
    # a comment after a blank line belongs to the next field
    last: float = 0.5
'''
    found = gen.field_descriptions(source)
    assert found[("A", "plain")] == ""  # the test above fails for such a field
    assert found[("A", "trailing")] == "said on its line"
    assert found[("A", "above")] == "said above, over two lines"
    assert found[("A", "documented")] == "said below"
    assert found[("A", "last")] == "a comment after a blank line belongs to the next field"


def test_allowed_values_come_from_the_checks():
    gen = load_generator()
    by_name = {k.name: k for k in gen.config_keys()}
    assert by_name["decode.beam"].allowed == "in [1, 1,024]"
    assert by_name["train.warmup"].allowed == "> 0"
    assert by_name["model.norm"].allowed == 'one of "post", "pre"'
    assert by_name["train.freeze"].allowed == 'any of "embeddings", "encoder", "decoder"'
    assert by_name["train.max_steps"].default == "100000"


def test_cli_reference_lists_every_command_and_flag():
    import typer

    from mt.cli import app

    page = load_generator().cli_reference()
    group = typer.main.get_command(app)
    commands = []
    for name, command in group.commands.items():
        subs = getattr(command, "commands", None)  # a group: `mt adapter merge`
        commands += [(f"{name} {n}", c) for n, c in subs.items()] if subs else [(name, command)]
    assert "adapter merge" in dict(commands)
    for name, command in commands:
        assert f"## `mt {name}`" in page
        for param in command.params:
            if param.param_type_name == "option":
                for flag in param.opts:
                    assert re.search(rf"`[^`]*{re.escape(flag)}\b", page), (name, flag)


def test_errors_reference_holds_every_message():
    gen = load_generator()
    found = gen.error_messages()
    texts = {e.text for e in found}
    assert "‹ref› is empty: no reference lines to score against" in texts  # an f-string
    assert "mt eval needs --ref (or a TMX or XLIFF --src, which holds them)" in texts  # plain
    assert "average: no checkpoints given" in texts
    # As many as the source has MtError calls with a written message (a few pass one built
    # elsewhere, a variable).
    calls = sum(
        len(re.findall(r"MtError\(\s*(?:f?\"|\(?\s*f?\")", p.read_text(encoding="utf-8")))
        for p in (REPO / "mt").rglob("*.py")
    )
    assert len(found) >= calls > 100
    page = gen.errors_reference()
    assert page.count("\n| ") >= len(texts)


def test_readme_is_a_front_page_whose_test_command_ci_runs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    commands = [line for line in readme.splitlines() if line.startswith("python3 -m venv .venv")]
    assert len(commands) == 2  # the main job and the tests
    assert "bash scripts/demo.sh" in commands[0]
    assert commands[1].endswith("pytest -q -n auto --dist loadscope")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci  # CI runs it to the letter


def test_mkdocs_build_is_strict_clean_and_fetches_nothing(tmp_path):
    pytest.importorskip(
        "mkdocs", reason="the docs extra (mkdocs, mkdocs-material) is not installed"
    )
    pytest.importorskip("material", reason="mkdocs-material is not installed")
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "WARNING" not in result.stderr, result.stderr[-3000:]
    config_page = (site / "reference" / "config" / "index.html").read_text(encoding="utf-8")
    assert "train.max_steps" in config_page and "decode.beam" in config_page
    assert "mt translate" in (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "is empty: no reference lines" in (
        site / "reference" / "errors" / "index.html"
    ).read_text(encoding="utf-8")
    # Nothing a page loads comes from elsewhere: no web fonts, scripts or stylesheets.
    fetched = re.compile(r'<(?:script|link|img)\b[^>]*(?:src|href)="(?:https?:)?//', re.I)
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        for tag in fetched.findall(html):
            assert 'rel="stylesheet"' not in tag and not tag.lower().startswith("<script"), page
    for css in site.rglob("*.css"):
        assert "fonts.googleapis" not in css.read_text(encoding="utf-8"), css

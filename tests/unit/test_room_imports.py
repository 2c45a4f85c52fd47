"""Who may import whom among the repository's rooms outside mt/: tests never import scripts/ (a
test would pass or fail by a benchmark's code); scripts/ imports tests/ only through
`tests.support` (what a benchmark shares with the tests: the same server, model, bomb and
injected spans), which imports neither scripts/ nor a test module. Within tests/, what tests
share is in support/ (and fixtures in conftest.py, which pytest loads by itself): no test imports
conftest or another test module. Read from the syntax tree
of every file, imports inside functions and `importlib.import_module("...")` included, so that
a path named in a docstring or a command line (`python -m scripts.bench.bf16`) is no import."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
# Tests whose subject is a script itself: they import the script they test, and nothing else
# of scripts/.
SCRIPT_TESTS = {
    "tests/unit/test_scripts_common.py": {"scripts", "scripts.common"},
    "tests/system/test_recipe_search.py": {"scripts.studies", "scripts.studies.recipe_search"},
    "tests/unit/test_update_rank.py": {
        "scripts.studies.update_rank",
        "scripts.studies.update_rank.cut",
        "scripts.studies.update_rank.sparse_cut",
    },
}


def imported(path: Path) -> set[str]:
    """Every module name the file imports, anywhere in it: `import a.b` gives a.b, `from a
    import b` gives a and a.b (b may be a module), `importlib.import_module("a")` gives a."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif (
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id == "__import__")
            )
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return found


def under(names: set[str], tops: set[str]) -> set[str]:
    """The names that are one of the modules `tops` or inside one of them."""
    return {n for n in names if n.split(".")[0] in tops}


def test_imports_are_read_from_the_syntax_tree(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text(
        '"""Runs `python -m scripts.bench.bf16`; see scripts/common.py."""\n'
        "import importlib\n"
        "import scripts.common as c\n"
        "from support.processes import free_port\n"
        "def f():\n"
        "    from scripts.tools import fuzz_spans\n"
        "    return importlib.import_module('scripts.bench.protect'), __import__('support')\n"
        "ARGS = ['-m', 'scripts.bench.bf16']\n",
        encoding="utf-8",
    )
    assert under(imported(path), {"scripts", "support"}) == {
        "scripts.common",
        "scripts.tools",
        "scripts.tools.fuzz_spans",
        "scripts.bench.protect",
        "support",
        "support.processes",
        "support.processes.free_port",
    }


def modules_of_tests() -> set[str]:
    """The top-level names a module of tests/ is imported by: tests/ and each kind's folder
    are on pytest's `pythonpath`, so `conftest`, `support` and every test module, and `tests`."""
    names = {"tests", "support"}
    for folder in (TESTS, *[d for d in TESTS.iterdir() if d.is_dir() and d.name != "support"]):
        names |= {p.stem for p in folder.glob("*.py")}
    return names


def test_no_test_imports_scripts_but_tests_of_a_script():
    wrong = {}
    for path in sorted(TESTS.rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        found = under(imported(path), {"scripts"}) - SCRIPT_TESTS.get(name, set())
        if found:
            wrong[name] = sorted(found)
    assert wrong == {}, "tests import scripts/: move what they share to tests/support/"


def test_the_tests_of_scripts_still_import_them():
    """The allowance is for a test of a script; one that no longer needs it leaves the list."""
    for name, allowed in SCRIPT_TESTS.items():
        assert under(imported(REPO / name), {"scripts"}) == allowed, name


def test_scripts_import_tests_only_through_support_which_imports_no_script():
    tests = modules_of_tests()
    wrong = {}
    for path in sorted((REPO / "scripts").rglob("*.py")):
        found = {
            n
            for n in under(imported(path), tests)
            if n not in ("tests", "tests.support") and not n.startswith("tests.support.")
        }
        if found:
            wrong[path.relative_to(REPO).as_posix()] = sorted(found)
    test_modules = {p.stem for p in TESTS.rglob("test_*.py")} | {"conftest"}
    for path in sorted((TESTS / "support").glob("*.py")):
        found = under(imported(path), {"scripts"} | test_modules)
        if found:
            wrong[path.relative_to(REPO).as_posix()] = sorted(found)
    assert wrong == {}, "scripts/ imports tests.support only; tests/support/ no script or test"


def test_tests_share_through_support_not_conftest_or_each_other():
    tests = {p.stem for p in TESTS.rglob("test_*.py")} | {"conftest"}
    wrong = {}
    for path in sorted(TESTS.rglob("*.py")):
        found = under(imported(path), tests - {path.stem})
        if found:
            wrong[path.relative_to(REPO).as_posix()] = sorted(found)
    assert wrong == {}, "move what tests share to tests/support/ (fixtures: conftest.py)"

"""The house rules of the code's layout that code can check: no import circle in mt/ (counting
imports inside functions and under TYPE_CHECKING, which are circles all the same to a reader),
and no module of mt/ over 400 lines (past that a module holds more than one job)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

MT = Path(__file__).resolve().parents[2] / "mt"
MAX_LINES = 400
# Modules over the bound, each with the size it may not pass until it is split (none now).
TO_SPLIT: dict[str, int] = {}


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module and package of the tree at `root`."""
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that the file imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in known:
                    found.add(full)
                elif node.module in known:
                    found.add(node.module)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_circles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_imports_are_read(tmp_path):
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from p import b\ndef f():\n    import p.c\n")
    (pkg / "b.py").write_text("from p.a import f\n")
    (pkg / "c.py").write_text("")
    known = modules(pkg)
    assert set(known) == {"p", "p.a", "p.b", "p.c"}
    assert imports(pkg / "a.py", known) == {"p.b", "p.c"}
    assert imports(pkg / "b.py", known) == {"p.a"}


def test_no_import_circle_in_mt():
    known = modules(MT)
    graph = {name: imports(path, known) - {name} for name, path in known.items()}
    assert circles(graph) == []


def test_no_module_over_400_lines():
    sizes = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in MT.rglob("*.py")}
    assert len(sizes) > 50
    over = {str(p.relative_to(MT)): n for p, n in sizes.items() if n > MAX_LINES}
    assert {m: n for m, n in over.items() if n > TO_SPLIT.get(m, MAX_LINES)} == {}


# What the search may import: the model it searches, its settings and tokens, itself. The
# restrictions from outside (protected spans, a target language, terms) reach it as step
# rules (mt.search.rules) handed in by the caller.
SEARCH_MAY_IMPORT = {"mt.config", "mt.model", "mt.decoder_state", "mt.tokenizer"}


def test_the_search_imports_no_rule_of_its_callers():
    known = modules(MT)
    searched = {name: imports(path, known) for name, path in known.items()}
    outside = {
        name: sorted(
            m for m in found if not m.startswith("mt.search") and m not in SEARCH_MAY_IMPORT
        )
        for name, found in searched.items()
        if name.startswith("mt.search")
    }
    assert len(outside) >= 6
    assert {name: found for name, found in outside.items() if found} == {}


LAYOUT = MT.parent / "docs" / "code-layout.md"


def layout_entries(text: str) -> dict[str, str]:
    """docs/code-layout.md's entries: the path at a line's start (`mt/x.py`, `mt/pkg/`) ->
    its text, continuation lines (indented) included."""
    out: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if line.startswith("mt/"):
            key, _, rest = line.partition(" ")
            out[key] = rest
        elif key is not None and line.startswith(" "):
            out[key] += " " + line.strip()
        else:
            key = None
    return out


def unnamed(entries: dict[str, str], paths: list[str]) -> list[str]:
    """The module paths (`pkg/name.py` under mt/) that no entry names: a module is named by an
    entry of its own path, or inside its package's entry as `name.py` (`__init__` as
    `__init__`), or inside the entry of a module beside it in the same folder."""
    missing = []
    for path in paths:
        folder, _, name = path.rpartition("/")
        here = f"mt/{folder}/" if folder else "mt/"
        word = "__init__" if name == "__init__.py" else name
        if f"mt/{path}" in entries:
            continue
        texts = [t for k, t in entries.items() if k == here or k.rpartition("/")[0] + "/" == here]
        if not any(re.search(rf"(?<![\w/]){re.escape(word)}", t) for t in texts):
            missing.append(path)
    return missing


def test_unnamed_modules_are_found():
    entries = layout_entries("mt/a.py   one; b.py two\n  more c.py\nmt/p/    x.py\nother\n")
    assert entries == {"mt/a.py": "  one; b.py two more c.py", "mt/p/": "   x.py"}
    assert unnamed(entries, ["a.py", "b.py", "c.py", "p/x.py", "p/y.py", "d.py"]) == [
        "p/y.py",
        "d.py",
    ]


def test_code_layout_names_every_module():
    paths = sorted(
        str(p.relative_to(MT))
        for p in MT.rglob("*.py")
        if p.name != "__init__.py" or p.parent == MT
    )
    assert len(paths) > 100
    assert unnamed(layout_entries(LAYOUT.read_text(encoding="utf-8")), paths) == []

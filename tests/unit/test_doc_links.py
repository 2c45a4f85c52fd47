"""Every relative link of README.md and docs/ leads somewhere: the file exists, and an anchor
names a heading of the page it points to. mkdocs' strict build checks docs/ the same way, but
not README.md, and only where the docs extra is installed; figures that move between the
benchmarks summary and its studies leave links behind, so this check is fast and always runs."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def generated() -> set[Path]:
    """The reference pages docs/hooks/reference.py adds to the build (`PAGES`): no file on disk."""
    hook = (REPO / "docs" / "hooks" / "reference.py").read_text(encoding="utf-8")
    block = hook.split("PAGES = {", 1)[1].split("}", 1)[0]
    return {(REPO / "docs" / name).resolve() for name in re.findall(r'"([\w/.-]+\.md)"', block)}


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def prose(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """The id Python-Markdown's toc extension (mkdocs' default) gives a heading: its text with
    markup dropped, non-word characters removed, lower case, runs of spaces and hyphens one
    hyphen."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text).replace("**", "").replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    """The ids of a page's headings; a repeated one gets `_1`, `_2` as the toc extension does."""
    seen: set[str] = set()
    for _, line in prose(path):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        name, n = base, 0
        while name in seen:
            n += 1
            name = f"{base}_{n}"
        seen.add(name)
    return seen


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of the page's relative links, code spans left out."""
    found = []
    for number, line in prose(path):
        for match in LINK.finditer(CODE_SPAN.sub("", line)):
            target = match.group(1)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto: ...
                found.append((number, target))
    return found


def broken(path: Path, root: Path = REPO) -> list[str]:
    """One line per link of `path` that leads nowhere, its place written relative to `root`."""
    problems, made = [], generated()
    for number, target in links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if dest in made:
            continue  # written at build time; mkdocs' strict build checks its anchors
        if not dest.exists():
            problems.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where} (no heading with that anchor)")
    return problems


def test_every_relative_link_resolves():
    problems = [problem for page in pages() for problem in broken(page)]
    assert not problems, "\n".join(problems)


def test_the_check_finds_what_it_is_for(tmp_path):
    (tmp_path / "b.md").write_text(
        "# The span ban: `scripts/bench/bans.py`\n\n## Idle threads: a short spin\n"
        "## Idle threads: a short spin\n\n```bash\n# not a heading\n```\n",
        encoding="utf-8",
    )
    assert anchors(tmp_path / "b.md") == {
        "the-span-ban-scriptsbenchbanspy",
        "idle-threads-a-short-spin",
        "idle-threads-a-short-spin_1",
    }
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#idle-threads-a-short-spin) [gone](c.md) [moved](b.md#the-span-ban)\n"
        "[web](https://example.org/x.md) `[code](nowhere.md)` [here](#top)\n"
        "```\n[fenced](nowhere.md)\n```\n# Top\n",
        encoding="utf-8",
    )
    found = [problem.split(": ", 1)[1] for problem in broken(page, tmp_path)]
    assert found == ["c.md (no such file)", "b.md#the-span-ban (no heading with that anchor)"]


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("Workers, and CTranslate2's replicas", "workers-and-ctranslate2s-replicas"),
        (
            "Protected spans and HTML (`--protect`, `--input-format html`)",
            "protected-spans-and-html-protect-input-format-html",
        ),
        (
            "Parity with HF: `scripts/bench/import_parity.py`",
            "parity-with-hf-scriptsbenchimport_paritypy",
        ),
        ("Über **uns**", "uber-uns"),
    ],
)
def test_slugs_match_the_toc_extension(heading, expected):
    assert slug(heading) == expected


def test_pages_the_code_names_exist():
    """A docstring or comment that sends the reader to a page (`docs/studies/decoding.md`)
    names one that exists: pages move when the manual is reorganised."""
    named = re.compile(r"\bdocs/[\w/.-]*\w\.md\b")
    missing = []
    for folder in ("mt", "scripts", "tests"):
        for source in sorted((REPO / folder).rglob("*.py")):
            text = source.read_text(encoding="utf-8")
            for number, line in enumerate(text.splitlines(), 1):
                for page in named.findall(line):
                    if not (REPO / page).exists() and (REPO / page).resolve() not in generated():
                        missing.append(f"{source.relative_to(REPO)}:{number}: {page}")
    assert not missing, "\n".join(missing)

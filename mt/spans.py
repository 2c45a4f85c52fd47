"""Where a source line holds text that must come out of translation exactly as written.

Software strings carry placeholders (`%s`, `{0}`, `$HOME`), entities (`&amp;`), inline tags,
URLs and e-mail addresses. A program that prints a translated string with a broken `%s` crashes,
so these spans are found here, masked before search and restored after it (`mt.decode.protect`).

The patterns are tried in the order of `PATTERNS` at each position, leftmost match first, so a
URL that holds `&amp;` or a tag whose attribute holds a URL is one span. Each pattern is written
to refuse the look-alikes of prose (the tests hold the list):

- printf: `%s`, `%3d`, `%-5.2f`, `%1$s`, `%lld`, `%%`, `%@` (Objective-C); not after a digit or
  letter-free prose: "50 % der" (a space flag is not accepted), "100%" and "100%." (no
  conversion letter), "50%off" (a conversion letter followed by a letter is a word).
- python/ruby named: `%(name)s`, `%<name>s`, `%{name}`; templates `<%= x %>` (ERB, ASP).
- brace: `{0}`, `{name}`, `{user.name}`, `{0:>8}`, `{{name}}`; not `{`, `{ }` or "a { b".
- shell/template: `$VAR`, `${VAR}`; not `$5` or `US$` (a name starts with a letter or `_`).
- entities: `&amp;`, `&#169;`, `&#xA9;`; not "Tom & Jerry" or "&c" (the `;` is required).
- inline tags: `<b>`, `</b>`, `<br/>`, `<a href="...">`; not "a < b" or "x<3" (a tag name
  follows `<` or `</` directly).
- URLs (`http(s)://`, `ftp://`, `www.`) without their trailing sentence punctuation, and
  e-mail addresses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CONV = r"[diouxXeEfFgGaAcspn@]"
PATTERNS: list[tuple[str, str]] = [
    ("template", r"<%.*?%>"),
    ("tag", r"</?[A-Za-z][\w:.-]*(?:\s+[^<>]*?)?\s*/?>"),
    ("url", r"(?:\b(?:https?|ftp)://|\bwww\.)[^\s<>\"']*[^\s<>\"'.,;:!?)\]}]"),
    ("email", r"\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\b"),
    ("entity", r"&(?:[A-Za-z][A-Za-z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});"),
    ("printf", r"%%|%\((?:\w+)\)[-+0#]*\d*(?:\.\d+)?[a-zA-Z]|%<\w+>[-+0#]*\d*(?:\.\d+)?[a-zA-Z]?"),
    ("printf", r"%\{\w+\}"),
    (
        "printf",
        r"(?<![\d%])%(?:\d+\$)?[-+0#']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t)?"
        + _CONV
        + r"(?![A-Za-z])",
    ),
    ("brace", r"\{\{\s*[A-Za-z_][\w.]*\s*\}\}"),
    ("brace", r"\{(?:\d+|[A-Za-z_][\w.]*)(?:[:!][^{}\s]*)?\}"),
    ("shell", r"\$\{[A-Za-z_]\w*\}|\$[A-Za-z_]\w*"),
]
_ALL = re.compile("|".join(f"(?P<k{i}>{p})" for i, (_, p) in enumerate(PATTERNS)), re.DOTALL)


@dataclass(frozen=True)
class Span:
    """`text[start:end]` of the line, of one kind of `PATTERNS` (or `markup` for HTML atoms)."""

    start: int
    end: int
    kind: str
    text: str


def find_spans(text: str) -> list[Span]:
    """Protected spans of `text`, left to right, never overlapping."""
    out = []
    for m in _ALL.finditer(text):
        kind = PATTERNS[int(m.lastgroup[1:])][0]  # type: ignore[index]
        out.append(Span(m.start(), m.end(), kind, m.group()))
    return out


RESERVED = 64  # placeholder pieces a `data.protect` tokenizer reserves


def placeholder(k: int) -> str:
    """The reserved piece of the k-th span of a line (`data.protect`)."""
    return f"｟{k}｠"


def reserved_symbols() -> list[str]:
    """The tokenizer pieces `data.protect` reserves: one per placeholder index."""
    return [placeholder(k) for k in range(RESERVED)]


def mask_pair(src: str, tgt: str) -> tuple[str, str]:
    """A training pair with the spans of `src` as reserved pieces on both sides (`data.protect`).

    The k-th span of the source becomes `｟k｠` (as a word of its own); in the target, a span
    written as a source span is becomes that span's piece (each source span once, left to
    right), so the model learns to copy each piece to where its span belongs. Target spans
    without a source twin stay text; past `RESERVED` spans, the rest stay text too.
    """
    spans = find_spans(src)[:RESERVED]
    if not spans:
        return src, tgt
    free: dict[str, list[int]] = {}
    out, pos = [], 0
    for k, s in enumerate(spans):
        out += [src[pos : s.start], f" {placeholder(k)} "]
        free.setdefault(s.text, []).append(k)
        pos = s.end
    out.append(src[pos:])
    tout, pos = [], 0
    for s in find_spans(tgt):
        if free.get(s.text):
            tout += [tgt[pos : s.start], f" {placeholder(free[s.text].pop(0))} "]
            pos = s.end
    tout.append(tgt[pos:])
    return " ".join("".join(out).split()), " ".join("".join(tout).split())

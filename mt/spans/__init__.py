"""Where a source line holds text that must come out of translation exactly as written.

Software strings carry placeholders (`%s`, `{0}`, `$HOME`), entities (`&amp;`), inline tags,
URLs and e-mail addresses. A program that prints a translated string with a broken `%s` crashes,
so these spans are found here, masked before search and restored after it
(`mt.translation.protect`).

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
- Qt and KDE: `%1`, `%L2` (not after a digit: "5%1" is no placeholder); ICU arguments
  `{count, plural, one {# file} other {# files}}`, `{d, date, short}` (kept whole, nested
  braces and all: a broken ICU message breaks the program).
- GCC's diagnostics (flag `gcc-internal-format`): quotes `%<` and `%>`, the `q`, `w`, `l`
  modifiers (`%qE`, `%wu`, `%3$wu`) and its own conversion letters (`%qD`, `%qT`, `%m`).
- Meta-variables are text, not tags: a lone `<Pfad>` or `<Spieler>` (no attributes, a name
  that is no HTML or Pango element, no `</Pfad>` in the line) is what a translator
  translates (`<path>`).

Which syntaxes a line may hold depends on its program. gettext's format flags say so where
they are known (`find_spans(text, ["c-format"])`, `FLAGS`): a `c-format` string holds no
`{0}`, a `python-brace-format` string holds `{}`. Without flags, the default families apply;
markup, URLs, addresses and entities are found whatever the flags.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

_CONV = r"[diouxXeEfFgGaAcspn@]"
_PRINTF = (
    r"(?<![\d%])%(?:\d+\$)?[-+0#']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t|w)?"
    + _CONV
    + r"(?![A-Za-z])"
)
# (family, kind, pattern); tried in this order at each position, leftmost match first.
PATTERNS: list[tuple[str, str, str]] = [
    ("template", "template", r"<%[^\n]*?%>"),
    ("markup", "tag", r"</?[A-Za-z][\w:.-]*(?:\s+[^<>]*?)?\s*/?>"),
    ("markup", "url", r"(?:\b(?:https?|ftp)://|\bwww\.)[^\s<>\"']*[^\s<>\"'.,;:!?)\]}]"),
    ("markup", "email", r"\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\b"),
    ("markup", "entity", r"&(?:[A-Za-z][A-Za-z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});"),
    (
        "gcc",
        "printf",
        r"(?<!%)%[<>]|(?<![\d%])%(?:\d+\$)?[-+0#]*\d*(?:\.\d+)?[qwlhzt+]*[A-Za-z](?![A-Za-z])",
    ),
    ("printf", "printf", r"%%"),
    ("python", "printf", r"%\(\w+\)[-+0#]*\d*(?:\.\d+)?[a-zA-Z]"),
    ("ruby", "printf", r"%<\w+>[-+0#]*\d*(?:\.\d+)?[a-zA-Z]?|%\{\w+\}"),
    ("printf", "printf", _PRINTF),
    ("qt", "qt", r"(?<![\d%])%L?[1-9]\d?(?![\d$])"),
    ("brace", "brace", r"\{\{\s*[A-Za-z_][\w.]*\s*\}\}"),
    ("brace", "brace", r"\{(?:\d+|[A-Za-z_][\w.]*)(?:\[\w+\])?(?:![rsa])?(?::[^{}\s]*)?\}"),
    ("brace-auto", "brace", r"\{(?:![rsa])?(?::[^{}\s]*)?\}"),
    ("shell", "shell", r"\$\{[A-Za-z_]\w*\}|\$[A-Za-z_]\w*"),
]
DEFAULT = frozenset(
    {"template", "markup", "python", "ruby", "printf", "qt", "icu", "brace", "shell"}
)
WIDEST = frozenset({f for f, _, _ in PATTERNS} | {"icu"})  # every syntax: what search may not write
FLAGS: dict[str, frozenset[str]] = {  # gettext format flag -> the families its strings hold
    "c-format": frozenset({"printf"}),
    "objc-format": frozenset({"printf"}),
    "awk-format": frozenset({"printf"}),
    "javascript-format": frozenset({"printf"}),
    "lua-format": frozenset({"printf"}),
    "java-printf-format": frozenset({"printf"}),
    "gcc-internal-format": frozenset({"printf", "gcc"}),
    "gfc-internal-format": frozenset({"printf", "gcc"}),
    "python-format": frozenset({"printf", "python"}),
    "python-brace-format": frozenset({"brace", "brace-auto"}),
    "c++-format": frozenset({"brace", "brace-auto"}),
    "csharp-format": frozenset({"brace"}),
    "java-format": frozenset({"brace", "icu"}),
    "perl-brace-format": frozenset({"brace"}),
    "ruby-format": frozenset({"printf", "ruby"}),
    "php-format": frozenset({"printf"}),
    "sh-format": frozenset({"shell"}),
    "qt-format": frozenset({"qt"}),
    "qt-plural-format": frozenset({"qt"}),
    "kde-format": frozenset({"qt"}),
    "icu-format": frozenset({"icu"}),
}
_ICU = re.compile(
    r"\{\s*[A-Za-z_]\w*\s*,\s*(?:plural|select|selectordinal|number|date|time|spellout|ordinal|"
    r"duration)\s*[,}]"
)
# Elements a lone opening tag may name and still be markup (HTML and Pango); any other lone
# `<Name>` is a meta-variable (`<Pfad>`), which translators translate.
ELEMENTS = frozenset(
    """a abbr address area article aside audio b base bdi bdo big blink blockquote body br
    button canvas caption center cite code col colgroup data dd del details dfn dialog div dl
    dt em embed fieldset figure font footer form h1 h2 h3 h4 h5 h6 head header hr html i
    iframe img input ins kbd label legend li link main mark markup menu meta meter nav
    noscript object ol optgroup option output p param pre progress q rp rt ruby s samp
    script section select small source span strike strong style sub summary sup table tbody
    td template textarea tfoot th thead time title tr track tt u ul var video wbr""".split()
)


CLOSING_TAG = re.compile(r"</([A-Za-z][\w:.-]*)\s*>")


# Where any span can start: every pattern begins with one of these characters (after a
# lookbehind) or at a word boundary (URLs, addresses), so a position that is neither starts
# none. Said once up front, it spares `re` trying every pattern at each letter inside a word
# (docs/studies/span-ban.md; tests/unit/test_span_starts.py checks each pattern's first
# character against it).
STARTS = "<%&{$"
_GUARD = rf"(?=[{re.escape(STARTS)}]|\b)"


@lru_cache(maxsize=64)
def _compiled(families: frozenset[str]) -> re.Pattern[str]:
    keep = [(i, p) for i, (f, _, p) in enumerate(PATTERNS) if f in families or f == "markup"]
    union = "|".join(f"(?P<k{i}>{p})" for i, p in keep)
    return re.compile(f"{_GUARD}(?:{union})", re.DOTALL)


def families(flags: Iterable[str] | None) -> frozenset[str]:
    """The syntaxes a string with these gettext `flags` holds: those of its known format
    flags, or `DEFAULT` when none is known (a `no-c-format` says nothing of the others)."""
    known = [FLAGS[f] for f in flags or () if f in FLAGS]
    return frozenset().union(*known) if known else DEFAULT


@dataclass(frozen=True)
class Span:
    """`text[start:end]` of the line, of one kind of `PATTERNS` (or `markup` for HTML atoms)."""

    start: int
    end: int
    kind: str
    text: str


def find_spans(text: str, flags: Iterable[str] | frozenset[str] | None = None) -> list[Span]:
    """Protected spans of `text`, left to right, never overlapping. `flags` are gettext's
    format flags of the string (`c-format` ...), or a set of families (`WIDEST`)."""
    fams = flags if isinstance(flags, frozenset) else families(flags)
    out: list[Span] = []
    icu = _icu_spans(text) if "icu" in fams else []
    closed = set(CLOSING_TAG.findall(text)) if "</" in text else set()
    pos = 0
    for s in icu + [Span(len(text), len(text), "", "")]:
        for m in _compiled(fams).finditer(text, pos, s.start):
            kind = PATTERNS[int(m.lastgroup[1:])][1]  # type: ignore[index]
            if kind != "tag" or _is_markup(m.group(), closed):
                out.append(Span(m.start(), m.end(), kind, m.group()))
        if s.text:
            out.append(s)
        pos = s.end
    return out


# Ends every span: a line break, and a `<` no tag can hold. Lines joined by it are scanned as
# one text (`find_spans_each`), and the span ban puts it after a line's closing tags.
LINE_BREAK = "\n<\n"


def find_spans_each(texts: list[str], flags: frozenset[str] = WIDEST) -> list[list[Span]]:
    """`find_spans(text, flags)` of each of `texts`, the same spans, from one scan of the
    patterns over the texts joined by `LINE_BREAK`: the span ban checks thousands of short
    lines at a time, where a call per line would cost more than the scan. No pattern crosses
    `LINE_BREAK`, and its line break reads as the start or end of a text to every lookaround;
    what depends on a whole line is read per line: the closing tags that make a lone `<Name>`
    markup, and ICU arguments (their braces are counted to the end of a line, so a line that
    may hold one is scanned alone)."""
    out: list[list[Span]] = [[] for _ in texts]
    batch = []
    for k, text in enumerate(texts):
        if "icu" in flags and "{" in text and _ICU.search(text):
            out[k] = find_spans(text, flags)
        else:
            batch.append(k)
    starts, pos = [], 0
    for k in batch:
        starts.append(pos)
        pos += len(texts[k]) + len(LINE_BREAK)
    closed: dict[int, set[str]] = {}
    for m in _compiled(flags).finditer(LINE_BREAK.join(texts[k] for k in batch)):
        j = bisect.bisect_right(starts, m.start()) - 1
        k, at = batch[j], starts[j]
        kind = PATTERNS[int(m.lastgroup[1:])][1]  # type: ignore[index]
        if kind == "tag":
            if k not in closed:
                closed[k] = set(CLOSING_TAG.findall(texts[k])) if "</" in texts[k] else set()
            if not _is_markup(m.group(), closed[k]):
                continue
        out[k].append(Span(m.start() - at, m.end() - at, kind, m.group()))
    return out


@lru_cache(maxsize=4096)
def gluable(span: str) -> tuple[bool, bool]:
    """Whether `span` stays one span with a letter or digit touching it on its left, and on
    its right: a translation may put a word where the source had another, and `ahttps://x`
    or `5%s` is no span. A text that is no span by itself (a number the guard of
    mt.translation.number_guard put back) stays whole where its edge is no letter or digit: `42`
    beside `a` or `17` reads as another word or number."""
    if [s.text for s in find_spans(span, WIDEST)] != [span]:
        return not span[:1].isalnum(), not span[-1:].isalnum()

    def whole(before: str, after: str) -> bool:
        found = find_spans(before + span + after, WIDEST)
        return any(s.start == len(before) and s.text == span for s in found)

    return all(whole(c, "") for c in "a5"), all(whole("", c) for c in "a5")


def splits(a: str, b: str) -> bool:
    """Whether spans `a` and `b` written side by side are no longer found as they were
    (`%wu` before `www.x` reads `%wuwww.x`)."""
    want = [s.text for s in find_spans(a, WIDEST) + find_spans(b, WIDEST)]
    return [s.text for s in find_spans(a + b, WIDEST)] != want


def _icu_spans(text: str) -> list[Span]:
    """ICU arguments (`{n, plural, one {...} other {...}}`), each to its balanced brace."""
    out, pos = [], 0
    while (m := _ICU.search(text, pos)) is not None:
        depth, end = 0, None
        for i in range(m.start(), len(text)):
            if text[i] == "\n":
                break  # one line at most: mt.spans.bans scans many lines at once
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                end = i + 1
                break
        if end is None:
            break  # unbalanced: no argument, and none after it
        out.append(Span(m.start(), end, "icu", text[m.start() : end]))
        pos = end
    return out


def _is_markup(tag: str, closed: set[str]) -> bool:
    """Whether a tag span is markup rather than a meta-variable (`<Pfad>`): a closing or
    self-closing tag, one with attributes, an element's name, or one the line closes
    (`closed`: the names of its closing tags)."""
    m = re.match(r"<(/?)([A-Za-z][\w:.-]*)(\s*)", tag)
    assert m is not None
    return bool(m[1] or tag.endswith("/>") or m[3] or m[2].lower() in ELEMENTS or m[2] in closed)


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

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

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from re import _constants as _c
from re import _parser as _p

import regex

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


@lru_cache(maxsize=64)
def _compiled(families: frozenset[str]) -> re.Pattern[str]:
    keep = [(i, p) for i, (f, _, p) in enumerate(PATTERNS) if f in families or f == "markup"]
    return re.compile("|".join(f"(?P<k{i}>{p})" for i, p in keep), re.DOTALL)


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


# -- spans under way: what text appended to a line could still complete ----------------------
# The same patterns, for the `regex` module, whose partial matching says whether a string
# could still grow into a match. ICU arguments are written as one recursive pattern here (the
# balanced braces `_icu_spans` counts); e-mail addresses are apart (`open_starts`).
_KEYWORDS = r"plural|select|selectordinal|number|date|time|spellout|ordinal|duration"
_ICU_WHOLE = (
    rf"\{{\s*[A-Za-z_]\w*\s*,\s*(?:{_KEYWORDS})\s*(?:\}}|,(?:[^{{}}\n]|(?&icub))*\}})"
    r"(?(DEFINE)(?<icub>\{(?:[^{}\n]|(?&icub))*\}))"
)
_EMAIL = next(p for _, kind, p in PATTERNS if kind == "email")
_GROWING = regex.compile(
    "|".join(f"(?:{p})" for _, kind, p in PATTERNS if kind != "email") + f"|(?:{_ICU_WHOLE})"
)
_GROWING_EMAIL = regex.compile(_EMAIL)
WINDOW_CHARS = 300  # a span still open after this many characters is taken for text


def growth(text: str, i: int, done: int) -> tuple[bool, bool, bool]:
    """For a span that starts at `text[i]` (the characters before it read by lookbehinds):
    (alive, at_end, final). `alive`: a pattern matches `text[i:]` up to its end, partly or
    wholly, so appending text could still complete a span there (a whole span at the end
    may grow: `$HO` -> `$HOME`, or be undone: `%s` -> `%so`). `at_end`: a whole span from `i`
    ends at the end, after `done` (what follows `done` completed it). `final`: a whole span
    from `i` ends after `done` and before the end, where nothing appended changes it. An
    e-mail address counts only once its `@` is there: its local part is any word (see
    `open_starts`)."""
    alive = at_end = final = False
    for pattern in (_GROWING, _GROWING_EMAIL):
        if pattern is _GROWING_EMAIL and "@" not in text[i:]:
            continue
        m = pattern.match(text, i, partial=True)
        if m is None:
            continue
        alive |= m.end() == len(text)
        if not m.partial and m.end() > done:
            at_end |= m.end() == len(text)
            final |= m.end() < len(text)
    return alive, at_end, final


def ends_in_mark(text: str, starts: list[int]) -> bool:
    """Whether every span under way at `starts` of `text` can only be completed by a mark
    (`>`, `;`, `}`: a tag, template, entity, brace or ICU argument), never by a letter, digit
    or space, so a piece of words and spaces completes none of them (`mt.decode.bans`)."""
    for i in starts:
        for pattern, marked in _EACH:
            m = pattern.match(text, i, partial=True)
            if m is not None and m.end() == len(text) and not marked:
                return False
    return True


def class_map(chars: Iterable[str]) -> dict[int, str]:
    """A `str.translate` table that writes each of `chars` as the representative of its
    class: characters that every test of the patterns (each literal, class and `\b`'s word
    test) treats alike are one class, so the patterns match the mapped text where they
    match the text, and texts that differ only within classes share one reading
    (`mt.decode.bans` walks the vocabulary once for all of them)."""
    tests = _char_tests()
    reps: dict[tuple[bool, ...], str] = {}
    out = {}
    ascii_ = [chr(i) for i in range(32, 127)] + [chr(i) for i in range(32)] + [chr(127)]
    for c in ascii_ + sorted(set(chars) - set(ascii_)):
        sig = tuple(bool(t.fullmatch(c)) for t in tests)
        out[ord(c)] = reps.setdefault(sig, c)
    return out


@lru_cache(maxsize=1)
def _char_tests() -> list[re.Pattern[str]]:
    """Every character test the patterns make: their literals, classes and `.`, and the
    word test of `\b`."""
    atoms: set[tuple[object, str]] = set()

    def collect(items) -> None:
        for op, av in items:
            if op in (_c.LITERAL, _c.NOT_LITERAL, _c.IN, _c.ANY):
                atoms.add((op, "." if op == _c.ANY else _class_text(op, av)))
            elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
                collect(av[2])
            elif op == _c.SUBPATTERN:
                collect(av[3])
            elif op == _c.BRANCH:
                for b in av[1]:
                    collect(b)
            elif op in (_c.ASSERT, _c.ASSERT_NOT):
                collect(av[1])

    # The ICU argument's recursive body tests `[^{}\n]`, `{` and `}` (written flat for `re`).
    for pattern in [p for _, _, p in PATTERNS] + [_ICU.pattern + r"[^{}\n]\{\}"]:
        collect(_p.parse(pattern))
    tests = [re.compile("(?s)." if op == _c.ANY else f"[{text}]") for op, text in sorted(
        atoms, key=lambda a: (str(a[0]), a[1]))]  # fmt: skip
    return tests + [re.compile(r"\w"), re.compile(r"\s")]


def _last_chars(items) -> tuple[set[int], bool]:
    """(the ASCII codes, and whether any other character) a match of the parsed expression
    `items` (`re._parser`) can end with: the last set of its Glushkov automaton."""
    codes: set[int] = set()
    other = False
    for op, av in reversed(list(items)):
        if op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT):
            continue  # zero width: the character before it ends the match
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
            sub = _last_chars(av[2])
            nullable = av[0] == 0 or _nullable(av[2])
        elif op == _c.SUBPATTERN:
            sub, nullable = _last_chars(av[3]), _nullable(av[3])
        elif op == _c.BRANCH:
            parts = [_last_chars(b) for b in av[1]]
            sub = (set().union(*(x for x, _ in parts)), any(o for _, o in parts))
            nullable = any(_nullable(b) for b in av[1])
        else:
            sub, nullable = _chars(op, av), False
        codes |= sub[0]
        other |= sub[1]
        if not nullable:
            break
    return codes, other


def _nullable(items) -> bool:
    """Whether the parsed expression `items` can match the empty string."""
    for op, av in items:
        if op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT):
            continue
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
            if av[0] > 0 and not _nullable(av[2]):
                return False
        elif op == _c.SUBPATTERN:
            if not _nullable(av[3]):
                return False
        elif op == _c.BRANCH:
            if not any(_nullable(b) for b in av[1]):
                return False
        else:
            return False
    return True


def _chars(op, av) -> tuple[set[int], bool]:
    """The characters one atom of a parsed expression matches: ASCII codes, and whether any
    other character."""
    test = re.compile("(?s)." if op == _c.ANY else f"[{_class_text(op, av)}]")
    codes = {c for c in range(128) if test.fullmatch(chr(c))}
    return codes, any(test.fullmatch(c) for c in "éß€\u3042")


def _class_text(op, av) -> str:
    """A parsed atom (LITERAL, NOT_LITERAL or IN) written back as a character class body."""
    if op == _c.LITERAL:
        return re.escape(chr(av))
    if op == _c.NOT_LITERAL:
        return "^" + re.escape(chr(av))
    categories = {_c.CATEGORY_WORD: r"\w", _c.CATEGORY_NOT_WORD: r"\W", _c.CATEGORY_DIGIT: r"\d",
                  _c.CATEGORY_NOT_DIGIT: r"\D", _c.CATEGORY_SPACE: r"\s",
                  _c.CATEGORY_NOT_SPACE: r"\S"}  # fmt: skip
    out = []
    for kind, x in av:
        if kind == _c.NEGATE:
            out.insert(0, "^")
        elif kind == _c.LITERAL:
            out.append(re.escape(chr(x)))
        elif kind == _c.RANGE:
            out.append(f"{re.escape(chr(x[0]))}-{re.escape(chr(x[1]))}")
        elif kind == _c.CATEGORY:
            out.append(categories[x])
    return "".join(out)


def _marks_only(pattern: str) -> bool:
    """Whether every match of `pattern` ends with a mark: no letter, digit, `_` or space."""
    codes, other = _last_chars(_p.parse(pattern))
    return not other and not any(chr(c).isalnum() or chr(c) in "_" or chr(c).isspace()
                                 for c in codes)  # fmt: skip


# Each pattern for partial matching, with whether its matches end with a mark; an ICU
# argument ends with its balancing `}`.
_EACH = [(regex.compile(p), _marks_only(p)) for _, _, p in PATTERNS] + [
    (regex.compile(_ICU_WHOLE), True)
]


@lru_cache(maxsize=1)
def _starters() -> tuple[str, str]:
    """(characters a span of any syntax can start with, those of them that start only
    addresses: URLs and e-mail, which hold no white space), read off the patterns over the
    printable ASCII characters (spans are made of ASCII)."""
    chars = [chr(c) for c in range(33, 127)]
    any_ = [c for c in chars if any(
        regex.match(p, c, partial=True) for p in (_GROWING.pattern, _EMAIL)
    )]  # fmt: skip
    others = [p for _, kind, p in PATTERNS if kind not in ("url", "email")] + [_ICU_WHOLE]
    address = [c for c in any_ if not any(regex.match(p, c, partial=True) for p in others)]
    return "".join(any_), "".join(address)


def open_starts(text: str, lo: int = 0) -> list[int]:
    """Positions `i >= lo` of `text` (and within its last `WINDOW_CHARS`) at which a span of
    any syntax (`WIDEST`) is under way: text appended to the line could still complete, or
    extend, a span that starts at `i`. Read from the patterns themselves (`growth`), so a tag
    with braces in its attributes (`<p a {0`) or an ICU argument is open as long as its
    pattern says it is.

    Addresses hold no white space, so their starts are looked for in the line's last word
    only. An e-mail address is open only once its `@` is written: before that its local part
    is any word (`ka`), and what would complete it is a piece holding `@` and a domain,
    which `mt.decode.bans` bans whatever word precedes it."""
    starters, address = _starters()
    lo = max(lo, len(text) - WINDOW_CHARS)
    last_word = len(text)
    while last_word > lo and not text[last_word - 1].isspace():
        last_word -= 1
    found = [m.start() for m in _starts_re(starters, address).finditer(text, lo)]
    found += [  # addresses start at a word boundary (`\b`)
        m.start() for m in _WORD_START.finditer(text, last_word) if m.group() in address
    ]
    return [i for i in sorted(found) if growth(text, i, len(text))[0]]


_WORD_START = re.compile(r"(?<!\w)\w")


@lru_cache(maxsize=1)
def _starts_re(starters: str, address: str) -> re.Pattern[str]:
    """The characters that start spans other than addresses, as one character class."""
    return re.compile("[" + re.escape("".join(c for c in starters if c not in address)) + "]")


@lru_cache(maxsize=4096)
def gluable(span: str) -> tuple[bool, bool]:
    """Whether `span` stays one span with a letter or digit touching it on its left, and on
    its right: a translation may put a word where the source had another, and `ahttps://x`
    or `5%s` is no span. A text that is no span by itself has nothing to lose."""
    if [s.text for s in find_spans(span, WIDEST)] != [span]:
        return True, True

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
                break  # one line at most: mt.decode.bans scans many lines at once
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

"""Inline codes of a segment as tags in its text, and back into elements.

A segment of TMX or XLIFF is text with inline elements: a code the translator must keep
(`<ph>`, `<x/>`, `<it>`, `<bpt>`/`<ept>`, `<bx/>`/`<ex/>`, `<sc/>`/`<ec/>`, `<cp/>`) or text
inside a pair of them (`<g>`, `<pc>`, `<hi>`, `<mrk>`). The model reads plain text, so each
code becomes a tag of the segment's text, numbered in the source's order:

    Click <g id="b1">Save</g> now<x id="2"/>      ->   Click <g1>Save</g1> now<x2/>

Tags are what mt.spans protects: `mt translate` masks them (a `data.protect` model copies
its placeholders) or puts them back by alignment, nested as they were, and `data.protect`
turns a training pair's tags into the same placeholders on both sides. So a code is matched
between source and target (its id, TMX's `x` or `i`, else its content and rank) and has one
number on both sides.

Back into a target (`build`): each tag becomes the source's element again (copied, attributes
and native code inside), text between them is text; whatever the translation did to the tags,
the result is valid: a tag written twice is kept once, one missing is added (a lone code at
the end, as restoring spans does; a pair around nothing), a pair closed before it opened is
turned round, and pairs that must nest (`<g>`, `<pc>`, `<mrk>`) are made to.
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from mt.cat import NAMES
from mt.cat.xmlio import entity_error, is_entity, localname
from mt.errors import MtError

OPEN, CLOSE, SINGLE, WRAP = "open", "close", "single", "wrap"
ROLES: dict[str, dict[str, str]] = {
    "tmx": {"bpt": OPEN, "ept": CLOSE, "ph": SINGLE, "it": SINGLE, "ut": SINGLE, "hi": WRAP},
    "xliff1": {"g": WRAP, "x": SINGLE, "bx": OPEN, "ex": CLOSE, "ph": SINGLE, "bpt": OPEN}
    | {"ept": CLOSE, "it": SINGLE, "mrk": WRAP},
    "xliff2": {"pc": WRAP, "ph": SINGLE, "sc": OPEN, "ec": CLOSE, "mrk": WRAP, "sm": OPEN}
    | {"em": CLOSE, "cp": SINGLE},
}
_SPACE = re.compile(r"[ \t\r\n]+")  # XML's white space; a no-break space is text


@dataclass(eq=False)
class Code:
    """One inline code of a segment: a lone element (`single`), a pair of elements (`pair`:
    bpt/ept, bx/ex, sc/ec, sm/em) or an element around text (`wrap`: g, pc, hi, mrk)."""

    role: str  # single | pair | wrap
    key: tuple  # what matches it with its twin on the other side
    start: Any  # the element (a pair's opening one)
    end: Any = None  # a pair's closing element
    n: int = 0  # its number in the tags


Piece = str | tuple[str, Code]  # text, or (open | close | single, code)


@dataclass
class Flat:
    """A segment as text pieces and codes, before its tags are spelled."""

    pieces: list[Piece]
    codes: list[Code] = field(default_factory=list)

    def literal(self) -> str:
        """The segment's own text, codes left out."""
        return "".join(p for p in self.pieces if isinstance(p, str))

    def text(self, names: tuple[str, str] = NAMES[0]) -> str:
        """The segment as one line: codes as tags, XML white space as single spaces."""
        out = []
        for p in self.pieces:
            if isinstance(p, str):
                out.append(p)
            else:
                out.append(tag(p[0], p[1].n, names))
        return _SPACE.sub(" ", "".join(out)).strip(" \t\r\n")


def tag(kind: str, n: int, names: tuple[str, str]) -> str:
    if kind == SINGLE:
        return f"<{names[1]}{n}/>"
    return f"<{'/' if kind == CLOSE else ''}{names[0]}{n}>"


def choose_names(*literals: str) -> tuple[str, str]:
    """The first tag names that no segment's own text holds as a tag."""
    for names in NAMES:
        shaped = re.compile(rf"</?(?:{names[0]}|{names[1]})\d+/?>")
        if not any(shaped.search(x) for x in literals):
            return names
    return NAMES[-1]


def flatten(el: Any, dialect: str, where: str) -> Flat:
    """The segment element `el` (a `<seg>`, `<source>`, `<target>`, `<mrk mtype="seg">`) as
    pieces and codes, unnumbered; `where` names the file for an entity's error."""
    items = _walk(el, ROLES[dialect], where)
    opened: dict[str, list[int]] = {}
    partner: dict[int, int] = {}
    for i, it in enumerate(items):
        if isinstance(it, str) or it[0] not in (OPEN, CLOSE):
            continue
        pid = _pair_id(it[1], it[0], dialect)
        if it[0] == OPEN:
            opened.setdefault(pid, []).append(i)
        elif opened.get(pid):
            partner[opened[pid].pop(0)] = i
    closing: dict[int, Code] = {}  # item index of a pair's closing element -> its code
    pieces: list[Piece] = []
    codes: list[Code] = []
    rank: Counter = Counter()
    wraps: list[Code] = []
    for i, it in enumerate(items):
        if isinstance(it, str):
            pieces.append(it)
            continue
        role, node = it
        if i in closing:
            pieces.append((CLOSE, closing[i]))
        elif i in partner:
            end = items[partner[i]][1]
            code = Code("pair", ("p", _link(node, OPEN, dialect)), node, end)
            closing[partner[i]] = code
            codes.append(code)
            pieces.append((OPEN, code))
        elif role == "wopen":
            key = _link(node, WRAP, dialect)
            if key is None:
                rank[("w", localname(node))] += 1
                key = (localname(node), rank[("w", localname(node))])
            code = Code("wrap", ("w", key), node)
            codes.append(code)
            wraps.append(code)
            pieces.append((OPEN, code))
        elif role == "wclose":
            pieces.append((CLOSE, wraps.pop()))
        else:  # a lone code, or half a pair whose other half is not in this segment
            key = _link(node, role, dialect)
            if key is None:
                native = "".join(node.itertext())
                rank[(localname(node), native)] += 1
                key = (localname(node), native, rank[(localname(node), native)])
            code = Code("single", ("s", key), node)
            codes.append(code)
            pieces.append((SINGLE, code))
    return Flat(pieces, codes)


def _walk(el: Any, roles: dict[str, str], where: str) -> list:
    """Text and (role, element) items in document order; a wrap's content between
    ("wopen", el) and ("wclose", el)."""
    items: list = []
    if el.text:
        items.append(el.text)
    for child in el:
        if is_entity(child):
            raise entity_error(where, child)
        name = localname(child)
        if name:
            role = roles.get(name, SINGLE)  # an element no format names: kept whole
            if role == WRAP and _opaque(child):
                role = SINGLE
            if role == WRAP:
                items += [("wopen", child), *_walk(child, roles, where), ("wclose", child)]
            else:
                items.append((role, child))
        if child.tail:
            items.append(child.tail)
    return items


def _opaque(el: Any) -> bool:
    """A marked span that must not be translated (`translate="no"`, XLIFF 1.2's
    `mtype="protected"`): one code, its text inside it."""
    return el.get("translate") == "no" or el.get("mtype") == "protected"


def _pair_id(el: Any, role: str, dialect: str) -> str:
    """What joins the two halves of a pair within one segment."""
    if dialect == "tmx":
        return el.get("i") or el.get("x") or ""
    if dialect == "xliff1":
        return el.get("rid") or el.get("id") or ""
    if role == CLOSE:
        return el.get("startRef") or ""
    return el.get("id") or ""


def _link(el: Any, role: str, dialect: str) -> str | None:
    """What joins a code with its twin on the other side of a pair of segments (None: its
    content and rank do)."""
    if dialect == "tmx":
        x = el.get("x")
        return x if x is not None else (el.get("i") if role in (OPEN, CLOSE) else None)
    if role in (OPEN, CLOSE):
        return _pair_id(el, role, dialect) or el.get("id")
    return el.get("id")


def number(flat: Flat, like: Flat | None = None) -> Flat:
    """Number the codes of `flat` in order; with `like` (the source of the pair), a code
    with a twin there takes its number and the others the numbers after the source's."""
    twins = {(c.role, c.key): c.n for c in like.codes} if like is not None else {}
    nxt = max((c.n for c in like.codes), default=0) if like is not None else 0
    for c in flat.codes:
        if (c.role, c.key) in twins:
            c.n = twins.pop((c.role, c.key))
        else:
            nxt += 1
            c.n = nxt
    return flat


def pair_texts(src: Flat, tgt: Flat) -> tuple[str, str]:
    """A training pair's two lines, codes numbered alike on both sides."""
    number(src)
    number(tgt, like=src)
    names = choose_names(src.literal(), tgt.literal())
    return src.text(names), tgt.text(names)


# -- back into elements ------------------------------------------------------------------------

Event = tuple[str, Any]  # ("text", str) or (open | close | single, Code)


def events_of(text: str, flat: Flat, names: tuple[str, str]) -> list[Event]:
    """A translation's text as events: the tags of `flat`'s codes, the rest text."""
    by_n = {c.n: c for c in flat.codes}
    found = re.compile(rf"<(/?)({re.escape(names[0])}|{re.escape(names[1])})(\d+)(/?)>")
    out: list[Event] = []
    pos = 0
    for m in found.finditer(text):
        code = by_n.get(int(m[3]))
        lone = m[2] == names[1]
        kind = SINGLE if lone and m[4] and not m[1] else CLOSE if m[1] else OPEN
        fits = code is not None and (
            (kind == SINGLE and code.role == "single")
            or (kind != SINGLE and not lone and not m[4] and code.role != "single")
        )
        if not fits:
            continue
        if m.start() > pos:
            out.append(("text", text[pos : m.start()]))
        out.append((kind, code))
        pos = m.end()
    if pos < len(text):
        out.append(("text", text[pos:]))
    return out


def repair(events: list[Event], codes: list[Code]) -> list[Event]:
    """The events with every code exactly once, each pair opened before it closes, and the
    pairs that must nest (wraps) nested: a valid target whatever the translation did."""
    seen: set[tuple[str, int]] = set()
    out: list[Event] = []
    for kind, x in events:
        if kind != "text":
            if (kind, x.n) in seen:
                continue
            seen.add((kind, x.n))
        out.append((kind, x))
    for c in codes:
        if c.role == "single":
            if (SINGLE, c.n) not in seen:
                out.append((SINGLE, c))
            continue
        has_open, has_close = (OPEN, c.n) in seen, (CLOSE, c.n) in seen
        if not has_open and not has_close:
            out += [(OPEN, c), (CLOSE, c)]
        elif not has_open:
            out.insert(0, (OPEN, c))
        elif not has_close:
            out.append((CLOSE, c))
    at = {(k, x.n): i for i, (k, x) in enumerate(out) if k != "text"}
    for c in codes:
        if c.role != "single" and at[(CLOSE, c.n)] < at[(OPEN, c.n)]:
            i, j = at[(OPEN, c.n)], at[(CLOSE, c.n)]
            out[i], out[j] = (CLOSE, c), (OPEN, c)
    return _nest(out)


def _nest(events: list[Event]) -> list[Event]:
    """Wraps closed inside-out: a wrap closed while one opened after it is still open stays
    open until that one closes (`<g1>a <g2>b</g1> c</g2>` -> `<g1>a <g2>b c</g2></g1>`)."""
    out: list[Event] = []
    stack: list[Code] = []
    pending: set[int] = set()
    for kind, x in events:
        if kind == "text" or x.role != "wrap":
            out.append((kind, x))
        elif kind == OPEN:
            stack.append(x)
            out.append((kind, x))
        elif stack and stack[-1] is x:
            out.append((CLOSE, stack.pop()))
            while stack and stack[-1].n in pending:
                pending.discard(stack[-1].n)
                out.append((CLOSE, stack.pop()))
        else:
            pending.add(x.n)
    while stack:
        out.append((CLOSE, stack.pop()))
    return out


def build(container: Any, events: list[Event]) -> None:
    """Write `events` as the content of `container` (its old content removed): codes as
    copies of the source's elements, wraps as elements of the source's name and attributes
    around their content."""
    for child in list(container):
        container.remove(child)
    container.text = None
    stack = [container]
    for kind, x in events:
        cur = stack[-1]
        if kind == "text":
            _append_text(cur, x)
        elif x.role == "single" or x.role == "pair":
            el = x.start if kind in (OPEN, SINGLE) else x.end
            cur.append(_copy(el))
        elif kind == OPEN:
            el = cur.makeelement(x.start.tag, dict(x.start.attrib))
            cur.append(el)
            stack.append(el)
        else:
            if len(stack) == 1:
                raise MtError("inline codes did not nest (a bug: repair() lets none through)")
            stack.pop()


def _append_text(el: Any, text: str) -> None:
    if len(el):
        el[-1].tail = (el[-1].tail or "") + text
    else:
        el.text = (el.text or "") + text


def _copy(el: Any) -> Any:
    out = copy.deepcopy(el)
    out.tail = None
    return out

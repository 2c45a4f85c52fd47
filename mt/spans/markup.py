"""HTML fragments: translate the text, keep the markup, put inline tags back by alignment.

One fragment per line. `html.parser` splits it into text, tags, comments and entities; the
check that tags nest (void elements such as `<br>` aside) is ours, so malformed input is one
`FILE:LINE` error rather than a guess. Then:

- atoms (void and self-closing tags, comments, empty elements, and whole `<script>`, `<style>`
  and `translate="no"` elements with their contents), and with protection the spans of the
  text (`&amp;`, `{0}`, URLs), are lifted out and put back beside the words they were next to;
- paired inline tags (`<b>...</b>`, `<a href="...">...</a>`) are put back around the words
  they enclosed (`mt.spans.place`), nested as they were: well-formed in, well-formed out.
  Attributes are never translated because tags never reach the model.

`text_unit` does the same for tags found in plain text lines, when they pair up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

from mt.errors import MtError
from mt.spans import Span, find_spans
from mt.spans.place import Pair, Unit

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param"}
VOID |= {"source", "track", "wbr"}
OPAQUE = {"script", "style"}  # contents are code, never text


@dataclass
class Fragment:
    """A line of HTML as text to translate (atoms in it, as written) and the pairs to restore."""

    line: str
    text: str
    atoms: list[Span]
    pairs: list[Pair]  # top-level pairs, each with its nested ones
    shifts: list[
        tuple[int, int, int]
    ]  # runs of `text` as they stand in `line`: (start, end, shift)


class _Events(HTMLParser):
    """Every piece of a line with its offset, so the raw text of each is the line between."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.events: list[tuple[int, str, str, bool]] = []  # (offset, kind, tag, no-translate)

    def _add(self, kind: str, tag: str = "", no: bool = False) -> None:
        self.events.append((self.getpos()[1], kind, tag, no))

    def handle_starttag(self, tag, attrs):  # noqa: ANN001
        no = any(k == "translate" and (v or "").lower() == "no" for k, v in attrs)
        self._add("atom" if tag in VOID else "open", tag, no or tag in OPAQUE)

    def handle_startendtag(self, tag, attrs):  # noqa: ANN001
        self._add("atom", tag)

    def handle_endtag(self, tag):  # noqa: ANN001
        self._add("close", tag)

    def handle_data(self, data):  # noqa: ANN001
        self._add("text")

    def handle_entityref(self, name):  # noqa: ANN001
        self._add("text")

    def handle_charref(self, name):  # noqa: ANN001
        self._add("text")

    def handle_comment(self, data):  # noqa: ANN001
        self._add("atom")

    def handle_decl(self, decl):  # noqa: ANN001
        self._add("atom")

    def handle_pi(self, data):  # noqa: ANN001
        self._add("atom")

    def unknown_decl(self, data):  # noqa: ANN001
        self._add("atom")


def parse_fragment(line: str, where: str) -> Fragment:
    """Split one line of HTML; an unclosed or stray tag raises MtError naming `where`."""
    p = _Events()
    p.feed(line)
    p.close()
    ends = [e[0] for e in p.events[1:]] + [len(line)]
    raws = [line[e[0] : end] for e, end in zip(p.events, ends)]
    if "".join(raws) != line:  # the parser skipped something: refuse rather than lose it
        raise MtError(f"{where}: cannot read this line as an HTML fragment")
    text, atoms = "", []
    shifts: list[tuple[int, int, int]] = []
    pairs: list[Pair] = []
    stack: list[tuple[str, str, int, int]] = []  # (tag, open raw, start, seq)
    opaque: tuple[str, int, int] | None = None  # (tag, depth, offset in line) of a kept element
    for (offset, kind, tag, no), raw in zip(p.events, raws):
        if opaque is not None:
            name, depth, begin = opaque
            if kind == "open" and tag == name:
                opaque = (name, depth + 1, begin)
            elif kind == "close" and tag == name:
                if depth == 0:
                    body = line[begin : offset + len(raw)]
                    atoms.append(Span(len(text), len(text) + len(body), "markup", body))
                    text += body
                    opaque = None
                else:
                    opaque = (name, depth - 1, begin)
            continue
        if kind == "text":
            if shifts and shifts[-1][1] == len(text) and shifts[-1][2] == offset - len(text):
                shifts[-1] = (shifts[-1][0], len(text) + len(raw), shifts[-1][2])
            else:
                shifts.append((len(text), len(text) + len(raw), offset - len(text)))
            text += raw
        elif kind == "atom":
            atoms.append(Span(len(text), len(text) + len(raw), "markup", raw))
            text += raw
        elif kind == "open" and no:
            opaque = (tag, 0, offset)
        elif kind == "open":
            stack.append((tag, raw, len(text), offset))
        else:  # close
            if not stack:
                raise MtError(f"{where}: </{tag}> closes no open tag")
            name, open_raw, start, seq = stack[-1]
            if name != tag:
                raise MtError(f"{where}: </{tag}> found where </{name}> was expected")
            stack.pop()
            if not text[start:].strip():  # an empty element is kept whole, as an atom
                body = open_raw + text[start:] + raw
                atoms.append(Span(start, start + len(body), "markup", body))
                text = text[:start] + body
            else:
                pairs.append(Pair(open_raw, raw, start, len(text), seq))
    if opaque is not None:
        raise MtError(f"{where}: <{opaque[0]}> is not closed")
    if stack:
        raise MtError(f"{where}: <{stack[-1][0]}> is not closed")
    return Fragment(line, text, atoms, _nest(pairs), shifts)


def _nest(pairs: list[Pair]) -> list[Pair]:
    """The tree of pairs (they close inside-out) from their text ranges, outer first."""
    out: list[Pair] = []
    for p in sorted(pairs, key=lambda p: (p.start, -p.end, p.seq)):
        _insert(out, p)
    return out


def _insert(siblings: list[Pair], p: Pair) -> None:
    for s in siblings:
        if s.start <= p.start and p.end <= s.end:
            _insert(s.children, p)
            return
    siblings.append(p)


def text_unit(line: str, spans: list[Span]) -> Unit:
    """A plain-text line as a Unit: tag spans that pair up and nest (`<b>...</b>`) become
    pairs, put back around words; every other span is an atom, and so is an empty element
    (`<b></b>`) with its tags, as in HTML."""
    partner: dict[int, int] = {}
    stack: list[tuple[str, int]] = []
    for k, sp in enumerate(spans):
        m = re.match(r"<(/?)([A-Za-z][\w:.-]*)", sp.text) if sp.kind == "tag" else None
        if m is None or sp.text.endswith("/>") or m[2].lower() in VOID:
            continue
        if not m[1]:
            stack.append((m[2], k))
        elif stack and stack[-1][0] == m[2]:
            partner[stack.pop()[1]] = k
    empty = {
        o: c
        for o, c in partner.items()
        if c == o + 1 and not line[spans[o].end : spans[c].start].strip()
    }
    for o in empty:
        del partner[o]
    paired = set(partner) | set(partner.values())
    text, atoms, pos, at = "", [], 0, {}
    skip = set(empty.values())
    for k, sp in enumerate(spans):
        if k in skip:
            continue
        text += line[pos : sp.start]
        pos = sp.end
        if k in paired:
            at[k] = len(text)
            continue
        raw = line[sp.start : spans[empty[k]].end] if k in empty else sp.text
        atoms.append(
            Span(len(text), len(text) + len(raw), "markup" if k in empty else sp.kind, raw)
        )
        text += raw
        pos = sp.start + len(raw)
    text += line[pos:]
    pairs = [Pair(spans[o].text, spans[c].text, at[o], at[c], o) for o, c in partner.items()]
    return Unit(line, text, atoms, _nest(pairs))


def html_unit(f: Fragment, protect: bool) -> Unit:
    """A fragment as a Unit: its atoms, and with `protect` the spans of its text too, found
    in the line as written (in `text` the tags are gone: `%d<i>Datei` would read `%dDatei`)."""
    found = []
    for s in find_spans(f.line) if protect else []:
        run = next((r for r in f.shifts if r[0] + r[2] <= s.start and s.end <= r[1] + r[2]), None)
        if run is not None:
            found.append(Span(s.start - run[2], s.end - run[2], s.kind, s.text))
    free = [s for s in found if not any(a.start < s.end and s.start < a.end for a in f.atoms)]
    return Unit(f.line, f.text, sorted(f.atoms + free, key=lambda s: s.start), f.pairs)

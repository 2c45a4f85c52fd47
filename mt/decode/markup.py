"""HTML fragments: translate the text, keep the markup, put inline tags back by alignment.

One fragment per line. `html.parser` splits it into text, tags, comments and entities; the
check that tags nest (void elements such as `<br>` aside) is ours, so malformed input is one
`FILE:LINE` error rather than a guess. Then:

- atoms (void and self-closing tags, comments, empty elements, and whole `<script>`, `<style>`
  and `translate="no"` elements with their contents) stay in the text as protected spans
  (`mt.decode.protect`): each comes back exactly as written, where search placed it;
- paired inline tags (`<b>...</b>`, `<a href="...">...</a>`) are taken out of the text, the
  text is translated, and each pair is put back around the target words that the model's
  cross-attention (all layers and heads, teacher-forced on its own output) aligns with the
  source words it enclosed. Children are clipped into their parent's range and siblings kept
  apart, so the output nests as the input did: well-formed in, well-formed out. Attributes are
  never translated because tags never reach the model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

import torch

from mt.batching import pad
from mt.decode.protect import (
    Masked,
    can_constrain,
    mask,
    masked_request,
    placeholders_for,
    restore,
)
from mt.decode.requests import Request
from mt.decode.search import Hypothesis
from mt.decode.spans import Span, find_spans
from mt.errors import MtError
from mt.tokenizer import BOS

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param"}
VOID |= {"source", "track", "wbr"}
OPAQUE = {"script", "style"}  # contents are code, never text
_TAG = re.compile("\ue002(\\d+)\ue003")  # a tag put back, spelled out after the spans


@dataclass
class Pair:
    """An inline element: its tags and the `[start, end)` of its text in `Fragment.text`."""

    open: str
    close: str
    start: int
    end: int
    seq: int  # order of the opening tags: `<b><i>x</i></b>` has the same range twice
    children: list[Pair] = field(default_factory=list)


@dataclass
class Fragment:
    """A line of HTML as text to translate (atoms in it, as written) and the pairs to restore."""

    line: str
    text: str
    atoms: list[Span]
    pairs: list[Pair]  # top-level pairs, each with its nested ones


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
    return Fragment(line, text, atoms, _nest(pairs))


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


def _word_index(pieces: list[str]) -> list[int]:
    """The word each piece belongs to: a piece with sentencepiece's `▁` starts a word."""
    out, w = [], -1
    for p in pieces:
        if p.startswith("▁") or w < 0:
            w += 1
        out.append(w)
    return out


@torch.inference_mode()
def _alignment(translator, src_text: str, tokens: list[int]) -> list[int]:
    """The source token each target token attends to most: cross-attention averaged over all
    layers and heads, teacher-forced on the translation (EOS excluded). A model without
    attention maps (an ensemble) gets positions spread evenly instead."""
    if not tokens:
        return []
    ids = translator.tokenizer.encode_src([src_text])[0][: translator.max_src]
    n_src = len(ids) - 1
    model = translator.model
    if not hasattr(model, "attention_maps") or n_src < 1:
        return [min(n_src - 1, j * n_src // len(tokens)) for j in range(len(tokens))]
    src = pad([ids]).to(translator.device)
    tgt_in = torch.tensor([[BOS] + tokens[: translator.max_src - 2]], device=translator.device)
    maps = model.attention_maps(src, tgt_in)
    cross = torch.stack([c[0].float() for c in maps.cross]).mean((0, 1))  # (T, S)
    best = cross[:, :n_src].argmax(-1).tolist()
    return best + [best[-1]] * (len(tokens) - len(best))


def _ranges(
    pairs: list[Pair], lo: int, hi: int, src_words: list[tuple[int, int]], links: list[set[int]]
) -> list[tuple[Pair, int, int]]:
    """Each pair's `[start, end)` in target words, within `[lo, hi)`, siblings apart and in
    target order. A pair's range spans the target words aligned to any source word it holds;
    with none, it closes empty before the first word aligned past it."""
    out = []
    for p in pairs:
        inside = {i for i, (a, b) in enumerate(src_words) if a < p.end and b > p.start}
        hit = [j for j in range(lo, hi) if links[j] & inside]
        if hit:
            start, end = min(hit), max(hit) + 1
        else:
            last = max(inside, default=-1)
            start = next((j for j in range(lo, hi) if links[j] and min(links[j]) > last), hi)
            end = start
        out.append((p, start, end))
    out.sort(key=lambda x: (x[1], x[2], x[0].seq))
    placed, prev = [], lo
    for p, start, end in out:
        start = max(start, prev)
        end = max(end, start)
        placed.append((p, start, end))
        prev = end
    return placed


def _render(
    words: list[str],
    pairs: list[Pair],
    lo: int,
    hi: int,
    src_words: list[tuple[int, int]],
    links: list[set[int]],
    tags: list[str],
) -> list[tuple[str, str]]:
    """(kind, text) items of target words `[lo, hi)` with the pairs put back: kind `w` a word,
    `o`/`c` an opening/closing tag (as a marker indexing `tags`, so restoring spans leaves
    attributes alone)."""
    items: list[tuple[str, str]] = []
    pos = lo
    for p, start, end in _ranges(pairs, lo, hi, src_words, links):
        items += [("w", w) for w in words[pos:start]]
        tags.append(p.open)
        items.append(("o", f"\ue002{len(tags) - 1}\ue003"))
        items += _render(words, p.children, start, end, src_words, links, tags)
        tags.append(p.close)
        items.append(("c", f"\ue002{len(tags) - 1}\ue003"))
        pos = end
    items += [("w", w) for w in words[pos:hi]]
    return items


def _join(items: list[tuple[str, str]]) -> str:
    """Words apart, an opening tag glued to what follows, a closing tag to what precedes."""
    out, prev = "", ""
    for kind, text in items:
        if out and prev != "o" and kind != "c":
            out += " "
        out += text
        prev = kind
    return out


def _markup(translator, f: Fragment, m: Masked, t) -> str:
    """The translation `t` of fragment `f` (masked as `m`) with its tags and spans back."""
    tok = translator.tokenizer
    hyp = t.hypotheses[0]
    src_pieces = tok.src.encode(m.text, out_type=str)
    src_word = _word_index(src_pieces)
    tgt_word = _word_index(t.pieces)
    n_words = tgt_word[-1] + 1 if tgt_word else 0
    groups: list[list[int]] = [[] for _ in range(n_words)]
    links: list[set[int]] = [set() for _ in range(n_words)]
    align = _alignment(translator, m.text, hyp.tokens)
    even = not src_pieces or src_word[-1] + 1 != len(m.words)  # words lost in normalisation
    for k, (tid, w) in enumerate(zip(hyp.tokens, tgt_word)):
        groups[w].append(tid)
        if even:
            links[w].add(min(len(m.words) - 1, k * len(m.words) // max(len(hyp.tokens), 1)))
        elif align[k] < len(src_word):
            links[w].add(src_word[align[k]])
    words = [tok.decode_tgt(g) for g in groups]
    tags: list[str] = []
    text = _join(_render(words, f.pairs, 0, n_words, m.words, links, tags))
    return restore(m, text, lambda s: _TAG.sub(lambda h: tags[int(h[1])], s))


def translate_fragments(translator, fragments: list[Fragment]) -> list:
    """Translations of HTML fragments, in order: text translated, markup as written."""
    from mt.decode.translator import Translation

    ph = placeholders_for(translator.tokenizer)
    constrain = can_constrain(translator)
    out: list = [None] * len(fragments)
    todo, masks, reqs = [], [], []
    for i, f in enumerate(fragments):
        found = find_spans(f.text) if translator.protect else []
        free = [s for s in found if not any(a.start < s.end and s.start < a.end for a in f.atoms)]
        m = mask(f.text, ph, sorted(f.atoms + free, key=lambda s: s.start), keep_empty=True)
        assert m is not None
        if not m.content:  # nothing to translate: the line as it is
            out[i] = Translation(f.line.strip(), [Hypothesis([], 0.0)], [f.line.strip()])
            continue
        todo.append(i)
        masks.append(m)
        reqs.append(masked_request(Request(f.text), m, constrain))
    for i, m, t in zip(todo, masks, translator.translate_requests(reqs)):
        text = _markup(translator, fragments[i], m, t)
        texts = [text] + [restore(m, x) for x in t.texts[1:]]
        out[i] = Translation(text, t.hypotheses, texts, t.pieces)
    return out


def translate_html(translator, lines: Iterable[str], name: str) -> Iterator:
    """Translate HTML fragments, one per line, buffer by buffer; `name` is the input's name
    in errors (`FILE:LINE: <b> is not closed`)."""
    buf: list[Fragment] = []
    for i, line in enumerate(lines, 1):
        buf.append(parse_fragment(line.rstrip("\r\n"), f"{name}:{i}"))
        if len(buf) >= translator.cfg.buffer_lines:
            yield from translate_fragments(translator, buf)
            buf = []
    if buf:
        yield from translate_fragments(translator, buf)

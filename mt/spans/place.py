"""Put spans and tags back by alignment: translate the text without them, then place them.

The spans of a line (`mt.spans`, and the atoms of an HTML fragment) are lifted out of
the source, so the model translates exactly the text it was trained on: a sentence with a
`%s` or a `<br/>` between its words is translated as the sentence without them. Each span is
anchored to a source word (the one it is glued to, else the next one, else the previous one);
the search's own alignment (the source token each target token's last decoder layer attends to
most, as `--alignment` prints it) links target words to source words, and the span goes before
(or after) the target words linked to its anchor. Paired tags (`<b>...</b>`) go around the
target words linked to the source words they enclosed; children are clipped into their
parent's range and siblings kept apart, so tags nest in the output as they did in the input.
(Averaging every layer's attention over a teacher-forced pass placed tags no better on the
early recipe checkpoint and cost a second pass; docs/studies/decoding.md.)

Every span is emitted exactly once by construction, whatever the model writes; only the place
is the model's. Lines without spans never come here (see `mt.translation.protect`, whose round
of search gives the alignments).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from mt.spans import Span, find_spans, gluable, splits
from mt.tokenizer import Tokenizer


@dataclass
class Pair:
    """An inline element: its tags and the `[start, end)` of its text in `Unit.text`."""

    open: str
    close: str
    start: int
    end: int
    seq: int  # order of the opening tags: `<b><i>x</i></b>` has the same range twice
    children: list[Pair] = field(default_factory=list)


@dataclass
class Unit:
    """One line to translate: its text (atoms in it, paired tags out) and what to put back."""

    line: str  # returned as it is when nothing but spans is left to translate
    text: str
    atoms: list[Span]  # in `text`, in order, never overlapping
    pairs: list[Pair]  # top-level pairs, each holding its nested ones


@dataclass
class Lifted:
    """`Unit.text` without its atoms, as words, and where each atom was anchored."""

    text: str  # the words joined by single spaces: what the model translates
    words: list[tuple[int, int]]  # `Unit.text` offsets of each word
    anchors: list[tuple[int, bool]]  # per atom: (word, after it) or (word, before it)
    glue: list[tuple[bool, bool]]  # per atom: touched the text before / after it


def fold_wordless(unit: Unit) -> Unit:
    """`unit` with every element that encloses no word (`<i></i>`, `<b><i>%d</i></b>`,
    `<a href="URL">URL</a>`) turned into one atom holding it as written: there is nothing in
    it to translate, and nothing a target word could be aligned with to place its tags."""
    keep = [True] * len(unit.text)
    for s in unit.atoms:
        keep[s.start : s.end] = [False] * (s.end - s.start)
    atoms, folded = list(unit.atoms), []

    def walk(pairs: list[Pair]) -> list[Pair]:
        out = []
        for p in pairs:
            if any(
                k and not c.isspace()
                for c, k in zip(unit.text[p.start : p.end], keep[p.start : p.end])
            ):
                p.children = walk(p.children)
                out.append(p)
                continue
            atoms[:] = [a for a in atoms if not (p.start <= a.start and a.end <= p.end)]
            body = p.open + _written(unit.text, p.start, p.end, p.children) + p.close
            folded.append(Span(p.start, p.end, "markup", body))
        return out

    pairs = walk(unit.pairs)
    atoms = sorted(atoms + folded, key=lambda a: (a.start, a.end))  # stable: in line order
    return Unit(unit.line, unit.text, atoms, pairs)


def _written(text: str, lo: int, hi: int, pairs: list[Pair]) -> str:
    """`text[lo:hi]` with the tags of `pairs` (nested) put back where they were."""
    out, pos = "", lo
    for p in sorted(pairs, key=lambda p: (p.start, p.seq)):
        out += text[pos : p.start] + p.open + _written(text, p.start, p.end, p.children) + p.close
        pos = p.end
    return out + text[pos:hi]


def lift(text: str, atoms: list[Span]) -> Lifted:
    """The words of `text` around its atoms (an atom inside a word splits it: `file%d.txt`
    reads `file .txt`), and each atom's anchor: the word it is glued to on its left, else the
    next word (unless that is punctuation), else the previous one. An atom is glued to a
    letter or digit it touches (`<b>here`), not to punctuation (`%s.`)."""
    keep = [True] * len(text)
    for s in atoms:
        keep[s.start : s.end] = [False] * (s.end - s.start)
    words = [
        (m.start(), m.end())
        for m in re.finditer(r"\S+", "".join(c if k else " " for c, k in zip(text, keep)))
    ]
    anchors, glue = [], []
    for s in atoms:  # glued to a word's letter or digit, not to another atom's
        left = s.start > 0 and text[s.start - 1].isalnum() and keep[s.start - 1]
        right = s.end < len(text) and text[s.end].isalnum() and keep[s.end]
        glue.append((left, right))
        before = [w for w, (a, _) in enumerate(words) if a < s.start]
        after = [w for w, (a, _) in enumerate(words) if a >= s.end]
        if after and before and not right and not re.search(r"\w", _word(text, words[after[0]])):
            after = []  # `und %s.`: the span goes with `und`, not with the full stop
        if left and before or not after:
            anchors.append((before[-1] if before else 0, True))
        else:
            anchors.append((after[0], False))
    return Lifted(" ".join(text[a:b] for a, b in words), words, anchors, glue)


def _word(text: str, span: tuple[int, int]) -> str:
    return text[span[0] : span[1]]


def _word_index(pieces: list[str]) -> list[int]:
    """The word each piece belongs to: a piece with sentencepiece's `▁` starts a word."""
    out, w = [], -1
    for p in pieces:
        if p.startswith("▁") or w < 0:
            w += 1
        out.append(w)
    return out


def _nearest(links: list[set[int]], js: range, wanted: set[int]) -> list[int]:
    """The target word in `js` linked nearest to the source words `wanted` (a list of one;
    empty when nothing is wanted or linked)."""
    if not wanted:
        return []
    near = [(min(abs(s - i) for s in links[j] for i in wanted), j) for j in js if links[j]]
    return [min(near)[1]] if near else []


def _ranges(
    pairs: list[Pair], lo: int, hi: int, src_words: list[tuple[int, int]], links: list[set[int]]
) -> list[tuple[Pair, int, int]]:
    """Each pair's `[start, end)` in target words, within `[lo, hi)`, siblings apart and in
    target order. A pair spans the target words linked to any source word it encloses; when
    none is, the one word linked nearest to them."""
    out = []
    for p in pairs:
        inside = {i for i, (a, b) in enumerate(src_words) if a < p.end and b > p.start}
        hit = [j for j in range(lo, hi) if links[j] & inside] or _nearest(
            links, range(lo, hi), inside
        )
        start, end = (min(hit), max(hit) + 1) if hit else (hi, hi)
        out.append((p, start, end))
    out.sort(key=lambda x: (x[1], x[2], x[0].seq))
    placed, prev = [], lo
    for p, start, end in out:
        start = max(start, prev)
        end = max(end, start)
        placed.append((p, start, end))
        prev = end
    return placed


Item = tuple[str, bool, bool]  # text, a space may precede it, a space may follow it


def _render(
    words: list[str],
    pairs: list[Pair],
    lo: int,
    hi: int,
    src_words: list[tuple[int, int]],
    links: list[set[int]],
    slots: dict[tuple[int, bool], list[Item]],
) -> list[Item]:
    """Target words `[lo, hi)` with the pairs put around them and the atoms of `slots`
    (keyed by (word, after it)) beside their words."""
    items: list[Item] = []

    def emit(a: int, b: int) -> None:
        for j in range(a, b):
            items.extend(slots.get((j, False), []))
            items.append((words[j], True, True))
            items.extend(slots.get((j, True), []))

    pos = lo
    for p, start, end in _ranges(pairs, lo, hi, src_words, links):
        emit(pos, start)
        items.append((p.open, True, False))
        items += _render(words, p.children, start, end, src_words, links, slots)
        items.append((p.close, False, True))
        pos = end
    emit(pos, hi)
    return items


def join(items: list[Item]) -> str:
    """The items with a space between two that both allow one."""
    out, prev_ok = "", False
    for text, before, after in items:
        if out and prev_ok and before:
            out += " "
        out += text
        prev_ok = after
    return out


def place(tok: Tokenizer, unit: Unit, lifted: Lifted, tokens: list[int], align: list[int]) -> str:
    """The translation `tokens` of `lifted.text` (searched with alignments: `align[k]` is the
    source position target token k attends to most) with the unit's atoms and pairs put back."""
    src_word = _word_index(tok.src.encode(lifted.text, out_type=str))
    n_src_words = len(lifted.words)
    tgt_word = _word_index(tok.tgt_pieces(tokens))
    n = tgt_word[-1] + 1 if tgt_word else 0
    groups: list[list[int]] = [[] for _ in range(n)]
    links: list[set[int]] = [set() for _ in range(n)]
    even = (  # words lost in normalisation, or a search without alignments
        not src_word or src_word[-1] + 1 != n_src_words or len(align) != len(tokens)
    )
    for k, (tid, w) in enumerate(zip(tokens, tgt_word)):
        groups[w].append(tid)
        if even:
            links[w].add(min(n_src_words - 1, k * n_src_words // len(tokens)))
        elif align[k] < len(src_word):
            links[w].add(src_word[align[k]])
    return assemble(unit, lifted, [tok.decode_tgt(g) for g in groups], links)


def assemble(unit: Unit, lifted: Lifted, words: list[str], links: list[set[int]]) -> str:
    """Target `words` with the unit's atoms and pairs put back, `links[j]` holding the
    source words target word j is aligned with. Any links give well-formed output with
    every atom and tag once: the model decides places, never what is kept."""
    n = len(words)
    slots: dict[tuple[int, bool], list[Item]] = {}
    tail: list[Item] = []
    last: tuple[list[Item], int] | None = None  # where the previous atom went
    for k, (s, (i, after), (left, right)) in enumerate(
        zip(unit.atoms, lifted.anchors, lifted.glue)
    ):
        linked = [j for j in range(n) if i in links[j]] or _nearest(links, range(n), {i})
        can_left, can_right = gluable(s.text)  # else a space keeps it whole
        item = (s.text, not (left and can_left), not (right and can_right))
        where = (
            tail
            if not linked
            else slots.setdefault((max(linked) if after else min(linked), after), [])
        )
        touch = (
            k > 0
            and unit.atoms[k - 1].end == s.start
            and not splits(unit.atoms[k - 1].text, s.text)
        )
        if touch and last is not None and last[0] is where and last[1] == len(where) - 1:
            prev = where[-1]  # atoms that touched in the source, side by side: still touching
            where[-1] = (prev[0], prev[1], False)
            item = (item[0], False, item[2])
        where.append(item)
        last = (where, len(where) - 1)
    items = _render(words, unit.pairs, 0, n, lifted.words, links, slots) + tail
    text = join(items)
    atoms = {a.text for a in unit.atoms}
    want = Counter(x.text for a in unit.atoms for x in find_spans(a.text))
    want.update(x.text for p in _all(unit.pairs) for x in find_spans(p.open + p.close))
    if Counter(x.text for x in find_spans(text)) != want:  # glued into another span: apart
        text = join([(t, True, True) if t in atoms else (t, b, a) for t, b, a in items])
    return text


def _all(pairs: list[Pair]) -> list[Pair]:
    return [q for p in pairs for q in [p, *_all(p.children)]]

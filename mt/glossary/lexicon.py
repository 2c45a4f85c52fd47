"""Term pairs found in a parallel corpus: which target word translates which source word.

Training a model to take terms (`data.terms`, mt.data.terms) needs terms in its training
lines: a source word and the target word of the reference that translates it. Dinu et al.
(2019) took them from term banks (IATE, Wiktionary) matched in the corpus; a corpus of any
domain has no term bank, so `mt` finds them in the corpus itself, without a word aligner:

1. Dice's coefficient over content words. Each line is cut into words (mt.glossary.words),
   the content words (letters only, 3 or more, not among the `skip_common` most frequent of
   their side: the function words) reduced to their Snowball stems, so a word's forms count
   as one. Over a uniform sample of the corpus, a source stem s and a target stem t score
   Dice(s, t) = 2 c(s, t) / (c(s) + c(t)), c counting lines; pairs that co-occur in at least
   `min_count` lines and score at least `min_dice` are the lexicon.
2. Competitive linking in each line (Melamed 2000): the line's candidate links (a source
   word, a target word, their pair in the lexicon) are taken best Dice first, each word
   linked once. Dice alone would link a word to every frequent word it co-occurs with; one
   link per word is what an alignment gives, at no model's cost.
3. Phrases: links of neighbouring source words to target words that follow each other in
   the same order may be one term (`roten Hund` -> `red dog`; `phrases` joins them, up to
   three words, where its caller draws so), and a linked target word takes its neighbours
   that pair with the same source word (`Achterbahn` -> `roller coaster`), so multi-word
   terms are annotated whole.

The target term is written in its lemma's stead: the form of its stem the corpus writes
shortest (ties: most often), as a glossary lists a term (`dog` for `dogs`, `Hund` for
`Hunden`); the reference keeps its inflected form, so the model learns to inflect the term it
is given (Bergmanis and Pinnis 2021, target lemma annotations).

Why not an aligner: fast_align is not on PyPI, eflomal's package builds C code when
installed, SimAlign and awesome-align need a multilingual BERT to download; the links needed
here are few (a share of the lines, a few words each) and the counts cost one pass over a
sample. The lexicon is deterministic for its sample, and is kept in the run directory as a
table a person can read.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mt.atomic import write_bytes
from mt.errors import MtError
from mt.glossary.words import stem_function, words

CONTENT = re.compile(r"[^\W\d_]{3,}")  # a content word: letters only, 3 or more
JOINERS = frozenset("-'’/")  # characters that join words into one
HEADER = "# src_stem\ttgt_stem\ttarget\tdice\tlines"


@dataclass(frozen=True)
class Token:
    """A content word of a line: its place among all the line's words and marks (`index`:
    neighbours are one apart), characters `start:end`, and its stem."""

    index: int
    start: int
    end: int
    stem: str


def content_words(
    text: str, stem: Callable[[str], str], protected: Sequence[tuple[int, int]] = ()
) -> list[Token]:
    """The content words of `text` outside the `protected` character ranges."""
    out = []
    for i, w in enumerate(words(text, stem)):
        if not CONTENT.fullmatch(text[w.start : w.end]):
            continue
        if text[w.start - 1 : w.start] in JOINERS or text[w.end : w.end + 1] in JOINERS:
            continue  # a part of `rot-schwarz-gestreift`, `don't`: not a word of its own
        if any(s < w.end and w.start < e for s, e in protected):
            continue
        out.append(Token(i, w.start, w.end, w.key))
    return out


@dataclass(frozen=True)
class Link:
    """A source word (characters `start:end`) linked to the lemma of the target word(s)
    translating it; `joins`: it continues the link before it as a phrase (the next source
    word, the next target word)."""

    start: int
    end: int
    target: str
    joins: bool = False
    lines: int = 0  # training lines its word pair shares (the rarer, the more a term)


@dataclass
class Lexicon:
    """Source stem -> {target stem: Dice}, and the form each target stem is written in."""

    src_lang: str
    tgt_lang: str
    pairs: dict[str, dict[str, float]]
    forms: dict[str, str]
    lines: dict[tuple[str, str], int] = field(default_factory=dict)  # c(s, t), for the table

    def __post_init__(self) -> None:
        self._src_stem = stem_function(self.src_lang)
        self._tgt_stem = stem_function(self.tgt_lang)

    def __len__(self) -> int:
        return sum(len(t) for t in self.pairs.values())

    @property
    def digest(self) -> str:
        """What the lexicon says, as a short hash (part of a token store's key)."""
        return hashlib.sha256(self.table().encode("utf-8")).hexdigest()[:16]

    def links(
        self,
        src: str,
        tgt: str,
        src_protected: Sequence[tuple[int, int]] = (),
        tgt_protected: Sequence[tuple[int, int]] = (),
    ) -> list[Link]:
        """The word links of a pair, in source order; none inside a protected range (a
        protected word is neither linked nor counted as a neighbour)."""
        sw = content_words(src, self._src_stem, src_protected)
        tw = content_words(tgt, self._tgt_stem, tgt_protected)
        candidates = []
        for i, s in enumerate(sw):
            scores = self.pairs.get(s.stem)
            if scores:
                for j, t in enumerate(tw):
                    d = scores.get(t.stem)
                    if d is not None:
                        candidates.append((-d, i, j))
        candidates.sort()
        used_s: set[int] = set()
        used_t: set[int] = set()
        linked: list[tuple[int, int]] = []
        for _, i, j in candidates:
            if i not in used_s and j not in used_t:
                used_s.add(i)
                used_t.add(j)
                linked.append((i, j))
        # A compound's translation in two words (`Achterbahn` -> `roller coaster`): a linked
        # target word grows by its free neighbours that pair with the same source word.
        out: list[Link] = []
        last: tuple[int, list[int]] | None = None
        for i, j in sorted(linked):
            scores, js = self.pairs[sw[i].stem], [j]
            for step in (-1, 1):
                k = j + step
                while 0 <= k < len(tw) and k not in used_t and tw[k].stem in scores:
                    if abs(tw[k].index - tw[k - step].index) != 1:
                        break
                    used_t.add(k)
                    js.append(k)
                    k += step
            js.sort()
            target = " ".join(self.forms[tw[k].stem] for k in js)
            # Continues a phrase: the next source word, linked to the word after the last
            # one's target (in order: words that swap places, `zusammen Klarinette` ->
            # `clarinets together`, are two terms).
            joins = last is not None and (
                sw[i].index == sw[last[0]].index + 1
                and tw[js[0]].index == tw[last[1][-1]].index + 1
            )
            seen = self.lines.get((sw[i].stem, tw[j].stem), 0)
            out.append(Link(sw[i].start, sw[i].end, target, joins, seen))
            last = (i, js)
        return out

    def table(self) -> str:
        """The lexicon as the run directory keeps it: one pair a line, best first per stem."""
        rows = [HEADER]
        for s in sorted(self.pairs):
            for t, d in sorted(self.pairs[s].items(), key=lambda kv: (-kv[1], kv[0])):
                rows.append(f"{s}\t{t}\t{self.forms[t]}\t{d:.4f}\t{self.lines.get((s, t), 0)}")
        return "\n".join(rows) + "\n"

    def save(self, path: Path) -> None:
        text = f"# {self.src_lang}-{self.tgt_lang}\n" + self.table()
        write_bytes(path, text.encode("utf-8"), "the term lexicon")

    @classmethod
    def load(cls, path: Path) -> Lexicon:
        """A lexicon `save` wrote; a damaged file is one line naming its line."""
        pairs: dict[str, dict[str, float]] = {}
        forms: dict[str, str] = {}
        lines: dict[tuple[str, str], int] = {}
        langs = ("", "")
        text = path.read_text(encoding="utf-8")
        for n, line in enumerate(text.splitlines(), 1):
            if n == 1 and line.startswith("# ") and "-" in line:
                a, _, b = line[2:].partition("-")
                langs = (a.strip(), b.strip())
                continue
            if not line or line.startswith("#"):
                continue
            cols = line.split("\t")
            try:
                s, t, form, d, c = cols
                pairs.setdefault(s, {})[t] = float(d)
                forms[t] = form
                lines[(s, t)] = int(c)
            except ValueError:
                raise MtError(
                    f"{path}:{n}: not a line of the term lexicon (5 tab-separated columns); "
                    "delete the file to find the terms again"
                ) from None
        if not all(langs):
            raise MtError(f"{path}:1: the term lexicon's first line must name its languages")
        return cls(langs[0], langs[1], pairs, forms, lines)


def phrases(
    links: Sequence[Link], join: Callable[[], bool] = lambda: True, longest: int = 3
) -> list[Link]:
    """The terms of a line's `links`: a link that continues a phrase joins it when `join()`
    says so, up to `longest` source words (a whole sentence of monotone links, `roter Hund
    schläft` -> `red dog sleep`, is no term); a phrase counts the lines of its rarest pair."""
    out: list[Link] = []
    words = 0
    for link in links:
        if out and link.joins and words < longest and join():
            last = out[-1]
            target = f"{last.target} {link.target}"
            out[-1] = Link(last.start, link.end, target, last.joins, min(last.lines, link.lines))
            words += 1
        else:
            out.append(link)
            words = 1
    return out


def learn(
    src: Iterable[str],
    tgt: Iterable[str],
    src_lang: str,
    tgt_lang: str,
    min_dice: float = 0.3,
    min_count: int = 3,
    skip_common: int = 100,
) -> Lexicon:
    """The lexicon of parallel lines (a sample of the corpus: the lines are held in a list
    while counted, twice: stems first, then the pairs of the stems kept)."""
    src, tgt = list(src), list(tgt)
    s_stem, t_stem = _stems(stem_function(src_lang)), _stems(stem_function(tgt_lang))
    cs: Counter[str] = Counter()
    ct: Counter[str] = Counter()
    for x, y in zip(src, tgt):
        cs.update({w for w, _ in _content(x, s_stem)})
        ct.update({w for w, _ in _content(y, t_stem)})
    s_ids = _kept(cs, min_count, skip_common)
    t_ids = _kept(ct, min_count, skip_common)
    if not s_ids or not t_ids:
        return Lexicon(src_lang, tgt_lang, {}, {})
    n_t = len(t_ids)
    codes: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    chunk: list[np.ndarray] = []
    surfaces: dict[str, Counter[str]] = {}
    for x, y in zip(src, tgt):
        a = {s_ids[w] for w, _ in _content(x, s_stem) if w in s_ids}
        tw = [(w, m) for w, m in _content(y, t_stem) if w in t_ids]
        for w, m in tw:
            if m.start() > 0:  # a line's first word is capitalised for the sentence
                surfaces.setdefault(w, Counter())[m.group()] += 1
        b = {t_ids[w] for w, _ in tw}
        if a and b:
            chunk.append(
                (np.fromiter(a, np.int64)[:, None] * n_t + np.fromiter(b, np.int64)).ravel()
            )
        if len(chunk) >= 20_000:
            codes, counts = _merge(codes, counts, chunk)
            chunk = []
    codes, counts = _merge(codes, counts, chunk)
    code, count = (codes[0], counts[0]) if codes else (np.zeros(0, np.int64),) * 2
    s_names, t_names = list(s_ids), list(t_ids)
    pairs: dict[str, dict[str, float]] = {}
    lines: dict[tuple[str, str], int] = {}
    for c, n in zip(code[count >= min_count].tolist(), count[count >= min_count].tolist()):
        s, t = s_names[c // n_t], t_names[c % n_t]
        d = 2 * n / (cs[s] + ct[t])
        if d >= min_dice:
            pairs.setdefault(s, {})[t] = round(d, 4)
            lines[(s, t)] = n
    used = {t for ts in pairs.values() for t in ts}
    forms = {t: lemma_form(surfaces.get(t, Counter()), t) for t in used}
    return Lexicon(src_lang, tgt_lang, pairs, forms, lines)


_RUN = re.compile(r"\w+")  # a word as mt.glossary.words cuts text


def _stems(stem: Callable[[str], str]) -> Callable[[str], str]:
    """`stem` with a cache of its own for one lexicon's counting (every word form of the
    sample once: the Snowball stemmers are pure Python, a word costs tens of microseconds)."""
    cache: dict[str, str] = {}

    def cached(word: str) -> str:
        out = cache.get(word)
        if out is None:
            out = cache[word] = stem(word)
        return out

    return cached


def _content(text: str, stem: Callable[[str], str]) -> list[tuple[str, re.Match[str]]]:
    """(stem, match) of each content word of `text`: `content_words` without the places,
    for counting a sample fast."""
    out = []
    for m in _RUN.finditer(text):
        if CONTENT.fullmatch(m.group()):
            a, b = m.start(), m.end()
            if text[a - 1 : a] not in JOINERS and text[b : b + 1] not in JOINERS:
                out.append((stem(m.group().casefold()), m))
    return out


def lemma_form(surfaces: Counter[str], stem: str) -> str:
    """The form a stem's term is written in: of the forms the corpus writes at least a tenth
    as often as its most frequent (case folded), the shortest, then the most frequent; in
    the spelling it is most often written in."""
    if not surfaces:
        return stem
    folded: Counter[str] = Counter()
    for s, n in surfaces.items():
        folded[s.casefold()] += n
    top = max(folded.values())
    word = min(
        (f for f, n in folded.items() if n * 10 >= top), key=lambda f: (len(f), -folded[f], f)
    )
    spellings = [(n, s) for s, n in surfaces.items() if s.casefold() == word]
    return max(spellings, key=lambda x: (x[0], x[1]))[1]


def _kept(counts: Counter[str], min_count: int, skip: int) -> dict[str, int]:
    """Stem -> id of the stems seen in `min_count` lines or more, the `skip` most frequent
    left out (ties broken by the stem, so the choice does not depend on the reading order)."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    kept = sorted(s for s, n in ranked[skip:] if n >= min_count)
    return {s: i for i, s in enumerate(kept)}


def _merge(
    codes: list[np.ndarray], counts: list[np.ndarray], chunk: list[np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The pair counts so far (one array of codes, one of counts) with a chunk's added."""
    if not chunk:
        return codes, counts
    new, n = np.unique(np.concatenate(chunk), return_counts=True)
    if codes:
        both = np.concatenate([codes[0], new])
        weights = np.concatenate([counts[0], n])
        new, inverse = np.unique(both, return_inverse=True)
        n = np.bincount(inverse, weights=weights).astype(np.int64)
    return [new], [n]

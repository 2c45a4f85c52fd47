"""Sentence splitting: a line that holds a paragraph is translated sentence by sentence.

A model trained on one sentence per line, given five sentences on one line, translates the
first one or two and stops (docs/studies/text-as-people-send-it.md). So before search, each
line is cut into sentences by `sentencex` (chosen over pysbd by measurement: as accurate on
Multi30k paragraphs in de, en, fr and cs, and far faster, in the same study); the
sentences of a buffer of lines go to the translator together, so they share batches with the
other lines, and each line's translations are joined with the source's own separators (the
spaces, tabs or newlines between its sentences, and what leads and trails the line).

A sentence longer than the model's source limit would otherwise be cut to the limit with a
warning (`Translator.truncated`): here it is split further, at `, ; :` where it can be, else
between words, into pieces that fit. Only a single word longer than the limit is still cut
and counted.

A request with a prefix or constraints is not split: both speak of the whole line's output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from mt.search.steps import Hypothesis
from mt.tokenizer import Tokenizer
from mt.translation.doubt import Bounds, flags
from mt.translation.requests import Request, Translation
from mt.translation.stages import Ask, Rounds, Stage

_CLAUSE = re.compile(r"(?<=[,;:])\s+")
_SPACE = re.compile(r"\s+")
_NEWLINES = re.compile(r"[\r\n]+")


@dataclass
class Split:
    """A line as `lead + s0 + seps[0] + s1 + seps[1] + ...`: its sentences and what follows each."""

    lead: str
    sentences: list[str]
    seps: list[str]

    def join(self, texts: list[str]) -> str:
        return self.lead + "".join(t + sep for t, sep in zip(texts, self.seps))


def _pieces(text: str, found: Iterable[str]) -> Split:
    """`text` cut where the stripped segments `found` stand in it, in order; a segment not
    found as written (a segmenter that changed it) leaves the line one sentence."""
    stripped = text.strip()
    lead = text[: len(text) - len(text.lstrip())]
    sentences, seps, pos = [], [], len(lead)
    for seg in found:
        seg = seg.strip()
        if not seg:
            continue
        at = text.find(seg, pos)
        if at < 0:
            return Split(lead, [stripped], [text[len(lead) + len(stripped) :]])
        if sentences:
            seps[-1] = text[pos:at]
        sentences.append(seg)
        seps.append("")
        pos = at + len(seg)
    if not sentences:
        return Split(text, [], [])
    seps[-1] = text[pos:]
    return Split(lead, sentences, seps)


def split_sentences(text: str, lang: str) -> Split:
    """The sentences of `text` in language `lang` (an ISO code), with their separators."""
    import sentencex

    return _pieces(text, sentencex.segment(lang, text) if text.strip() else [])


def fit(sentence: str, size: Callable[[str], int], limit: int) -> list[tuple[str, str]]:
    """`sentence` as (piece, separator) pairs whose pieces each measure <= `limit` by `size`:
    the sentence itself when it fits, else clauses (cut after `, ; :`) packed greedily, a
    clause too long cut between words. A word longer than the limit stays whole."""
    if size(sentence) <= limit:
        return [(sentence, "")]
    for unit in (_CLAUSE, _SPACE):
        parts = unit.split(sentence)
        if len(parts) > 1:
            break
    else:
        return [(sentence, "")]
    seps = unit.findall(sentence) + [""]
    out: list[tuple[str, str]] = []
    current: str | None = None
    current_sep = ""
    for part, sep in zip(parts, seps):
        if current is not None and size(current + current_sep + part) <= limit:
            current, current_sep = current + current_sep + part, sep
            continue
        if current is not None:
            out.append((current, current_sep))
        pieces = fit(part, size, limit)  # a clause too long: its words
        out.extend(pieces[:-1])
        current, current_sep = pieces[-1][0], sep
    out.append((current or "", current_sep))
    return out


def line_split(text: str, lang: str, size: Callable[[str], int], limit: int) -> Split:
    """`split_sentences`, each sentence over `limit` then cut by `fit`."""
    split = split_sentences(text, lang)
    sentences, seps = [], []
    for sentence, sep in zip(split.sentences, split.seps):
        pieces = fit(sentence, size, limit)
        for k, (piece, inner) in enumerate(pieces):
            sentences.append(piece)
            seps.append(sep if k == len(pieces) - 1 else inner)
    return Split(split.lead, sentences, seps)


def join_translations(split: Split, parts: list[Translation]) -> Translation:
    """One line's translation from its sentences': texts joined with the source's separators,
    the k-th hypothesis made of each sentence's k-th (its best where it has fewer), the
    confidence averaged over tokens, the flags of every sentence."""
    if not parts:
        return Translation(split.lead, [], [], [])
    errors = [p.error for p in parts if p.error]
    if errors:
        return Translation("", [], [], error=errors[0])
    n = max(len(p.hypotheses) for p in parts)
    hyps, texts = [], []
    for k in range(n):
        chosen = [min(k, len(p.hypotheses) - 1) for p in parts]
        tokens = [t for p, c in zip(parts, chosen) for t in p.hypotheses[c].tokens]
        weights = [len(p.hypotheses[c].tokens) + 1 for p, c in zip(parts, chosen)]
        score = sum(w * p.hypotheses[c].score for w, p, c in zip(weights, parts, chosen))
        hyps.append(Hypothesis(tokens, score / sum(weights)))
        texts.append(split.join([p.texts[c] for p, c in zip(parts, chosen)]))
    out = Translation(texts[0], hyps, texts, [x for p in parts for x in p.pieces])
    known = [(len(p.hypotheses[0].tokens) + 1, p.confidence) for p in parts if p.hypotheses]
    if known and all(c is not None for _, c in known):
        out.confidence = round(sum(w * c for w, c in known) / sum(w for w, _ in known), 4)
    out.flags = list(dict.fromkeys(f for p in parts for f in p.flags))
    return out


def source_size(tokenizer: Tokenizer, max_src: int) -> tuple[Callable[[str], int], int]:
    """How `fit` measures a sentence for a model reading at most `max_src` tokens, and the
    limit: tokens, bounded from above by UTF-8 bytes, so most sentences skip the extra
    encoding."""
    limit = max_src - 3  # EOS and a multilingual model's target-language mark

    def size(text: str) -> int:
        n = len(text.encode("utf-8"))
        return n if n + 1 <= limit else len(tokenizer.encode_src([text])[0])

    return size, limit


def expand(
    requests: list[Request], size: Callable[[str], int], limit: int
) -> tuple[list[Split], list[Request]]:
    """Each request's split and the flat list of sentence requests to translate. A request
    whose plan splits (`plan.split`, the language unless the request names its `frm`) is cut
    into sentences, a newline inside one a space to the model; any other goes down as it is."""
    splits, flat = [], []
    for r in requests:
        if r.plan.split is None:
            splits.append(Split("", [r.src], [""]))
            flat.append(r)
            continue
        whole = r.prefix or r.constraints or not r.src.strip()
        lang = r.frm or r.plan.split
        split = Split("", [r.src], [""]) if whole else line_split(r.src, lang, size, limit)
        splits.append(split)
        flat.extend(replace(r, src=_NEWLINES.sub(" ", s)) for s in split.sentences)
    return splits, flat


def gather(
    requests: list[Request], splits: list[Split], done: list[Translation], bounds: Bounds
) -> list[Translation]:
    """The translations of `expand`'s sentences (`done`, in its order) as one per request;
    `bounds`: the length bounds a joined translation is flagged with."""
    out, start = [], 0
    for r, split in zip(requests, splits):
        parts = done[start : start + len(split.sentences)]
        start += len(split.sentences)
        if len(split.sentences) == 1 and not split.lead and not split.seps[0]:
            out.append(parts[0])
            continue
        joined = join_translations(split, parts)
        joined.sentences = len(split.sentences)
        if not joined.error:  # a line too short as a whole, each sentence aside
            extra = [f for f in flags(r.src, joined.text, bounds(r)) if f in ("short", "long")]
            joined.flags = list(dict.fromkeys(joined.flags + extra))
        out.append(joined)
    return out


def split_stage(tokenizer: Tokenizer, max_src: int, bounds: Bounds) -> Stage:
    """The stage (mt.translation.stages): each request its plan splits translated sentence by
    sentence, the others whole, one translation per request; the sentences and the whole
    lines go down together, so they share batches."""
    size, limit = source_size(tokenizer, max_src)

    def rounds(requests: list[Request]) -> Rounds:
        splits, flat = expand(requests, size, limit)
        done = (yield Ask(flat, isolate=True)) if flat else []
        return gather(requests, splits, done, bounds)

    return rounds

"""Raw text in, translations out: batching by length, restoring input order, streaming.

Input is read `buffer_lines` at a time, so memory stays bounded on any input size; within a
buffer, sentences are sorted by length and cut into token-budget batches (little padding), then
written back in input order. Every input line yields exactly one output line (`nbest` lines with
--nbest); an empty line yields an empty line without running the model.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

from mt.batching import pad, token_batches
from mt.config import DecodeConfig
from mt.decode.int8 import quantize_linears
from mt.decode.search import Hypothesis, beam_search, greedy_search
from mt.model import Transformer
from mt.tokenizer import EOS, Tokenizer


@dataclass
class Translation:
    text: str
    hypotheses: list[Hypothesis]  # best first; empty for an empty input line
    texts: list[str]  # detokenized text of each hypothesis


class Translator:
    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer,
        cfg: DecodeConfig,
        device: torch.device,
        greedy: bool = False,
        alignment: bool = False,
    ) -> None:
        # int8: a quantised copy, so the caller's model (maybe mid-training) is not touched.
        self.model = quantize_linears(model) if cfg.int8 else model.eval()
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.device = device
        self.greedy = greedy or cfg.beam == 1 and cfg.nbest == 1
        self.alignment = alignment
        self.max_src = model.cfg.max_positions
        self.truncated = 0  # lines cut to the model's longest input, reported by the CLI

    def _search(self, src: torch.Tensor) -> list[list[Hypothesis]]:
        c = self.cfg
        if self.greedy:
            hyps = greedy_search(
                self.model, src, c.max_len_a, c.max_len_b, self.alignment, with_scores=False
            )
            return [[h] for h in hyps]
        return beam_search(
            self.model,
            src,
            c.beam,
            c.alpha,
            c.max_len_a,
            c.max_len_b,
            c.nbest,
            self.alignment,
            c.stop_early,
        )

    def translate_lines(self, lines: list[str]) -> list[Translation]:
        """Translations of `lines`, in their order."""
        ids = self.tokenizer.encode_src([line.strip() for line in lines])
        results: list[list[Hypothesis]] = [[] for _ in lines]
        todo = [i for i, line in enumerate(lines) if line.strip()]
        for i in todo:
            if len(ids[i]) > self.max_src:
                ids[i] = ids[i][: self.max_src - 1] + [EOS]
                self.truncated += 1
        sizes = [len(ids[i]) for i in todo]
        for batch in token_batches(sizes, self.cfg.max_tokens):
            rows = [todo[j] for j in batch]
            src = pad([ids[r] for r in rows]).to(self.device)
            for r, hyps in zip(rows, self._search(src)):
                results[r] = hyps
        out = []
        for hyps in results:
            texts = [self.tokenizer.decode_tgt(h.tokens) for h in hyps]
            out.append(Translation(texts[0] if texts else "", hyps, texts))
        return out

    def translate_stream(self, lines: Iterable[str]) -> Iterator[Translation]:
        """Translate an endless iterable buffer by buffer, yielding in input order."""
        it = iter(lines)
        while True:
            chunk = [line.rstrip("\r\n") for line in itertools.islice(it, self.cfg.buffer_lines)]
            if not chunk:
                return
            yield from self.translate_lines(chunk)


def format_translation(t: Translation, index: int, nbest: int, alignment: bool) -> list[str]:
    """Output lines for one input line.

    One-best: the translation, plus with `alignment` a tab and `src-tgt` pairs (0-based, the
    source position each target token attends to most, counted in sentencepiece tokens).
    N-best: `nbest` lines `INDEX ||| TRANSLATION ||| SCORE` (Moses style, INDEX 0-based);
    missing hypotheses are padded with empty ones so every input line has exactly N lines.
    """
    if nbest == 1:
        if not alignment:
            return [t.text]
        pairs = (
            " ".join(f"{s}-{j}" for j, s in enumerate(t.hypotheses[0].alignment))
            if t.hypotheses
            else ""
        )
        return [f"{t.text}\t{pairs}"]
    lines = []
    for k in range(nbest):
        if k < len(t.hypotheses):
            lines.append(f"{index} ||| {t.texts[k]} ||| {t.hypotheses[k].score:.4f}")
        else:
            lines.append(f"{index} |||  ||| 0.0000")  # empty input: the empty output, p = 1
    return lines


def write_translations(
    translations: Iterable[Translation],
    out,  # a text stream
    nbest: int = 1,
    alignment: bool = False,
) -> int:
    """Write and flush after each buffer-sized group; returns the number of input lines."""
    n = 0
    for n, t in enumerate(translations, 1):
        for line in format_translation(t, n - 1, nbest, alignment):
            out.write(line + "\n")
        if out is sys.stdout or n % 64 == 0:
            out.flush()
    out.flush()
    return n

"""Forced decoding: how probable the model finds given translations, scored as beam search does.

Uses: rerank an n-best list, filter a parallel corpus by model score, compare two systems'
outputs under one model. A pair's `logprob` is the sum of log p(token | source, prefix) over the
target's sentencepiece tokens and the final EOS, with the softmax over the whole vocabulary (as in
`steps.top_tokens`); its `score` is that sum divided by GNMT's length penalty of the number of
tokens counting EOS, the value `beam_search` ranks and `mt translate --nbest` prints. For a
translation that beam search produced, scoring its own tokens gives its own score.

Text is tokenized again here: a detokenized output whose sentencepiece encoding differs from
the pieces the search chose (a rare non-canonical segmentation, or an `<unk>` that detokenizing
drops) is scored as its canonical encoding, so its score can differ from the search's.

Pairs are read `buffer_lines` at a time, sorted by length into token batches and returned in
input order, as the translator does, so memory stays bounded on any input size.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import torch

from mt.batching import pad, token_batches
from mt.config import DecodeConfig
from mt.data.corpus import line_chunks
from mt.device import resolve_decode_dtype
from mt.errors import MtError
from mt.model import Transformer
from mt.runtime.dtype import decode_model
from mt.search.steps import length_penalty
from mt.spans import mask_pair
from mt.spans.placeholders import placeholders_for
from mt.tokenizer import BOS, EOS, Tokenizer
from mt.translation.target import Target, model_for

EOS_PIECE = "</s>"


@dataclass
class PairScore:
    logprob: float  # sum of token_logprobs
    score: float  # logprob / GNMT length penalty of len(tokens): beam search's ranking value
    tokens: list[str]  # target pieces, then "</s>"
    token_logprobs: list[float]  # one per entry of `tokens`


class TargetTooLong(ValueError):
    """A target longer than the model's positions: it cannot be scored, only refused."""

    def __init__(self, index: int, length: int, limit: int) -> None:
        super().__init__(f"target has {length} tokens; this model scores at most {limit}")
        self.index = index


def normalise(logprob: float, n_tokens: int, alpha: float, penalty: str = "gnmt") -> float:
    """`beam_search`'s finished score: `n_tokens` counts EOS (a hypothesis ending at step t has
    t + 1 tokens and is divided by length_penalty(t + 1))."""
    return logprob / length_penalty(n_tokens, alpha, penalty)


class Scorer:
    """Scores (source, target) pairs with one model; knows nothing of files or the CLI."""

    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer,
        cfg: DecodeConfig,
        device: torch.device,
        protect: bool = False,
        target: Target | None = None,
    ) -> None:
        # dtype and int8 as the translator applies them, so a score is of what search decodes.
        self.precision = resolve_decode_dtype(cfg.dtype, device, cfg.int8)
        self.model = decode_model(model, self.precision, device, cfg.int8)
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.device = device
        self.max_src = model.cfg.max_positions
        self.max_tgt = model.cfg.max_positions - 1  # BOS + tokens fill the decoder's positions
        self.truncated = 0  # sources cut to the model's longest input, as translate cuts them
        # A model trained with data.protect saw spans as placeholders: score them as such.
        self.mask = protect and placeholders_for(tokenizer).reserved
        # A multilingual model's target language: its token before the source, or the
        # decoder's first input (mt.translation.target).
        self.target = target or Target(None, [], None, None)

    def score_lines(self, src: list[str], tgt: list[str]) -> list[PairScore]:
        """Scores of pairs of raw text lines, in their order."""
        if self.mask:
            pairs = [mask_pair(s, t) for s, t in zip(src, tgt)]
            src, tgt = [s for s, _ in pairs], [t for _, t in pairs]
        src_ids = self.tokenizer.encode_src([line.strip() for line in src])
        tgt_ids = self.tokenizer.encode_tgt([line.strip() for line in tgt])
        return self.score_ids(src_ids, tgt_ids)

    def score_ids(self, src_ids: list[list[int]], tgt_ids: list[list[int]]) -> list[PairScore]:
        """Scores of token-id pairs (sources ending in EOS, targets without BOS/EOS), in order;
        a target too long for the model raises TargetTooLong with its index."""
        for i, t in enumerate(tgt_ids):
            if len(t) > self.max_tgt:
                raise TargetTooLong(i, len(t), self.max_tgt)
        mark = self.target.src_mark
        src_ids = [mark + self._fit_source(s, len(mark)) for s in src_ids]
        model = model_for(self.model, self.target)
        sizes = [max(len(s), len(t) + 1) for s, t in zip(src_ids, tgt_ids)]
        results: list[PairScore | None] = [None] * len(src_ids)
        for batch in token_batches(sizes, self.cfg.max_tokens):
            rows = batch.tolist()
            lps = forced_logprobs(
                model, [src_ids[r] for r in rows], [tgt_ids[r] for r in rows], self.device
            )
            for r, lp in zip(rows, lps):
                results[r] = self._pair_score(tgt_ids[r], lp)
        return [r for r in results if r is not None]

    def _fit_source(self, ids: list[int], room: int = 0) -> list[int]:
        if len(ids) + room <= self.max_src:
            return ids
        self.truncated += 1
        return ids[: self.max_src - 1 - room] + [EOS]

    def _pair_score(self, tgt: list[int], lp: list[float]) -> PairScore:
        total = sum(lp)
        pieces = self.tokenizer.tgt_pieces(tgt) + [EOS_PIECE]
        return PairScore(
            total,
            normalise(total, len(lp) + self.cfg.length_offset, self.cfg.alpha, self.cfg.penalty),
            pieces,
            lp,
        )


@torch.inference_mode()
def forced_logprobs(
    model: Transformer,
    src: list[list[int]],
    tgt: list[list[int]],
    device: torch.device,
) -> list[list[float]]:
    """Per pair, log p of each target token and of the final EOS, teacher-forced in one pass.

    The log-softmax runs per sentence over its real positions only, in fp32 as search does, so
    padding costs no normaliser and the (B, T, V) logits are not copied a second time.
    """
    src_t = pad(src).to(device)  # (B, S)
    tgt_in = pad([[BOS] + t for t in tgt]).to(device)  # (B, T)
    logits = model(src_t, tgt_in)  # (B, T, V)
    out = []
    for i, t in enumerate(tgt):
        gold = torch.tensor(t + [EOS], device=device)  # (n + 1,)
        lp = torch.log_softmax(logits[i, : len(gold)].float(), dim=-1)  # (n + 1, V)
        out.append(lp.gather(1, gold[:, None])[:, 0].tolist())
    return out


# -- files in, lines out --------------------------------------------------------------------------


def count_parallel(src: Path, tgt: Path) -> int:
    """The common line count of two files, read once in bounded memory before any model work,
    so unequal files or invalid UTF-8 fail in a second, not after hours of scoring."""
    n_src = sum(len(c) for c in line_chunks(src))
    n_tgt = sum(len(c) for c in line_chunks(tgt))
    if n_src != n_tgt:
        raise MtError(f"{src} has {n_src} lines but {tgt} has {n_tgt}; give one target per source")
    return n_src


def score_files(scorer: Scorer, src: Path, tgt: Path, buffer_lines: int) -> Iterator[PairScore]:
    """Scores of the pairs of two line-aligned text files (`.gz` too), in input order.

    A target the model cannot hold is an error naming its file and line; files that turn out
    unequal mid-way (changed since `count_parallel`) are reported with both names.
    """
    done = 0
    tgt_chunks = line_chunks(tgt, buffer_lines)
    for src_lines in line_chunks(src, buffer_lines):
        tgt_lines = next(tgt_chunks, [])
        if len(tgt_lines) != len(src_lines):
            raise MtError(f"{src} and {tgt} have different line counts (after line {done})")
        try:
            yield from scorer.score_lines(src_lines, tgt_lines)
        except TargetTooLong as err:
            raise MtError(f"{tgt}:{done + err.index + 1}: {err}") from None
        done += len(src_lines)
    if next(tgt_chunks, None) is not None:
        raise MtError(f"{src} and {tgt} have different line counts (after line {done})")


def score_chunk(
    scorer: Scorer, src: list[str], tgt: list[str], first: int, buffer_lines: int, where: Path
) -> Iterator[PairScore]:
    """Scores of one chunk of a longer pair of files (line `first` on, 0-based), a buffer at
    a time as `score_files` reads them."""
    for start in range(0, len(src), buffer_lines):
        end = start + buffer_lines
        try:
            yield from scorer.score_lines(src[start:end], tgt[start:end])
        except TargetTooLong as err:
            raise MtError(f"{where}:{first + start + err.index + 1}: {err}") from None


def format_score(s: PairScore, as_json: bool) -> str:
    """`LOGPROB<TAB>SCORE`, or one JSON object with the tokens and their log-probabilities."""
    if as_json:
        return json.dumps(
            {
                "score": s.score,
                "logprob": s.logprob,
                "tokens": s.tokens,
                "token_logprobs": s.token_logprobs,
            },
            ensure_ascii=False,
        )
    return f"{s.logprob:.6f}\t{s.score:.6f}"


def write_scores(scores: Iterable[PairScore], out: TextIO, as_json: bool = False) -> int:
    """Write one line per pair, flushing every 64 lines; returns the number of pairs."""
    n = 0
    for n, s in enumerate(scores, 1):
        out.write(format_score(s, as_json) + "\n")
        if n % 64 == 0:
            out.flush()
    out.flush()
    return n

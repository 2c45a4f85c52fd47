"""What greedy, beam and constrained search share at each step: length limits, the length
penalty, the next-token scores of a chunk of rows under the step's rules (`mt.search.rules`),
and sampling.

Kept apart from the searches so that each search reads as its loop; nothing here knows which
search calls it, nor which rules restrict it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mt.model import DecoderState, Transformer
from mt.search.rules import StepRules, output_columns
from mt.tokenizer import BOS, EOS, PAD


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS/EOS
    score: float  # log-probability, length-normalised for beam search; NaN if not asked for
    alignment: list[int] = field(default_factory=list)  # most-attended source position per token


def max_lengths(src: torch.Tensor, a: float, b: int, limit: int) -> torch.Tensor:
    """Per-sentence output limit a * src_len + b (without EOS), capped by the model's positions."""
    src_len = src.ne(PAD).sum(1)
    # Clamped while still float: a huge a or b must reach the cap, not wrap around in int64.
    return (src_len.double() * a + min(b, limit)).clamp(1, limit - 1).floor().long()


def length_penalty(length: int, alpha: float, kind: str = "gnmt") -> float:
    """GNMT's ((5 + |Y|) / 6) ** alpha, or with `kind` "power" |Y| ** alpha (HF, fairseq)."""
    if kind == "power":
        return float(length) ** alpha
    return ((5.0 + length) / 6.0) ** alpha


def log_softmax_(logits: torch.Tensor) -> torch.Tensor:
    """`torch.log_softmax(logits, -1)` written over `logits` (same values, bit for bit), for
    the fresh (rows x V) logits of a step. A new tensor of that size is fresh memory from the
    system at every step (above malloc's reuse threshold of 32 MB), whose page faults slowed
    the normalisation of a large vocabulary's logits, and with it a whole decode of an
    OPUS-MT-sized model (docs/studies/importing.md)."""
    return torch._log_softmax(logits, -1, False, out=logits)


ROWS_PER_CHUNK = 256  # rows of (rows x V) logits scored while they are still in cache
TOPK_BLOCK = 64  # columns per block in row_topk


def row_topk(x: torch.Tensor, k: int, block: int = TOPK_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """`x.topk(k, dim=-1)` (sorted) for a wide 2-D `x`, faster than torch's
    (docs/studies/decoding-speed.md, "What changed in decoding").

    torch's CPU topk pays per element what a max over contiguous blocks pays for several. The
    k largest entries of a row lie in the k blocks with the largest maxima (a block outside
    them has k larger block maxima above its own), so the exact top k is the
    top k of those k blocks plus the columns that do not fill a whole block. Values are exactly
    those of `topk`; which of several equal entries is returned may differ, as topk leaves it
    open.
    """
    n, v = x.shape
    nb = v // block
    if nb < 4 * k:  # narrow rows: nothing to gain
        return x.topk(k, dim=-1)
    blocks = x[:, : nb * block].view(n, nb, block)
    pick = blocks.amax(-1).topk(k, dim=-1).indices  # (n, k) the k blocks with the largest max
    cand = blocks.gather(1, pick[:, :, None].expand(n, k, block)).view(n, k * block)
    offs = torch.arange(block, device=x.device)
    cols = (pick[:, :, None] * block + offs).view(n, k * block)
    if nb * block < v:  # the columns after the last whole block are always candidates
        cand = torch.cat([cand, x[:, nb * block :]], dim=1)
        tail = torch.arange(nb * block, v, device=x.device).expand(n, -1)
        cols = torch.cat([cols, tail], dim=1)
    top, j = cand.topk(k, dim=-1)
    return top, cols.gather(1, j)


def top_tokens(
    model: Transformer,
    prev: torch.Tensor,
    state: DecoderState,
    k: int,
    rules: StepRules,
    *,
    alignment: bool = False,
    normalise: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Feed `prev` and return, per row, the `k` most probable next tokens other than PAD and
    BOS (N, k) with their log-probabilities (N, k), the log-probability of EOS (N,), and the
    most-attended source position if `alignment`. Without `normalise` the two log-probability
    results are None and the log-softmax pass (an exp per row and vocabulary entry) is skipped.

    Tokens outside `rules`' support are masked before the log-softmax, those it bans after
    it. A row with a forced token (a target prefix) gets that token as its only candidate,
    with its real log-probability, whatever the bans say.

    Projecting a chunk of rows at a time keeps each chunk's logits in cache for the passes over
    them: log_softmax (one fused kernel, where logsumexp takes four passes)
    and `row_topk`. The normaliser includes PAD and BOS, which are masked only afterwards.
    A model that projects onto some columns only (a shortlist: `rules.OutputColumns`) is
    scored over those, and the tokens come back as vocabulary ids.
    """
    columns = output_columns(model)
    if columns is not None:
        rules = columns.narrow(rules)
    forced = rules.forced
    hidden, cross = model.step_hidden(prev, state, need_weights=alignment)
    lps, toks, eos = [], [], []
    for start, chunk in zip(range(0, len(hidden), ROWS_PER_CHUNK), hidden.split(ROWS_PER_CHUNK)):
        rows = slice(start, start + len(chunk))
        logits = model.project(chunk).float()
        rules.restrict_support(logits, start)
        if normalise:
            log_softmax_(logits)
            eos.append(logits[:, EOS])  # masking PAD and BOS below leaves this column
        force = forced[rows] if forced is not None else None
        force_lp = (
            logits.gather(1, force.clamp(min=0)[:, None])[:, 0] if force is not None else None
        )
        rules.ban(logits, start)
        logits[:, PAD] = float("-inf")
        logits[:, BOS] = float("-inf")
        top, tok = row_topk(logits, min(k, logits.size(-1)))
        if force is not None and force_lp is not None:
            on = force.ge(0)
            top[on] = float("-inf")
            top[on, 0] = force_lp[on]
            tok[on, 0] = force[on]
        lps.append(top)
        toks.append(tok)
    align = cross.mean(1).argmax(-1) if cross is not None else None  # (N,) source position
    tokens = torch.cat(toks) if columns is None else columns.ids[torch.cat(toks)]
    if not normalise:
        return None, tokens, None, align
    return torch.cat(lps), tokens, torch.cat(eos), align


@dataclass
class Sampling:
    """Draw each next token instead of taking the best (back-translation wants varied output).

    `topk` (0: all) and `topp` (nucleus; 1: all) restrict the draw to the most probable tokens,
    `temperature` flattens (> 1) or sharpens (< 1) it; `generator` makes it reproducible.
    """

    topk: int = 0
    topp: float = 1.0
    temperature: float = 1.0
    generator: torch.Generator | None = None


def sample_tokens(
    model: Transformer,
    prev: torch.Tensor,
    state: DecoderState,
    sampling: Sampling,
    rules: StepRules,
    *,
    alignment: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One drawn token per row (N,), its log-probability under the model (N,) (not the
    tempered one: scores stay comparable with search), EOS's log-probability, alignment.
    Tokens outside `rules`' support or banned are not drawn; a forced token is taken. A
    shortlist's model draws among its columns (see `top_tokens`)."""
    columns = output_columns(model)
    if columns is not None:
        rules = columns.narrow(rules)
    forced = rules.forced
    hidden, cross = model.step_hidden(prev, state, need_weights=alignment)
    logits = model.project(hidden).float()
    rules.restrict_support(logits)
    logp = log_softmax_(logits)
    eos_lp = logp[:, EOS].clone()
    logits = logp / sampling.temperature
    rules.ban(logits)
    logits[:, PAD] = float("-inf")
    logits[:, BOS] = float("-inf")
    if 0 < sampling.topk < logits.size(-1):
        kth = logits.topk(sampling.topk, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.topp < 1.0:
        sorted_l, order = logits.sort(dim=-1, descending=True)
        probs = torch.softmax(sorted_l, dim=-1)
        before = probs.cumsum(-1) - probs  # mass of the better tokens
        drop = before >= sampling.topp  # keeps the smallest set reaching topp (at least one)
        logits = logits.scatter(1, order, sorted_l.masked_fill(drop, float("-inf")))
    probs = torch.softmax(logits, dim=-1)
    tok = torch.multinomial(probs, 1, generator=sampling.generator)[:, 0]
    if forced is not None:
        tok = torch.where(forced.ge(0), forced, tok)
    align = cross.mean(1).argmax(-1) if cross is not None else None
    lp = logp.gather(1, tok[:, None])[:, 0]
    return tok if columns is None else columns.ids[tok], lp, eos_lp, align


def output_limits(
    src: torch.Tensor, prefix: torch.Tensor, a: float, b: int, max_positions: int
) -> torch.Tensor:
    """`max_lengths`, extended past a target prefix: the continuation gets at least b tokens."""
    limit = max_lengths(src, a, b, max_positions)
    if prefix.size(1) == 0:
        return limit
    floor = prefix.ne(PAD).sum(1) + min(b, max_positions)
    return torch.maximum(limit, floor).clamp(max=max_positions - 1)

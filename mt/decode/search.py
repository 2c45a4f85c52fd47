"""Greedy and beam search over a batch, knowing the model only through encode/start_state/step.

Both searches drop a sentence from the active batch as soon as it is finished, so the cost of a
batch follows its sentences rather than its longest one. Beam search is vectorised over
(sentences x beams): one `step` call per output position for the whole batch, the cache rows
reordered to follow the surviving beams. With beam size 1 it returns the greedy output.
"""

from __future__ import annotations

from collections.abc import Sequence, Sized
from dataclasses import dataclass, field

import torch

from mt.model import DecoderState, Transformer
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


def prefix_tensor(prefixes: list[list[int]] | None, n: int, device: torch.device) -> torch.Tensor:
    """(n, P) forced target tokens, PAD after each row's prefix (P = 0 without prefixes)."""
    rows = prefixes or [[] for _ in range(n)]
    width = max((len(p) for p in rows), default=0)
    out = torch.full((n, width), PAD, dtype=torch.long)
    for i, p in enumerate(rows):
        out[i, : len(p)] = torch.tensor(p, dtype=torch.long)
    return out.to(device)


def forced_at(prefix: torch.Tensor, rows: torch.Tensor, t: int) -> torch.Tensor | None:
    """Token each decoder row must emit at step `t` (-1 where free); None when none must."""
    if t >= prefix.size(1):
        return None
    tok = prefix[rows, t]
    return None if bool(tok.eq(PAD).all()) else tok.masked_fill(tok.eq(PAD), -1)


def repeated_ngram_bans(history: torch.Tensor, n: int) -> torch.Tensor | None:
    """(rows, W) tokens that would repeat an n-gram already in each row's `history` (PAD where
    none): the tokens that once followed the row's last n-1 tokens. Vectorised over rows, so
    a beam step costs a few tensor ops rather than a Python loop over hypotheses."""
    t = history.size(1)
    if n < 1 or t < n - 1 or (n > 1 and t < n):
        return None
    if n == 1:
        return history
    windows = history.unfold(1, n - 1, 1)[:, : t - n + 1]  # (rows, W, n-1) earlier contexts
    last = history[:, t - n + 1 :]  # (rows, n-1) the context now
    match = windows.eq(last[:, None, :]).all(-1)  # (rows, W)
    return torch.where(match, history[:, n - 1 :], PAD)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


ROWS_PER_CHUNK = 256  # rows of (rows x V) logits scored while they are still in cache
TOPK_BLOCK = 64  # columns per block in row_topk


def row_topk(x: torch.Tensor, k: int, block: int = TOPK_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """`x.topk(k, dim=-1)` (sorted) for a wide 2-D `x`, faster: 1.5-1.8 against 2.4 ms for
    k=10 on 256 x 8,000 (2 EPYC cores).

    torch's CPU topk costs ~1 ns per element; a max over contiguous blocks costs a tenth of
    that or less. The k largest entries of a row lie in the k blocks with the largest maxima
    (a block outside them has k larger block maxima above its own), so the exact top k is the
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


def _top_tokens(
    model: Transformer,
    prev: torch.Tensor,
    state: DecoderState,
    k: int,
    need_alignment: bool,
    normalise: bool = True,
    forced: torch.Tensor | None = None,
    banned: torch.Tensor | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Feed `prev` and return, per row, the `k` most probable next tokens other than PAD and
    BOS (N, k) with their log-probabilities (N, k), the log-probability of EOS (N,), and the
    most-attended source position if asked. Without `normalise` the two log-probability
    results are None and the log-softmax pass (an exp per row and vocabulary entry) is skipped.

    `banned` (N, W) token ids are excluded (no-repeat-ngram; PAD entries ban nothing new).
    A row with `forced` >= 0 (a target prefix) gets that token as its only candidate, with its
    real log-probability, whatever the bans say.

    Projecting a chunk of rows at a time keeps each chunk's logits in cache for the passes over
    them: log_softmax (one fused kernel, where logsumexp takes four passes)
    and `row_topk`. The normaliser includes PAD and BOS, which are masked only afterwards.
    """
    hidden, cross = model.step_hidden(prev, state, need_weights=need_alignment)
    lps, toks, eos = [], [], []
    for start, chunk in zip(range(0, len(hidden), ROWS_PER_CHUNK), hidden.split(ROWS_PER_CHUNK)):
        rows = slice(start, start + len(chunk))
        logits = model.project(chunk).float()
        if normalise:
            logits = torch.log_softmax(logits, dim=-1)
            eos.append(logits[:, EOS])  # masking PAD and BOS below leaves this column
        force = forced[rows] if forced is not None else None
        force_lp = (
            logits.gather(1, force.clamp(min=0)[:, None])[:, 0] if force is not None else None
        )
        if banned is not None:
            logits.scatter_(1, banned[rows], float("-inf"))
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
    if not normalise:
        return None, torch.cat(toks), None, align
    return torch.cat(lps), torch.cat(toks), torch.cat(eos), align


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


def _sample_tokens(
    model: Transformer,
    prev: torch.Tensor,
    state: DecoderState,
    sampling: Sampling,
    need_alignment: bool,
    forced: torch.Tensor | None,
    banned: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One drawn token per row (N,), its log-probability under the model (N,) (not the
    tempered one: scores stay comparable with search), EOS's log-probability, alignment."""
    hidden, cross = model.step_hidden(prev, state, need_weights=need_alignment)
    logp = torch.log_softmax(model.project(hidden).float(), dim=-1)
    eos_lp = logp[:, EOS].clone()
    logits = logp / sampling.temperature
    if banned is not None:
        logits.scatter_(1, banned, float("-inf"))
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
    return tok, logp.gather(1, tok[:, None])[:, 0], eos_lp, align


def _limits(
    src: torch.Tensor, prefix: torch.Tensor, a: float, b: int, max_positions: int
) -> torch.Tensor:
    """`max_lengths`, extended past a target prefix: the continuation gets at least b tokens."""
    limit = max_lengths(src, a, b, max_positions)
    if prefix.size(1) == 0:
        return limit
    floor = prefix.ne(PAD).sum(1) + min(b, max_positions)
    return torch.maximum(limit, floor).clamp(max=max_positions - 1)


@torch.inference_mode()
def greedy_search(
    model: Transformer,
    src: torch.Tensor,  # (B, S)
    max_len_a: float,
    max_len_b: int,
    need_alignment: bool = False,
    with_scores: bool = True,
    prefixes: list[list[int]] | None = None,
    no_repeat_ngram: int = 0,
    sampling: Sampling | None = None,
) -> list[Hypothesis]:
    """The most probable next token at each step (or a drawn one, with `sampling`). Without
    `with_scores` the scores are NaN and each step skips the log-normaliser, a pass with an
    exp over every (row, vocabulary) entry that only the score needs (translation output is
    the tokens). `prefixes[i]` (target ids) is forced as the start of output i."""
    B, dev = src.size(0), src.device
    prefix = prefix_tensor(prefixes, B, dev)
    limit = _limits(src, prefix, max_len_a, max_len_b, model.cfg.max_positions)
    memory, mask, _ = model.encode(src)
    state = model.start_state(memory, mask)
    active = torch.arange(B, device=dev)  # original row of each active row
    prev = torch.full((B,), BOS, dtype=torch.long, device=dev)
    history = torch.empty(B, 0, dtype=torch.long, device=dev)
    tokens: list[list[int]] = [[] for _ in range(B)]
    aligns: list[list[int]] = [[] for _ in range(B)]
    scores = [0.0] * B
    t = 0
    while active.numel():
        force = limit[active] <= t  # at the length limit only EOS may come
        forced = forced_at(prefix, active, t)
        banned = repeated_ngram_bans(history, no_repeat_ngram) if no_repeat_ngram else None
        if sampling is not None:
            tok, lp, eos_lp, align = _sample_tokens(
                model, prev, state, sampling, need_alignment, forced, banned
            )
            top_tok, top_lp = tok[:, None], lp[:, None]
        else:
            top_lp, top_tok, eos_lp, align = _top_tokens(
                model, prev, state, 1, need_alignment, with_scores, forced, banned
            )
        best = top_tok[:, 0].masked_fill(force, EOS)
        if top_lp is None or eos_lp is None:
            best_lp = torch.full(best.shape, float("nan"), device=best.device)
        else:
            best_lp = torch.where(force, eos_lp, top_lp[:, 0])
        done = best.eq(EOS)
        rows = active.tolist()
        for r, tok, lp, d, a in zip(
            rows,
            best.tolist(),
            best_lp.tolist(),
            done.tolist(),
            align.tolist() if align is not None else [0] * len(rows),
        ):
            scores[r] += lp
            if not d:
                tokens[r].append(tok)
                aligns[r].append(a)
        if done.all():
            break
        if no_repeat_ngram:
            history = torch.cat([history, best[:, None]], dim=1)
        if done.any():
            keep = (~done).nonzero().squeeze(1)
            state = state.select(keep)
            active, best, history = active[keep], best[keep], history[keep]
        prev = best
        t += 1
    return [Hypothesis(tokens[i], scores[i], aligns[i] if need_alignment else []) for i in range(B)]


class Beams:
    """The live part of a batched beam search, advanced the same way by plain and constrained
    search: the sentences still searching, their beams' scores and tokens, and the decoder
    state whose rows follow the beams (row r is beam r % width of active sentence r // width).

    The first step has one row per sentence (all beams of a sentence start from the same BOS,
    so width 1); its best K candidates become the K beams of every step after.
    """

    def __init__(self, model: Transformer, src: torch.Tensor) -> None:
        memory, mask, _ = model.encode(src)
        B, dev = src.size(0), src.device
        self.state = model.start_state(memory, mask)
        self.sent = torch.arange(B, device=dev)  # (n,) original index of each active sentence
        self.scores = torch.zeros(B, 1, device=dev)  # (n, width) log-probability so far
        self.history = torch.empty(B, 0, dtype=torch.long, device=dev)  # (n * width, t)

    @property
    def step(self) -> int:
        """Output position being chosen: the tokens each beam holds so far."""
        return self.history.size(1)

    @property
    def prev(self) -> torch.Tensor:
        """(n * width,) the token each row feeds next: its last one, or BOS at the start."""
        if self.step:
            return self.history[:, -1]
        return torch.full((self.history.size(0),), BOS, dtype=torch.long, device=self.sent.device)

    def endings(
        self,
        top_s: torch.Tensor,  # (n, 2K) candidate scores, in the order they are ranked
        rows: torch.Tensor,  # (n, 2K) state row each candidate extends
        tok: torch.Tensor,  # (n, 2K) candidate tokens
        K: int,
        alpha: float,
        finished: Sequence[Sized],
    ) -> list[tuple[int, int, float]]:
        """(sentence, row, length-normalised score) of each candidate among the first K that
        ends (EOS, finite score), while its sentence has fewer than K finished hypotheses
        (`finished[sentence]`, counted with the endings taken before it)."""
        ends = (tok[:, :K].eq(EOS) & top_s[:, :K].isfinite()).nonzero().tolist()
        if not ends:
            return []
        lp = length_penalty(self.step + 1, alpha)
        sent = self.sent.tolist()
        room = {sent[i]: K - len(finished[sent[i]]) for i, _ in ends}
        out = []
        for i, j in ends:
            if room[sent[i]] > 0:
                room[sent[i]] -= 1
                out.append((sent[i], int(rows[i, j]), float(top_s[i, j]) / lp))
        return out

    def advance(
        self,
        done: torch.Tensor,  # (n,) bool, sentences that stop here
        rows: torch.Tensor,  # (n, K) state row each next beam extends
        tok: torch.Tensor,  # (n, K) its token
        scores: torch.Tensor,  # (n, K) its score
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The sentences not `done` go on with K beams each. Returns the kept sentences (index
        into the old active ones) and the old rows the new rows come from, for a caller's own
        per-row state."""
        K = tok.size(1)
        keep = (~done).nonzero().squeeze(1)
        reorder = rows[keep].reshape(-1)
        if done.any():  # sentences leave: their encoder rows go too
            self.state = self.state.select(reorder, keep, group=K)
        else:
            self.state = self.state.reorder_caches(reorder, group=K)
        self.history = torch.cat([self.history[reorder], tok[keep].reshape(-1, 1)], dim=1)
        self.scores = scores[keep]
        self.sent = self.sent[keep]
        return keep, reorder


def continuing(tok: torch.Tensor, K: int) -> torch.Tensor:
    """(n, K) positions of the first K candidates (of the ranked `tok`, (n, 2K)) that do not
    end: the beams that go on. 2K candidates hold at least K such, as at most K end."""
    order = tok.eq(EOS).long() * tok.size(1) + torch.arange(tok.size(1), device=tok.device)
    return order.topk(K, dim=1, largest=False).indices


def only_eos(
    row_lp: torch.Tensor, row_tok: torch.Tensor, eos_lp: torch.Tensor, force: torch.Tensor
) -> None:
    """Rows at their length limit (`force`) get EOS as their only candidate, in place."""
    if force.any():
        row_lp[force] = float("-inf")
        row_lp[force, 0] = eos_lp[force]
        row_tok[force, 0] = EOS


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src: torch.Tensor,  # (B, S)
    beam: int,
    alpha: float,
    max_len_a: float,
    max_len_b: int,
    nbest: int = 1,
    need_alignment: bool = False,
    stop_early: bool = False,
    prefixes: list[list[int]] | None = None,
    no_repeat_ngram: int = 0,
) -> list[list[Hypothesis]]:
    """The `nbest` best hypotheses per sentence, by length-normalised log-probability.

    Each step ranks 2*beam candidates per sentence; EOS candidates among the top `beam` are
    finished, the best `beam` non-EOS candidates go on. A sentence stops once it has `beam`
    finished hypotheses (fairseq's rule, and HF's `early_stopping=True`), or reaches its length
    limit, where only EOS is allowed. With `stop_early` it stops as soon as its best candidate
    ends and it has `nbest` finished hypotheses (OpenNMT's and CTranslate2's rule): fewer
    steps, and a longer hypothesis that would have scored better after length normalisation
    is no longer waited for.

    `prefixes[i]` (target ids) is forced as the start of every hypothesis of sentence i, with
    its log-probability in the score; `no_repeat_ngram` N > 0 bans any n-gram of N tokens from
    occurring twice in a hypothesis.
    """
    B, K, dev = src.size(0), beam, src.device
    prefix = prefix_tensor(prefixes, B, dev)
    limit = _limits(src, prefix, max_len_a, max_len_b, model.cfg.max_positions)
    beams = Beams(model, src)
    align_hist = torch.empty(B, 0, dtype=torch.long, device=dev)
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    while beams.sent.numel():
        t, sent, history = beams.step, beams.sent, beams.history
        n, width = beams.scores.shape
        # A sentence's best 2K candidates over K x V are among its rows' best 2K each.
        forced = forced_at(prefix, sent.repeat_interleave(width), t)
        banned = repeated_ngram_bans(history, no_repeat_ngram) if no_repeat_ngram else None
        row_lp, row_tok, eos_lp, align = _top_tokens(
            model, beams.prev, beams.state, 2 * K, need_alignment, True, forced, banned
        )
        assert row_lp is not None and eos_lp is not None  # normalised by default
        C = row_lp.size(1)
        only_eos(row_lp, row_tok, eos_lp, (limit[sent] <= t).repeat_interleave(width))
        cand = (beams.scores[:, :, None] + row_lp.view(n, width, C)).view(n, width * C)
        top_s, top_j = cand.topk(min(2 * K, width * C), dim=1)  # (n, 2K)
        tok = row_tok.view(n, width * C).gather(1, top_j)
        rows = torch.arange(n, device=dev)[:, None] * width + top_j // C  # (n, 2K) row in state
        for s, row, score in beams.endings(top_s, rows, tok, K, alpha, finished):
            finished[s].append(Hypothesis(history[row].tolist(), score, align_hist[row].tolist()))
        pick = continuing(tok, K)
        need = [K] * n
        if stop_early:  # sentences whose best candidate just ended need only nbest
            top_ended = (tok[:, 0].eq(EOS) & top_s[:, 0].isfinite()).tolist()
            need = [nbest if e else K for e in top_ended]
        done = torch.tensor(
            [len(finished[s]) >= m for s, m in zip(sent.tolist(), need)], device=dev
        )
        done |= limit[sent] <= t
        if done.all():
            break
        _, reorder = beams.advance(
            done, rows.gather(1, pick), tok.gather(1, pick), top_s.gather(1, pick)
        )
        align_hist = align_hist[reorder]  # zero columns unless alignments are asked for
        if align is not None:
            align_hist = torch.cat([align_hist, align[reorder][:, None]], dim=1)
    out = []
    for hyps in finished:
        hyps.sort(key=lambda h: -h.score)
        out.append(hyps[:nbest])
    return out

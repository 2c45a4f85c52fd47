"""Greedy and beam search over a batch, knowing the model only through encode/start_state/step.

Both searches drop a sentence from the active batch as soon as it is finished, so the cost of a
batch follows its sentences rather than its longest one. Beam search is vectorised over
(sentences x beams): one `step` call per output position for the whole batch, the cache rows
reordered to follow the surviving beams. With beam size 1 it returns the greedy output. The
pieces of one step they share are in mt/search/steps.py; what restricts a step (a prefix,
no-repeat-ngram, and the caller's `rules`: protected spans, a target language) is a step rule
(mt/search/rules.py), which the search applies without knowing what it is.

Every search takes its settings as the one validated `DecodeConfig` (checked by
`mt.config_rules`), not as one argument per setting and not as a copy of some of its fields:
a new decode option is then its field, its rule and the lines of the search that reads it,
with no signature or call site in between to update. What varies per call rather than per
setting (alignments, scores, prefixes, sampling, rules) stays a keyword argument.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Sized
from typing import Any

import torch

from mt.config import DecodeConfig
from mt.model import Transformer
from mt.search.rules import Prefixes, Step, StepRule, reads_history, search_rules, step_rules
from mt.search.steps import (
    Hypothesis,
    Sampling,
    length_penalty,
    output_limits,
    sample_tokens,
    top_tokens,
)
from mt.tokenizer import BOS, EOS


@torch.inference_mode()
def greedy_search(
    model: Transformer,
    src: torch.Tensor,  # (B, S)
    cfg: DecodeConfig,
    *,
    alignment: bool = False,
    with_scores: bool = True,
    prefixes: list[list[int]] | None = None,
    sampling: Sampling | None = None,
    rules: Sequence[StepRule] = (),
) -> list[Hypothesis]:
    """The most probable next token at each step (or a drawn one, with `sampling`), within
    `cfg`'s length limit and n-gram rule (the beam settings are not read). Without
    `with_scores` the scores are NaN and each step skips the log-normaliser, a pass with an
    exp over every (row, vocabulary) entry that only the score needs (translation output is
    the tokens). `prefixes[i]` (target ids) is forced as the start of output i; `rules`
    (`mt.search.rules`) restrict what it may write."""
    B, dev = src.size(0), src.device
    prefix = Prefixes(prefixes, B, dev)
    limit = output_limits(src, prefix.prefix, cfg.max_len_a, cfg.max_len_b, model.cfg.max_positions)
    rules = search_rules(prefix, cfg.no_repeat_ngram, rules)
    keep_history = reads_history(rules)
    memory, mask, _ = model.encode(src)
    state = model.start_state(memory, mask)
    active = torch.arange(B, device=dev)  # original row of each active row
    prev = torch.full((B,), BOS, dtype=torch.long, device=dev)
    history = torch.empty(B, 0, dtype=torch.long, device=dev)
    # The output stays on the device until the end: position t of each row's tokens (and
    # alignments), its length so far and its summed score (float64: a sum of Python floats).
    # A step then reads one number back (how many rows finished), not every row's token.
    width = int(limit.max()) + 1 if B else 0  # at the limit only EOS may come
    tokens = torch.zeros(B, width, dtype=torch.long, device=dev)
    aligns = torch.zeros(B, width, dtype=torch.long, device=dev) if alignment else None
    lengths = torch.zeros(B, dtype=torch.long, device=dev)
    scores = torch.zeros(B, dtype=torch.float64, device=dev)
    t = 0
    parents = None  # the row of the step before each row extends, for rules that read it
    while active.numel():
        force = limit[active] <= t  # at the length limit only EOS may come
        said = step_rules(rules, Step(t, active, history, parents))
        if sampling is not None:
            tok, lp, eos_lp, align = sample_tokens(
                model, prev, state, sampling, said, alignment=alignment
            )
            top_tok, top_lp = tok[:, None], lp[:, None]
        else:
            top_lp, top_tok, eos_lp, align = top_tokens(
                model, prev, state, 1, said, alignment=alignment, normalise=with_scores
            )
        best = top_tok[:, 0].masked_fill(force, EOS)
        if top_lp is None or eos_lp is None:
            best_lp = torch.full(best.shape, float("nan"), device=best.device)
        else:
            best_lp = torch.where(force, eos_lp, top_lp[:, 0])
        done = best.eq(EOS)
        tokens[active, t] = best  # a finished row's EOS lies past its length
        if aligns is not None and align is not None:
            aligns[active, t] = align
        lengths[active] = t + (~done).long()
        scores.index_add_(0, active, best_lp.double())
        finished = int(done.sum())  # the step's one read from the device
        if finished == done.numel():
            break
        if keep_history:
            history = torch.cat([history, best[:, None]], dim=1)
        if finished:
            keep = (~done).nonzero().squeeze(1)
            state = state.select(keep)
            active, best, history = active[keep], best[keep], history[keep]
        if keep_history:
            parents = keep if finished else torch.arange(len(best), device=dev)
        prev = best
        t += 1
    ends, sums = lengths.tolist(), scores.tolist()
    rows = tokens.tolist()
    where = aligns.tolist() if aligns is not None else None
    return [
        Hypothesis(rows[i][: ends[i]], sums[i], where[i][: ends[i]] if where else [])
        for i in range(B)
    ]


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
        penalty: str = "gnmt",
        keep_best: bool = False,
        offset: int = 0,
    ) -> list[tuple[int, int, float]]:
        """(sentence, row, length-normalised score) of each candidate among the first K that
        ends (EOS, finite score), while its sentence has fewer than K finished hypotheses
        (`finished[sentence]`, counted with the endings taken before it); with `keep_best`
        every such candidate (the caller keeps the best K)."""
        ends = (tok[:, :K].eq(EOS) & top_s[:, :K].isfinite()).nonzero().tolist()
        if not ends:
            return []
        lp = length_penalty(self.step + 1 + offset, alpha, penalty)
        sent = self.sent.tolist()
        # Whole (n, K) blocks in one read each: an element read is a device round trip on CUDA.
        row_of, score_of = rows[:, :K].tolist(), top_s[:, :K].tolist()
        room = {sent[i]: K - (0 if keep_best else len(finished[sent[i]])) for i, _ in ends}
        out = []
        for i, j in ends:
            if room[sent[i]] > 0:
                room[sent[i]] -= 1
                out.append((sent[i], row_of[i][j], score_of[i][j] / lp))
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


def hf_done(
    finished: Sequence[list[Any]],
    sent: torch.Tensor,
    best_running: torch.Tensor,
    length: int,
    K: int,
    alpha: float,
    penalty: str,
    hypothesis: Callable[[Any], Hypothesis] = lambda h: h,
    rank: Callable[[Any], Any] = lambda h: -h.score,
) -> list[bool]:
    """HF generate's rule, per active sentence (`sent`): its finished entries cut to the best K
    by `rank` (in place), and whether it ends: it has K, and its best running beam's score
    (`best_running`) over the length so far is no better than the worst of them. An entry is
    a Hypothesis, or what `hypothesis` reads one from (constrained search keeps (phrases met,
    hypothesis) pairs and ranks by phrases met first)."""
    lp = length_penalty(length, alpha, penalty)
    out = []
    for s, best in zip(sent.tolist(), best_running.tolist()):
        hyps = finished[s]
        hyps.sort(key=rank)
        del hyps[K:]
        out.append(len(hyps) == K and hypothesis(hyps[-1]).score >= best / lp)
    return out


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
    cfg: DecodeConfig,
    *,
    alignment: bool = False,
    prefixes: list[list[int]] | None = None,
    rules: Sequence[StepRule] = (),
) -> list[list[Hypothesis]]:
    """The `nbest` best hypotheses per sentence, by length-normalised log-probability (every
    setting named here is a field of `cfg`).

    Each step ranks 2*beam candidates per sentence; EOS candidates among the top `beam` are
    finished, the best `beam` non-EOS candidates go on. A sentence stops once it has `beam`
    finished hypotheses (fairseq's rule, and HF's `early_stopping=True`), or reaches its length
    limit, where only EOS is allowed. With `stop_early` it stops as soon as its best candidate
    ends and it has `nbest` finished hypotheses (OpenNMT's and CTranslate2's rule): fewer
    steps, and a longer hypothesis that would have scored better after length normalisation
    is no longer waited for. With `hf_stopping`, HF generate's default rule: a better ending
    replaces the worst of K finished ones, and a sentence ends once it has K and its best
    running score over its length so far (`penalty`, counting `length_offset` tokens before the
    output) is no better than the worst of them, and
    the EOS forced at the length limit adds 0 to a score (its `forced_eos_token_id`).

    `prefixes[i]` (target ids) is forced as the start of every hypothesis of sentence i, with
    its log-probability in the score; `no_repeat_ngram` N > 0 bans any n-gram of N tokens from
    occurring twice in a hypothesis; `rules` (`mt.search.rules`) restrict what it may write.
    """
    B, K, dev = src.size(0), cfg.beam, src.device
    alpha, nbest, penalty, offset = cfg.alpha, cfg.nbest, cfg.penalty, cfg.length_offset
    prefix = Prefixes(prefixes, B, dev)
    limit = output_limits(src, prefix.prefix, cfg.max_len_a, cfg.max_len_b, model.cfg.max_positions)
    rules = search_rules(prefix, cfg.no_repeat_ngram, rules)
    beams = Beams(model, src)
    align_hist = torch.empty(B, 0, dtype=torch.long, device=dev)
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    reorder = None  # the row of the step before each row extends, for rules that read it
    while beams.sent.numel():
        t, sent, history = beams.step, beams.sent, beams.history
        n, width = beams.scores.shape
        # A sentence's best 2K candidates over K x V are among its rows' best 2K each.
        said = step_rules(rules, Step(t, sent.repeat_interleave(width), history, reorder))
        row_lp, row_tok, eos_lp, align = top_tokens(
            model, beams.prev, beams.state, 2 * K, said, alignment=alignment
        )
        assert row_lp is not None and eos_lp is not None  # normalised by default
        C = row_lp.size(1)
        # At the limit EOS keeps its log-probability; HF's forced_eos_token_id makes it 0.
        last_lp = torch.zeros_like(eos_lp) if cfg.hf_stopping else eos_lp
        only_eos(row_lp, row_tok, last_lp, (limit[sent] <= t).repeat_interleave(width))
        cand = (beams.scores[:, :, None] + row_lp.view(n, width, C)).view(n, width * C)
        top_s, top_j = cand.topk(min(2 * K, width * C), dim=1)  # (n, 2K)
        tok = row_tok.view(n, width * C).gather(1, top_j)
        rows = torch.arange(n, device=dev)[:, None] * width + top_j // C  # (n, 2K) row in state
        ended = beams.endings(
            top_s, rows, tok, K, alpha, finished, penalty, cfg.hf_stopping, offset
        )
        if ended:  # the ended rows' tokens in one read
            at = [row for _, row, _ in ended]
            for (s, _, score), toks, where in zip(
                ended, history[at].tolist(), align_hist[at].tolist()
            ):
                finished[s].append(Hypothesis(toks, score, where))
        pick = continuing(tok, K)
        need = [K] * n
        if cfg.stop_early:  # sentences whose best candidate just ended need only nbest
            top_ended = (tok[:, 0].eq(EOS) & top_s[:, 0].isfinite()).tolist()
            need = [nbest if e else K for e in top_ended]
        done = torch.tensor(
            [len(finished[s]) >= m for s, m in zip(sent.tolist(), need)], device=dev
        )
        if cfg.hf_stopping:
            best = top_s.gather(1, pick[:, :1])[:, 0]  # the best beam that goes on
            closed = hf_done(finished, sent, best, t + 1 + offset, K, alpha, penalty)
            done = torch.tensor(closed, dtype=torch.bool, device=dev)
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

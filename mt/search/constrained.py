"""Terminology constraints: beam search whose outputs must contain given target phrases.

Lexically constrained decoding with dynamic beam allocation (DBA; Post & Vilar, 2018), the
algorithm behind fairseq's `--constraints`. Each step a hypothesis may go on with its usual best
tokens and, in addition, with the next token of each phrase it has not yet produced, so a
phrase the model would never rank high can still enter the beam. Those forced candidates score
badly at first, so the beam is split into banks by how many constraint tokens a candidate has
met, and filled round-robin from the fullest bank down: a hypothesis that has just placed a
phrase competes with its own bank rather than with unconstrained ones. A hypothesis may end
only once all its phrases are in it (at the length limit the best one is returned anyway,
preferring the ones that met the most phrases).

A phrase that ends in a letter ends a word: with `WordEdges` (the target vocabulary's pieces
that continue a word, and those that end in a letter) the token after it may not continue the
word, so `hound` is not written as `houndsss` or `bar` as `baring` (a forced phrase is a
poor fit for the model, which otherwise glues pieces to it now and then). A phrase that ends
in a digit or a mark (a placeholder `Z00`, a number) may be glued to what follows.

Phrases are tracked token by token and in any order (fairseq's unordered tracker, without its
trie): a phrase in progress that the next token breaks starts over. Everything is vectorised
over (sentences x beams x candidates x phrases), so a step costs a few small tensor ops beyond
the model's; sentences without constraints get exactly `beam_search`'s result (ties aside).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mt.config import DecodeConfig
from mt.model import DecoderState, Transformer
from mt.search.beam import Beams, continuing, hf_done, only_eos
from mt.search.phrases import WordEdges, advance, banks, fit_mask, phrase_tensors
from mt.search.rules import Step, StepRule, StepRules, output_columns, step_rules
from mt.search.steps import ROWS_PER_CHUNK, Hypothesis, log_softmax_, max_lengths, row_topk
from mt.tokenizer import BOS, EOS, PAD

NEG = float("-inf")


def _expand(
    model: Transformer,
    prev: torch.Tensor,  # (R,)
    state: DecoderState,
    k: int,
    wanted: torch.Tensor,  # (R, C) tokens whose log-probability is asked for
    no_eos: torch.Tensor,  # (R,) bool, rows that may not end yet
    rules: StepRules | None = None,  # the step's rules (`mt.search.rules`)
    unglued: torch.Tensor | None = None,  # (R,) bool, rows whose next token starts a word
    glue: torch.Tensor | None = None,  # (V,) bool, the tokens that continue a word
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Feed `prev`; per row the `k` best tokens other than PAD/BOS (and EOS where `no_eos`)
    with their log-probabilities (R, k), the log-probabilities of `wanted` (R, C) and of EOS
    (R,). `search.top_tokens` returns only the top k, but the constraint tokens are needed
    wherever they rank (and whatever `rules` ban: a user's phrase is theirs to ask for), so
    this is its loop with one gather more; projecting a chunk of rows
    at a time keeps each chunk's logits in cache, as there. A shortlist's model is scored over
    its columns, which hold every constraint token (`rules.OutputColumns`)."""
    columns = output_columns(model)
    if columns is not None:
        rules = columns.narrow(rules) if rules is not None else None
        wanted = columns.to_columns(wanted)
        glue = glue[columns.ids] if glue is not None else None
    # The glued tokens' columns, banned in the unglued rows only: a (rows x V) mask built and
    # applied to every row cost a twentieth of a constrained search on the demo model.
    glued = glue.nonzero()[None, :, 0] if unglued is not None and glue is not None else None
    hidden, _ = model.step_hidden(prev, state)
    lps, toks, wanted_lps, eos = [], [], [], []
    for start, chunk in zip(range(0, len(hidden), ROWS_PER_CHUNK), hidden.split(ROWS_PER_CHUNK)):
        rows = slice(start, start + len(chunk))
        logp = model.project(chunk).float()
        if rules is not None:
            rules.restrict_support(logp, start)
        log_softmax_(logp)
        wanted_lps.append(logp.gather(1, wanted[rows]))
        eos_lp = logp[:, EOS].clone()
        eos.append(eos_lp)
        if rules is not None:
            rules.ban(logp, start)
        if unglued is not None and glued is not None:
            after_phrase = unglued[rows].nonzero()  # (r, 1)
            if after_phrase.numel():
                logp.index_put_((after_phrase, glued), logp.new_tensor(NEG))
        logp[:, PAD] = NEG
        logp[:, BOS] = NEG
        logp[:, EOS] = eos_lp.masked_fill(no_eos[rows], NEG)
        top, tok = row_topk(logp, min(k, logp.size(-1)))
        lps.append(top)
        toks.append(tok)
    tokens = torch.cat(toks) if columns is None else columns.ids[torch.cat(toks)]
    return torch.cat(lps), tokens, torch.cat(wanted_lps), torch.cat(eos)


def output_limits(
    src: torch.Tensor, lengths: torch.Tensor, a: float, b: int, max_positions: int
) -> torch.Tensor:
    """`max_lengths`, raised so that every constraint fits with room to spare: at least the
    constraint tokens plus max(b, 1) (as `search.output_limits` does for a prefix); still within the
    model's positions, so a phrase longer than that can never be met."""
    limit = max_lengths(src, a, b, max_positions)
    floor = lengths.sum(1) + min(max(b, 1), max_positions)
    return torch.maximum(limit, floor).clamp(max=max_positions - 1)


def candidates(
    scores: torch.Tensor,  # (n, width) the beams' scores so far
    row_lp: torch.Tensor,  # (R, 2K) each row's best tokens' log-probabilities
    row_tok: torch.Tensor,  # (R, 2K) those tokens
    con_lp: torch.Tensor,  # (R, C) the log-probability of each phrase's next token
    nxt: torch.Tensor,  # (R, C) each phrase's next token
    met: torch.Tensor,  # (R, C) bool, phrases met
    force: torch.Tensor,  # (R,) bool, rows at their length limit
    earlier: torch.Tensor,  # (C, C) bool, [i, j]: i < j (made once per search)
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's candidates (R, M) and their log-probabilities (R, M), -inf where a
    candidate is not one: the best 2K over the sentence, each row's best, and each unmet
    phrase's next token, once per row, unless it is among the row's own best tokens already
    (then that entry counts as its candidate)."""
    n, width = scores.shape
    K2 = row_lp.size(1)
    con_ok = ~met & ~force[:, None]
    dup = row_tok[:, :, None].eq(nxt[:, None, :]) & con_ok[:, None, :]  # (R, 2K, C)
    con_ok &= ~dup.any(1)
    same = nxt[:, :, None].eq(nxt[:, None, :]) & earlier & con_ok[:, :, None]
    con_ok &= ~same.any(1)
    top_part = scores[:, :, None] + row_lp.view(n, width, K2)
    keep = torch.zeros_like(top_part, dtype=torch.bool).view(n, -1)
    keep.scatter_(1, top_part.view(n, -1).topk(min(K2, keep.size(1)), dim=1).indices, True)
    keep = keep.view(-1, K2)
    keep[:, 0] = True
    keep |= dup.any(2)
    lp = torch.cat([row_lp.masked_fill(~keep, NEG), con_lp.masked_fill(~con_ok, NEG)], 1)
    return lp, torch.cat([row_tok, nxt], 1)


def dba_select(cand: torch.Tensor, bank: torch.Tensor, n_banks: int, k: int) -> torch.Tensor:
    """(n, k) the candidates (indices into `cand`'s columns) dynamic beam allocation keeps:
    rank within bank by score; take rank 0 of every bank (highest bank first), then rank 1,
    ...: equal shares, and a bank short of candidates leaves its share to the others. With no
    constraints there is one bank and this is the score order.

    Sorting by score, then (stably) by bank, groups each bank in score order; a candidate's
    rank is its distance from the start of its bank's run."""
    order = cand.sort(dim=1, descending=True, stable=True).indices
    live = cand.gather(1, order).isfinite()
    b_sorted, by_bank = (
        bank.gather(1, order).masked_fill(~live, -1).sort(dim=1, descending=True, stable=True)
    )
    order = order.gather(1, by_bank)
    pos = torch.arange(order.size(1), device=cand.device).expand_as(order)
    run_start = torch.ones_like(live)
    run_start[:, 1:] = b_sorted[:, 1:].ne(b_sorted[:, :-1])
    rank = pos - torch.where(run_start, pos, 0).cummax(1).values
    key = rank * n_banks + (n_banks - 1 - b_sorted)
    key = key.masked_fill(b_sorted.lt(0), 1 << 62)  # -inf candidates last
    return order.gather(1, key.topk(min(k, key.size(1)), dim=1, largest=False).indices)


def word_final_phrases(
    phrases: torch.Tensor, lengths: torch.Tensor, edges: WordEdges | None
) -> torch.Tensor:
    """(B, C) bool: the phrases whose end must be a word's end (their last token ends in a
    letter); none without `edges`."""
    if edges is None:
        return torch.zeros_like(lengths, dtype=torch.bool)
    last = phrases.gather(2, (lengths - 1).clamp(min=0)[:, :, None])[:, :, 0]
    return edges.letter_end[last] & lengths.gt(0)


@dataclass(frozen=True)
class Rows:
    """What each row of a step reads of its sentence (R = active sentences x width): built
    again only when a sentence leaves or the width changes, not at every step."""

    sent: torch.Tensor  # (R,) the sentence of each row
    phrases: torch.Tensor  # (R, C, L)
    lengths: torch.Tensor  # (R, C)
    word_final: torch.Tensor  # (R, C) bool
    limit: torch.Tensor  # (R,) the output length limit


def rows_of(
    sent: torch.Tensor,
    width: int,
    phrases: torch.Tensor,
    lengths: torch.Tensor,
    word_final: torch.Tensor,
    limit: torch.Tensor,
) -> Rows:
    """The `Rows` of active sentences `sent` (n,) with `width` beams each."""
    row_sent = sent.repeat_interleave(width)
    return Rows(
        row_sent, phrases[row_sent], lengths[row_sent], word_final[row_sent], limit[row_sent]
    )


def sentences_done(
    finished: list[list[tuple[int, Hypothesis]]],
    sent: torch.Tensor,
    going_on: torch.Tensor,  # (n, K) the scores of the beams that go on
    t: int,
    cfg: DecodeConfig,
) -> torch.Tensor:
    """(n,) bool: the active sentences that stop here, by `beam_search`'s rules: `beam`
    finished hypotheses, or with hf_stopping HF's rule (ranking by phrases met first)."""
    K = cfg.beam
    if cfg.hf_stopping:
        best = going_on.max(1).values  # the best beam that goes on
        closed = hf_done(
            finished, sent, best, t + 1 + cfg.length_offset, K, cfg.alpha, cfg.penalty,
            hypothesis=lambda mh: mh[1], rank=lambda mh: (-mh[0], -mh[1].score),
        )  # fmt: skip
        return torch.tensor(closed, dtype=torch.bool, device=sent.device)
    return torch.tensor([len(finished[s]) >= K for s in sent.tolist()], device=sent.device)


@torch.inference_mode()
def constrained_beam_search(
    model: Transformer,
    src: torch.Tensor,  # (B, S)
    constraints: list[list[list[int]]],
    cfg: DecodeConfig,
    *,
    rules: Sequence[StepRule] = (),
    edges: WordEdges | None = None,
) -> list[list[Hypothesis]]:
    """The `nbest` best hypotheses per sentence that contain every phrase of `constraints[i]`
    (target ids, see `phrase_ids`; an empty list: plain beam search), writing no token
    `rules` ban (`mt.search.rules`) but those of the phrases; with `edges`, a phrase that ends in a
    letter is not continued by a piece of the same word. Of `cfg` (the one validated settings
    object every search takes, see `mt.search.beam`) it reads beam, alpha, nbest, the length
    limit and the ending rules `beam_search` reads (penalty, length_offset, hf_stopping), so an
    imported model's HF decoding rules hold for its protected spans and numbers too. The
    translator refuses constraints with stop_early or no_repeat_ngram
    (`mt.decode_rules.can_constrain`).

    Scores are `beam_search`'s (log-probability including EOS over the length penalty).
    Candidates per step are fairseq's: the sentence's best 2*beam continuations, each
    hypothesis's best token, and each hypothesis's next token of every unmet phrase; they are
    ranked round-robin over the banks (constraint tokens met), highest bank first, and then
    treated as `beam_search` treats its 2*beam: EOS among the first `beam` ends a hypothesis
    (only possible once all phrases are met), the first `beam` others go on. A sentence stops
    with `beam` finished hypotheses (with hf_stopping: once its best running score can no
    longer beat the worst of them, `search.hf_done`) or at its length limit, where every hypothesis
    ends; the
    result is sorted by phrases met, then score, so an incomplete hypothesis comes back only
    when no complete one was found.
    """
    if len(constraints) != src.size(0):
        raise ValueError(f"{len(constraints)} constraint lists for {src.size(0)} sentences")
    B, K, dev = src.size(0), cfg.beam, src.device
    alpha, nbest, penalty, offset = cfg.alpha, cfg.nbest, cfg.penalty, cfg.length_offset
    phrases, lengths = phrase_tensors(constraints, dev)
    C = phrases.size(1)
    if int(phrases.max()) >= model.tgt_vocab:
        raise ValueError("a constraint token is outside the target vocabulary")
    n_banks = int(lengths.sum(1).max()) + 1
    limit = output_limits(src, lengths, cfg.max_len_a, cfg.max_len_b, model.cfg.max_positions)
    beams = Beams(model, src)
    progress = torch.zeros(B, C, dtype=torch.long, device=dev)  # per row, as in `advance`
    met = lengths.eq(0)  # empty slots are met from the start
    if edges is not None and edges.glue.numel() != model.tgt_vocab:  # a model's padded vocab
        edges = WordEdges(*(fit_mask(x, model.tgt_vocab) for x in (edges.glue, edges.letter_end)))
    word_final = word_final_phrases(phrases, lengths, edges)
    unglued = torch.zeros(B, dtype=torch.bool, device=dev)  # per row: a phrase just ended
    finished: list[list[tuple[int, Hypothesis]]] = [[] for _ in range(B)]  # (phrases met, hyp)
    earlier = torch.ones(C, C, dtype=torch.bool, device=dev).triu(1)  # [i, j]: i < j
    at, shape = rows_of(beams.sent, 1, phrases, lengths, word_final, limit), (B, 1)
    while beams.sent.numel():
        t, sent, scores = beams.step, beams.sent, beams.scores
        n, width = scores.shape
        if shape != (n, width):  # the same active sentences (they only leave, in order)
            at, shape = rows_of(sent, width, phrases, lengths, word_final, limit), (n, width)
        row_sent, r_phr, r_len = at.sent, at.phrases, at.lengths  # (R,), (R, C, L), (R, C)
        nxt = r_phr.gather(2, progress[:, :, None].clamp(max=r_phr.size(2) - 1))[:, :, 0]
        said = step_rules(rules, Step(t, row_sent, beams.history))
        glue = edges.glue if edges is not None and bool(unglued.any()) else None
        row_lp, row_tok, con_lp, eos_lp = _expand(
            model, beams.prev, beams.state, 2 * K, nxt, ~met.all(1), said, unglued, glue
        )
        force = at.limit <= t  # at the length limit only EOS, constraints or not
        # At the limit EOS keeps its log-probability; HF's forced_eos_token_id makes it 0.
        only_eos(row_lp, row_tok, torch.zeros_like(eos_lp) if cfg.hf_stopping else eos_lp, force)
        lp, tok = candidates(scores, row_lp, row_tok, con_lp, nxt, met, force, earlier)
        M = tok.size(1)
        cand = (scores[:, :, None] + lp.view(n, width, M)).view(n, width * M)
        new_prog, new_met = advance(progress, met, r_phr, r_len, tok)  # (R, M, C)
        # A candidate that completes a word-final phrase: the next token starts a word.
        ends = (new_met & ~met[:, None, :] & at.word_final[:, None, :]).any(2)  # (R, M)
        bank = banks(new_prog, new_met, r_len[:, None, :]).view(n, width * M)
        sel = dba_select(cand, bank, n_banks, 2 * K)
        top_s = cand.gather(1, sel)  # (n, 2K) in DBA order
        rows = torch.arange(n, device=dev)[:, None] * width + sel // M  # row in state
        flat = rows * M + sel % M  # candidate index into (R * M)
        tok_sel = tok.view(-1)[flat]
        ended = beams.endings(
            top_s, rows, tok_sel, K, alpha, finished, penalty, cfg.hf_stopping, offset
        )
        if ended:
            n_met = (met & r_len.gt(0)).sum(1)  # phrases met by each row before its EOS
            for s, row, score in ended:
                hyp = Hypothesis(beams.history[row].tolist(), score)
                finished[s].append((int(n_met[row]), hyp))
        pick = continuing(tok_sel, K)
        done = sentences_done(finished, sent, top_s.gather(1, pick), t, cfg)
        done |= limit[sent] <= t
        if done.all():
            break
        keep_s, _ = beams.advance(
            done, rows.gather(1, pick), tok_sel.gather(1, pick), top_s.gather(1, pick)
        )
        chosen = flat.gather(1, pick)[keep_s].reshape(-1)
        progress = new_prog.view(-1, C)[chosen]
        met = new_met.view(-1, C)[chosen]
        unglued = ends.view(-1)[chosen]
    out = []
    for hyps in finished:
        hyps.sort(key=lambda mh: (-mh[0], -mh[1].score))
        out.append([h for _, h in hyps[:nbest]])
    return out

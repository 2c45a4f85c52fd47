"""Step rules: what restricts the tokens the rows of a search step may write, as one protocol.

Every search (greedy, sampling, beam, constrained; one model or an ensemble) asks each of its
rules once per step and applies what they say to the step's logits; a rule that comes from
outside the search (protected spans in `mt.spans.bans`, a target language's guard in
`mt.translation.target`, a glossary's or a shortlist's) is written against this protocol and
handed in by the caller, so the search imports none of them. This is the place HF gives its
`LogitsProcessor`s and fairseq its search strategies. The search's own rules live here: a
target prefix (`Prefixes`) and no-repeat-ngram (`NoRepeat`).

A model may project onto some of the vocabulary only (a lexical shortlist, mt.translate.
shortlist): its `output_columns` (`OutputColumns`) name the vocabulary id of each column of its
`project`. The search then scores, ranks and draws in that narrower space, which is what makes
a shortlist pay (a mask over the full logits would leave the full product and every pass over
it), and maps what it chose back to vocabulary ids; the rules' answers, written in vocabulary
ids, are mapped into the columns (`OutputColumns.narrow`), so no rule needs to know.

A rule's answer, a `Restriction`, says four things, each applied where its meaning needs:
- `support`: tokens outside the distribution, masked before the log-softmax, so the other
  tokens' probabilities are renormalised over what remains (a target language's own pieces:
  a guard that only banned would leave scores that count the mass of the other languages);
- `boost`: tokens made likelier, a bonus added to their logits before the log-softmax (a
  glossary's target pieces: the search then scores a distribution that favours them, still a
  distribution, and the model still chooses their inflection and place);
- `ban`: tokens a row may not write, masked after it, so the scores stay the model's;
- `forced`: the token a row must write (a target prefix), which it writes with its real
  log-probability whatever is banned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from mt.tokenizer import PAD


class TokenMask(Protocol):
    """Tokens banned for the rows of one step, set to -inf in a chunk of its logits."""

    def apply(self, logits: torch.Tensor, start: int = 0) -> None:
        """Set the banned entries of `logits` (N, V), rows `start` to `start + N` of the step,
        to -inf, in place."""
        ...


@dataclass(frozen=True)
class Step:
    """What a rule may read of one step: its position `t`, each row's sentence `sent` (R,)
    (an index into the batch), the tokens each row wrote so far `history` (R, t), and
    `parents` (R,), the row of step `t - 1` each row extends, where the search knows it."""

    t: int
    sent: torch.Tensor
    history: torch.Tensor
    parents: torch.Tensor | None = None


@dataclass(frozen=True)
class Restriction:
    """One rule's answer for one step (see the module docstring); None fields say nothing."""

    support: TokenMask | None = None
    ban: TokenMask | None = None
    forced: torch.Tensor | None = None  # (R,) the token each row must write, -1 where free
    boost: Boost | None = None


class StepRule(Protocol):
    """A restriction a search applies at every step. `reads_history`: the rule reads `Step.
    history` and `parents` (a greedy search keeps them only when some rule does)."""

    reads_history: bool

    def restrict(self, step: Step) -> Restriction | None:
        """This step's restriction; None where the rule restricts nothing."""
        ...


@dataclass(frozen=True)
class StepRules:
    """All rules' answers for one step, as `top_tokens` and `sample_tokens` apply them:
    `support` masks and `boosts` add before the log-softmax, `bans` mask after it, `forced`
    (R,) or None."""

    support: tuple[TokenMask, ...] = ()
    bans: tuple[TokenMask, ...] = ()
    forced: torch.Tensor | None = None
    boosts: tuple[Boost, ...] = ()

    def restrict_support(self, logits: torch.Tensor, start: int = 0) -> None:
        """The support's masks, then the boosts (a banned token stays banned: -inf + x)."""
        for mask in self.support:
            mask.apply(logits, start)
        for boost in self.boosts:
            boost.apply(logits, start)

    def ban(self, logits: torch.Tensor, start: int = 0) -> None:
        for mask in self.bans:
            mask.apply(logits, start)


def step_rules(rules: Sequence[StepRule], step: Step) -> StepRules:
    """Every rule's answer for `step`, gathered. Two rules forcing the same row: the later
    one's token (of the rules here, only the search's own prefix forces)."""
    support: list[TokenMask] = []
    bans: list[TokenMask] = []
    boosts: list[Boost] = []
    forced = None
    for rule in rules:
        said = rule.restrict(step)
        if said is None:
            continue
        if said.support is not None:
            support.append(said.support)
        if said.ban is not None:
            bans.append(said.ban)
        if said.boost is not None:
            boosts.append(said.boost)
        if said.forced is not None:
            forced = (
                said.forced
                if forced is None
                else torch.where(said.forced.ge(0), said.forced, forced)
            )
    return StepRules(tuple(support), tuple(bans), forced, tuple(boosts))


def reads_history(rules: Sequence[StepRule]) -> bool:
    return any(rule.reads_history for rule in rules)


@dataclass(frozen=True)
class Columns:
    """The same tokens banned in every row: a fill of their few columns rather than a pass
    over every entry."""

    cols: torch.Tensor  # (C,) long

    @staticmethod
    def of(mask: torch.Tensor) -> Columns:
        """From a (V,) bool mask, True where banned."""
        return Columns(mask.nonzero().squeeze(1))

    def apply(self, logits: torch.Tensor, start: int = 0) -> None:
        if len(self.cols):
            logits.index_fill_(1, self.cols, float("-inf"))


@dataclass(frozen=True)
class Boost:
    """`bonus` added to the logits of tokens per row: `tokens` (R, W) ids, PAD entries adding
    nothing. A token named twice in a row gets the bonus once."""

    tokens: torch.Tensor
    bonus: float

    def apply(self, logits: torch.Tensor, start: int = 0) -> None:
        idx = self.tokens[start : start + len(logits)]
        raised = logits.gather(1, idx) + idx.ne(PAD).to(logits.dtype) * self.bonus
        logits.scatter_(1, idx, raised)  # a token named twice: the same value written twice


@dataclass(frozen=True)
class Scattered:
    """Tokens banned per row: `banned` (R, W) ids, PAD entries banning nothing new."""

    banned: torch.Tensor

    def apply(self, logits: torch.Tensor, start: int = 0) -> None:
        logits.scatter_(1, self.banned[start : start + len(logits)], float("-inf"))


class Prefixes:
    """A target prefix per sentence, forced as the start of its output: `prefix` (B, P)
    target ids, PAD after each sentence's prefix (P = 0: none)."""

    reads_history = False

    def __init__(self, prefixes: list[list[int]] | None, n: int, device: torch.device) -> None:
        rows = prefixes or [[] for _ in range(n)]
        width = max((len(p) for p in rows), default=0)
        out = torch.full((n, width), PAD, dtype=torch.long)
        for i, p in enumerate(rows):
            out[i, : len(p)] = torch.tensor(p, dtype=torch.long)
        self.prefix = out.to(device)

    def restrict(self, step: Step) -> Restriction | None:
        if step.t >= self.prefix.size(1):
            return None
        tok = self.prefix[step.sent, step.t]
        if bool(tok.eq(PAD).all()):
            return None
        return Restriction(forced=tok.masked_fill(tok.eq(PAD), -1))


class NoRepeat:
    """No n-gram of `n` tokens twice in a row's output: the tokens that once followed the
    row's last n-1 tokens are banned. Vectorised over rows, so a beam step costs a few tensor
    ops rather than a Python loop over hypotheses."""

    reads_history = True

    def __init__(self, n: int) -> None:
        self.n = n

    def restrict(self, step: Step) -> Restriction | None:
        banned = repeated_ngram_bans(step.history, self.n)
        return None if banned is None else Restriction(ban=Scattered(banned))


def repeated_ngram_bans(history: torch.Tensor, n: int) -> torch.Tensor | None:
    """(rows, W) tokens that would repeat an n-gram already in each row's `history` (PAD where
    none): the tokens that once followed the row's last n-1 tokens."""
    t = history.size(1)
    if n < 1 or t < n - 1 or (n > 1 and t < n):
        return None
    if n == 1:
        return history
    windows = history.unfold(1, n - 1, 1)[:, : t - n + 1]  # (rows, W, n-1) earlier contexts
    last = history[:, t - n + 1 :]  # (rows, n-1) the context now
    match = windows.eq(last[:, None, :]).all(-1)  # (rows, W)
    return torch.where(match, history[:, n - 1 :], PAD)


def search_rules(
    prefixes: Prefixes | None, no_repeat_ngram: int, given: Sequence[StepRule]
) -> list[StepRule]:
    """The rules a plain search applies: its prefix and n-gram rules, then the caller's."""
    own: list[StepRule] = [prefixes] if prefixes is not None and prefixes.prefix.size(1) else []
    if no_repeat_ngram:
        own.append(NoRepeat(no_repeat_ngram))
    return own + list(given)


@dataclass(frozen=True)
class Widened:
    """A mask of some other kind applied to narrowed logits: it is applied to a (N, V) row of
    zeros, and what it set to -inf is read back at the columns. A pass over the full width,
    paid only for a mask that cannot be mapped into the columns itself."""

    mask: TokenMask
    cols: OutputColumns

    def apply(self, logits: torch.Tensor, start: int = 0) -> None:
        wide = logits.new_zeros(len(logits), len(self.cols.column))
        self.mask.apply(wide, start)
        logits.masked_fill_(wide.index_select(1, self.cols.ids).isneginf(), float("-inf"))


@dataclass(frozen=True)
class OutputColumns:
    """The vocabulary ids `ids` (C,) that the columns of a narrowed model's `project` stand for,
    ascending, PAD, UNK, BOS and EOS first: those four are then their own columns, so a search
    names them alike in either space. `column` (V,): each id's column, -1 outside."""

    ids: torch.Tensor
    column: torch.Tensor

    @staticmethod
    def of(ids: torch.Tensor, vocab: int) -> OutputColumns:
        """From the ascending, distinct `ids` (C,) of a vocabulary of `vocab` entries."""
        head = torch.arange(min(4, len(ids)), device=ids.device)
        if len(ids) < 4 or not bool(ids[:4].eq(head).all()):
            raise ValueError("output columns must start with PAD, UNK, BOS and EOS")
        column = torch.full((vocab,), -1, dtype=torch.long, device=ids.device)
        column[ids] = torch.arange(len(ids), device=ids.device)
        return OutputColumns(ids, column)

    def to_columns(self, tokens: torch.Tensor) -> torch.Tensor:
        """Vocabulary ids -> columns; an id outside the columns is a caller's bug (a forced or
        constraint token must be among them), refused."""
        out = self.column[tokens]
        if bool(out.lt(0).any()):
            raise ValueError("a forced or constraint token is outside the output columns")
        return out

    def mask(self, mask: TokenMask) -> TokenMask:
        """`mask` (in vocabulary ids) for the columns: the search's own kinds mapped directly,
        others `Widened`."""
        if isinstance(mask, Columns):
            kept = self.column[mask.cols]
            return Columns(kept[kept.ge(0)])
        if isinstance(mask, Scattered):
            # An id outside the columns bans PAD's column instead, which no row writes anyway.
            return Scattered(self.column[mask.banned].clamp(min=PAD))
        return Widened(mask, self)

    def narrow(self, rules: StepRules) -> StepRules:
        """A step's rules as they apply to narrowed logits."""
        forced = rules.forced
        if forced is not None:
            on = forced.ge(0)
            forced = torch.where(on, self.to_columns(forced.clamp(min=0)), -1)
        # A boosted id outside the columns points at PAD's column, which adds nothing.
        boosts = tuple(Boost(self.column[b.tokens].clamp(min=PAD), b.bonus) for b in rules.boosts)
        return StepRules(
            tuple(self.mask(m) for m in rules.support),
            tuple(self.mask(m) for m in rules.bans),
            forced,
            boosts,
        )


def output_columns(model: object) -> OutputColumns | None:
    """The columns a model's `project` writes, where it narrows them (else None: all)."""
    return getattr(model, "output_columns", None)

"""Several models decoding as one: at each step their next-token log-probabilities are averaged.

Search knows a model only through `encode`, `start_state`, `step_hidden`, `project`,
`tgt_vocab` and `cfg.max_positions`, so an `Ensemble` offers exactly those (and `forward` for
forced decoding) and greedy, beam and constrained
search, sampling and prefixes all work on it unchanged. The members may differ in shape (width,
depth, seed) but must share the target vocabulary, which the caller checks through the
tokenizers. The average of log-probabilities is renormalised by search's log-softmax: the
ensemble distribution is the normalised geometric mean of the members' (a product of experts),
which rewards tokens every member agrees on.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from mt.model import DecoderState, Transformer
from mt.search.steps import log_softmax_


@dataclasses.dataclass
class EnsembleState:
    """One DecoderState per member, reordered together as search keeps or drops rows."""

    states: list[DecoderState]

    def select(
        self,
        index: torch.Tensor,
        memory_index: torch.Tensor | None = None,
        group: int | None = None,
    ) -> EnsembleState:
        return EnsembleState([s.select(index, memory_index, group) for s in self.states])

    def reorder_caches(self, index: torch.Tensor, group: int | None = None) -> EnsembleState:
        return EnsembleState([s.reorder_caches(index, group) for s in self.states])


class Ensemble(nn.Module):
    def __init__(self, members: list[Transformer]) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one model")
        self.members = nn.ModuleList(members)
        # The shortest positional table bounds input and output for all.
        self.cfg = dataclasses.replace(
            members[0].cfg, max_positions=min(m.cfg.max_positions for m in members)
        )
        self.widths = [m.cfg.d_model for m in members]
        self.tgt_vocab = members[0].tgt_vocab

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced mean of the members' log-probabilities (B, T, V), as `project` gives
        one step of them: forced decoding (`mt score`) of an ensemble scores what it decodes."""
        total = None
        for m in self.members:
            logp = torch.log_softmax(m(src, tgt_in).float(), dim=-1)
            total = logp if total is None else total + logp
        assert total is not None
        return total / len(self.members)

    def encode(
        self, src: torch.Tensor, need_weights: bool = False
    ) -> tuple[list[torch.Tensor], torch.Tensor, list[torch.Tensor]]:
        """Each member's memory (a list), the shared source mask, no weights."""
        memories = []
        mask = None
        for m in self.members:
            memory, mask, _ = m.encode(src)
            memories.append(memory)
        assert mask is not None
        return memories, mask, []

    def start_state(
        self, memories: list[torch.Tensor], memory_mask: torch.Tensor, group: int = 1
    ) -> EnsembleState:
        return EnsembleState(
            [m.start_state(x, memory_mask, group) for m, x in zip(self.members, memories)]
        )

    def step_hidden(
        self, tokens: torch.Tensor, state: EnsembleState, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The members' decoder outputs side by side (B, sum of widths), so search can cut them
        into row chunks as it does one model's; cross-attention averaged over members."""
        hidden, cross = [], []
        for m, s in zip(self.members, state.states):
            h, c = m.step_hidden(tokens, s, need_weights)
            hidden.append(h)
            if c is not None:
                cross.append(c)
        weights = torch.stack(cross).mean(0) if cross else None
        return torch.cat(hidden, dim=-1), weights

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """Mean of the members' log-probabilities (..., V); search renormalises it."""
        parts = hidden.split(self.widths, dim=-1)
        total = None
        for m, h in zip(self.members, parts):
            logp = log_softmax_(m.project(h).float())
            total = logp if total is None else total + logp
        assert total is not None
        return total / len(self.members)

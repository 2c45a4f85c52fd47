"""What the decoder carries from one search step to the next, and how it is laid out.

Kept apart from mt/model.py (which builds it in `start_state` and reads it in `step`) because
search reorders it: rows follow the surviving beams and leave with finished sentences.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch


def step_layout(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Encoder keys and values (B, H, S, D/H) as the decoding steps read them: k stored
    transposed (`k.transpose(-2, -1)` is contiguous) and v contiguous, so each step's
    `q @ k^T` and `weights @ v` read them in place. The projection's views of one fused
    (B, S, 2, H, D/H) tensor were copied into that same layout by every step of every layer
    (6% of a greedy decode at OPUS-MT's base shape); now once per sentence. Same values, same
    arithmetic."""
    return k.transpose(-2, -1).contiguous().transpose(-2, -1), v.contiguous()


@dataclass
class DecoderState:
    """Everything `Transformer.step` needs between steps, batch-first so search can reorder it.

    The decoder has `group` rows per encoder row (beam search: the beams of a sentence, in
    consecutive rows); greedy search has one.
    """

    memory_mask: torch.Tensor  # (B, 1, 1, S) True where the source is a real token
    memory_kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer, (B, H, S, D/H) each
    caches: list[dict[str, torch.Tensor]] = field(default_factory=list)  # per layer self k/v
    length: int = 0  # target tokens fed so far
    group: int = 1  # decoder rows per encoder row

    def select(
        self,
        index: torch.Tensor,
        memory_index: torch.Tensor | None = None,
        group: int | None = None,
    ) -> DecoderState:
        """Keep decoder rows `index` (in that order): beams that survive, sentences not yet
        finished; and encoder rows `memory_index` (default `index`, which needs group 1).
        `group` is the decoder rows per encoder row afterwards (default: unchanged)."""
        if memory_index is None:
            if self.group != 1:
                raise ValueError("select: memory_index is needed when group > 1")
            memory_index = index
        return replace(
            self.reorder_caches(index, group),
            memory_mask=self.memory_mask.index_select(0, memory_index),
            memory_kv=[
                (
                    k.transpose(-2, -1).index_select(0, memory_index).transpose(-2, -1),
                    v.index_select(0, memory_index),
                )
                for k, v in self.memory_kv
            ],  # in `step_layout` still
        )

    def reorder_caches(self, index: torch.Tensor, group: int | None = None) -> DecoderState:
        """Reorder the decoder caches only, for beams that move within their sentence (or, with
        `group`, become that many beams of it: beam search's first step)."""
        return replace(
            self,
            caches=[{n: t.index_select(0, index) for n, t in c.items()} for c in self.caches],
            group=self.group if group is None else group,
        )

"""What the decoder carries from one search step to the next, and how it is laid out.

Kept apart from mt/model.py (which builds it in `start_state` and reads it in `step`) because
search reorders it: rows follow the surviving beams and leave with finished sentences.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch


def step_layout(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Encoder keys and values (B, H, S, D/H) as the decoding steps read them, made once per
    sentence instead of by every step of every layer (the projection's views of one fused
    (B, S, 2, H, D/H) tensor were copied by each step of every layer). Same values, same
    arithmetic.

    On a CPU, steps take `attend`'s spelled-out path, so k is stored transposed
    (`k.transpose(-2, -1)` is contiguous) and `q @ k^T` reads it in place. On a GPU, steps go
    through SDPA, whose fused kernels (flash, memory-efficient, cuDNN) need each row's last
    dimension contiguous. Given the transposed k, SDPA fell back to its unfused math kernel,
    a large share of a GPU decode's host time (docs/studies/on-a-gpu.md), so there both stay
    plainly contiguous. v is contiguous everywhere."""
    if k.device.type == "cpu":
        return k.transpose(-2, -1).contiguous().transpose(-2, -1), v.contiguous()
    return k.contiguous(), v.contiguous()


def select_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows `index` of a (B, H, S, D/H) tensor, in the layout `x` has (`step_layout`)."""
    if x.is_contiguous():
        return x.index_select(0, index)
    return x.transpose(-2, -1).index_select(0, index).transpose(-2, -1)


@dataclass
class SelfCache:
    """One decoder layer's self-attention keys and values of the steps so far.

    They live in the first `length` positions of buffers (rows, H, room, D/H) with room for
    later steps, doubled when full, so a step writes its one position instead of copying the
    whole cache into a new tensor (`torch.cat`, a copy that grows with every step;
    docs/studies/importing.md).
    Reordering rows (beams, finished sentences) copies the kept positions into a spare pair of
    buffers, which then swap with the current ones: the cache selected from is spent (stepping
    or selecting it again raises), as search always goes on from the state `select` returns.
    Attention reads `k` and `v`, views of the filled positions, in place."""

    k_buf: torch.Tensor | None = None
    v_buf: torch.Tensor | None = None
    length: int = 0
    spare: tuple[torch.Tensor, torch.Tensor] | None = None  # the last buffers reordered from
    spent: bool = False  # selected from: its buffers are now another cache's spares

    @property
    def k(self) -> torch.Tensor:  # (rows, H, length, D/H)
        assert self.k_buf is not None, "empty cache"
        return self.k_buf[:, :, : self.length]

    @property
    def v(self) -> torch.Tensor:
        assert self.v_buf is not None, "empty cache"
        return self.v_buf[:, :, : self.length]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the keys and values (rows, H, T, D/H) of T new positions; returns all so far."""
        self._check()
        end = self.length + k.size(2)
        if self.k_buf is None or self.v_buf is None or end > self.k_buf.size(2):
            self.k_buf, self.v_buf = (
                self._grown(b, n, end) for b, n in ((self.k_buf, k), (self.v_buf, v))
            )
            self.spare = None
        self.k_buf[:, :, self.length : end] = k
        self.v_buf[:, :, self.length : end] = v
        self.length = end
        return self.k, self.v

    def _grown(self, buf: torch.Tensor | None, new: torch.Tensor, end: int) -> torch.Tensor:
        """A buffer with room for at least twice `end` positions, holding what `buf` holds."""
        rows, heads, _, width = new.shape
        out = new.new_empty(rows, heads, max(16, 2 * end), width)
        if buf is not None and self.length:
            out[:, :, : self.length] = buf[:, :, : self.length]
        return out

    def select(self, index: torch.Tensor) -> SelfCache:
        """The rows `index` (in that order), in the spare buffers where they fit."""
        self._check()
        if self.k_buf is None or self.v_buf is None:
            return SelfCache()
        shape = (len(index), *self.k_buf.shape[1:])
        if self.spare is not None and self.spare[0].shape == shape:
            k_new, v_new = self.spare
        else:
            k_new, v_new = self.k_buf.new_empty(shape), self.v_buf.new_empty(shape)
        t = self.length
        torch.index_select(self.k, 0, index, out=k_new[:, :, :t])
        torch.index_select(self.v, 0, index, out=v_new[:, :, :t])
        self.spent = True
        return SelfCache(k_new, v_new, t, (self.k_buf, self.v_buf))

    def _check(self) -> None:
        if self.spent:
            raise ValueError("this decoder cache was selected from: go on from what select gave")


@dataclass
class RecurrentCache:
    """An SSRU layer's running state (rows, D) after the steps so far (mt/ssru.py): one vector
    per row, whatever the output's length; None before the first step."""

    c: torch.Tensor | None = None

    def select(self, index: torch.Tensor) -> RecurrentCache:
        """The rows `index` (in that order)."""
        return RecurrentCache(None if self.c is None else self.c.index_select(0, index))


@dataclass
class DecoderState:
    """Everything `Transformer.step` needs between steps, batch-first so search can reorder it.

    The decoder has `group` rows per encoder row (beam search: the beams of a sentence, in
    consecutive rows); greedy search has one.
    """

    memory_mask: torch.Tensor  # (B, 1, 1, S) True where the source is a real token
    memory_kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer, (B, H, S, D/H) each
    # per layer: self-attention keys/values, or an SSRU's running state
    caches: list[SelfCache | RecurrentCache] = field(default_factory=list)
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
                (select_rows(k, memory_index), v.index_select(0, memory_index))
                for k, v in self.memory_kv
            ],  # in `step_layout` still
        )

    def reorder_caches(self, index: torch.Tensor, group: int | None = None) -> DecoderState:
        """Reorder the decoder caches only, for beams that move within their sentence (or, with
        `group`, become that many beams of it: beam search's first step)."""
        return replace(
            self,
            caches=[c.select(index) for c in self.caches],
            group=self.group if group is None else group,
        )

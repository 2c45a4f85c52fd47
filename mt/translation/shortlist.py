"""A model seen through a lexical shortlist (`decode.shortlist`): its output layer narrowed to a
batch's candidates (mt.shortlist).

`Shortlisted` sits between the search and the model, as `TargetLanguage` does: its `project`
multiplies the decoder's output by the candidates' rows of the output matrix only, and its
`output_columns` tell the search which vocabulary id each column is, so the search scores,
ranks and draws among the candidates and maps its choices back (mt.search.rules.OutputColumns);
every step rule still speaks in vocabulary ids. Masking the full logits instead would save
nothing: the product over the whole vocabulary, and each pass over its logits, would remain.

The candidates' rows are taken once per batch. An int8 decode's output layer (mt.runtime.int8)
keeps its matrix as int8 values and a scale: its rows are cut from those values and packed again,
so the narrowed product runs in int8 as the full layer did, and each candidate's logit is the
one the full int8 layer gives it (a product in fp32 instead cost the int8 decode of a 4k-piece
student more than the rows it saved: docs/studies/distillation.md). Any other decode (fp32,
bf16, oneDNN's packed copy, which cannot be cut by rows) multiplies the model's fp32 rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.ao.nn.quantized import dynamic as quantized_dynamic

from mt.search.rules import OutputColumns
from mt.search.steps import log_softmax_


@dataclass(frozen=True)
class Int8Rows:
    """An int8 output layer's matrix as torch's dynamic quantisation holds it: `values` (V, D)
    int8 with one scale and zero point (`per_row` None) or one per row (`per_row`: scales and
    zero points, (V,) each), and whether its products quantise activations to 7 bits
    (`reduce_range`, as the layer itself calls them)."""

    values: torch.Tensor
    scale: float
    zero_point: int
    per_row: tuple[torch.Tensor, torch.Tensor] | None
    reduce_range: bool

    @staticmethod
    def of(layer: nn.Module) -> Int8Rows | None:
        """`layer`'s int8 matrix, or None where it is not a dynamically quantised int8 Linear
        (or its quantisation is one this cannot cut by rows)."""
        if not isinstance(layer, quantized_dynamic.Linear):
            return None
        if layer._packed_params.dtype != torch.qint8:  # a float16 dynamic layer
            return None
        weight = layer.weight()
        reduce_range = (getattr(layer, "version", None) or 0) >= 4
        scheme = weight.qscheme()
        if scheme in (torch.per_tensor_affine, torch.per_tensor_symmetric):
            return Int8Rows(
                weight.int_repr(), weight.q_scale(), weight.q_zero_point(), None, reduce_range
            )
        if scheme == torch.per_channel_affine and weight.q_per_channel_axis() == 0:
            scales = weight.q_per_channel_scales()
            points = weight.q_per_channel_zero_points()
            return Int8Rows(weight.int_repr(), 0.0, 0, (scales, points), reduce_range)
        return None

    def packed(self, ids: torch.Tensor) -> torch.ScriptObject:
        """The rows `ids` (C,) packed for torch's int8 product, their values and scales as the
        full matrix has them."""
        values = self.values.index_select(0, ids)
        if self.per_row is None:
            weight = torch._make_per_tensor_quantized_tensor(values, self.scale, self.zero_point)
        else:
            scales, points = (t.index_select(0, ids) for t in self.per_row)
            weight = torch._make_per_channel_quantized_tensor(values, scales, points, 0)
        return torch.ops.quantized.linear_prepack(weight, None)


@dataclass(frozen=True)
class OutputRows:
    """What a narrowed projection needs of each member of a model (one, or an ensemble's):
    its final decoder norm, its output matrix (V, D) and logits bias (fp32), its width, and
    its decode's int8 matrix where the decode runs its output layer in int8 (else None)."""

    norms: list[nn.Module]
    weights: list[torch.Tensor]
    biases: list[torch.Tensor | None]
    widths: list[int]
    int8: list[Int8Rows | None]

    @staticmethod
    def of(model: nn.Module, decoded: nn.Module) -> OutputRows:
        """From `model` (fp32 weights) and `decoded`, the copy search runs (its norms: the
        dtype its hidden states have)."""
        plain = list(getattr(model, "members", [model]))
        runs = list(getattr(decoded, "members", [decoded]))
        return OutputRows(
            [m.decoder_norm for m in runs],
            [m.output.weight.detach().float() for m in plain],
            [None if m.output_bias is None else m.output_bias.float() for m in plain],
            [m.cfg.d_model for m in plain],
            [Int8Rows.of(m.output) for m in runs],
        )


class Shortlisted:
    """`model` (a search's view of a model: a Transformer, an ensemble, a `TargetLanguage`)
    projecting onto the vocabulary ids `ids` (C,) only: `rows` names the output layer(s)."""

    def __init__(self, model: nn.Module, rows: OutputRows, ids: torch.Tensor) -> None:
        self.model = model
        self.output_columns = OutputColumns.of(ids, rows.weights[0].size(0))
        self._norms, self._widths = rows.norms, rows.widths
        # Per member: its int8 rows packed (with the rows' int8 product's `reduce_range`), or
        # its fp32 rows (C, D).
        self._layers: list[torch.Tensor | tuple[torch.ScriptObject, bool]] = [
            (q.packed(ids), q.reduce_range) if q is not None else w.index_select(0, ids)
            for w, q in zip(rows.weights, rows.int8)
        ]
        self._biases = [None if b is None else b.index_select(0, ids) for b in rows.biases]

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """Decoder output (..., D) -> logits over the candidates (..., C); an ensemble's mean
        of its members' log-probabilities over them, as `Ensemble.project` over all."""
        parts = hidden.split(self._widths, dim=-1) if len(self._widths) > 1 else [hidden]
        total = None
        for norm, h, layer, b in zip(self._norms, parts, self._layers, self._biases):
            x = norm(h).float()
            if isinstance(layer, torch.Tensor):
                logits = F.linear(x, layer, b)
            else:
                packed, reduce_range = layer
                logits = torch.ops.quantized.linear_dynamic(x, packed, reduce_range=reduce_range)
                logits = logits if b is None else logits + b
            if len(self._widths) > 1:
                logits = log_softmax_(logits)
            total = logits if total is None else total + logits
        assert total is not None
        return total if len(self._widths) == 1 else total / len(self._widths)

    def __getattr__(self, name: str):
        return getattr(self.model, name)

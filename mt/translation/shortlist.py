"""A model seen through a lexical shortlist (`decode.shortlist`): its output layer narrowed to a
batch's candidates (mt.shortlist).

`Shortlisted` sits between the search and the model, as `TargetLanguage` does: its `project`
multiplies the decoder's output by the candidates' rows of the output matrix only, and its
`output_columns` tell the search which vocabulary id each column is, so the search scores,
ranks and draws among the candidates and maps its choices back (mt.search.rules.OutputColumns);
every step rule still speaks in vocabulary ids. Masking the full logits instead would save
nothing: the product over the whole vocabulary, and each pass over its logits, would remain.

The candidates' rows are taken from the model's fp32 output matrix once per batch, whatever
the decode computes in: int8 and oneDNN copies keep that matrix in forms that cannot be cut by
rows, and a product over a few thousand rows is cheap in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mt.search.rules import OutputColumns
from mt.search.steps import log_softmax_


@dataclass(frozen=True)
class OutputRows:
    """What a narrowed projection needs of each member of a model (one, or an ensemble's):
    its final decoder norm, its output matrix (V, D) and logits bias (fp32), its width."""

    norms: list[nn.Module]
    weights: list[torch.Tensor]
    biases: list[torch.Tensor | None]
    widths: list[int]

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
        )


class Shortlisted:
    """`model` (a search's view of a model: a Transformer, an ensemble, a `TargetLanguage`)
    projecting onto the vocabulary ids `ids` (C,) only: `rows` names the output layer(s)."""

    def __init__(self, model: nn.Module, rows: OutputRows, ids: torch.Tensor) -> None:
        self.model = model
        self.output_columns = OutputColumns.of(ids, rows.weights[0].size(0))
        self._norms, self._widths = rows.norms, rows.widths
        self._weights = [w.index_select(0, ids) for w in rows.weights]  # (C, D) each
        self._biases = [None if b is None else b.index_select(0, ids) for b in rows.biases]

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """Decoder output (..., D) -> logits over the candidates (..., C); an ensemble's mean
        of its members' log-probabilities over them, as `Ensemble.project` over all."""
        parts = hidden.split(self._widths, dim=-1) if len(self._widths) > 1 else [hidden]
        total = None
        for norm, h, w, b in zip(self._norms, parts, self._weights, self._biases):
            logits = F.linear(norm(h).float(), w, b)
            if len(self._widths) > 1:
                logits = log_softmax_(logits)
            total = logits if total is None else total + logits
        assert total is not None
        return total if len(self._widths) == 1 else total / len(self._widths)

    def __getattr__(self, name: str):
        return getattr(self.model, name)

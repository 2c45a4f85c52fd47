"""Which search a batch takes, given the one validated DecodeConfig.

Every search (mt.search.beam, mt.search.constrained) takes that DecodeConfig whole and reads
the fields it uses, so a new decode setting is its field, its rule (mt.config_rules) and its
search code; this module only chooses the search.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mt.config import DecodeConfig
from mt.model import Transformer
from mt.search.beam import beam_search, greedy_search
from mt.search.constrained import constrained_beam_search
from mt.search.phrases import WordEdges
from mt.search.rules import StepRule
from mt.search.steps import Hypothesis, Sampling


def is_greedy(cfg: DecodeConfig) -> bool:
    """Greedy search: asked for, or what a beam of one with one output is."""
    return cfg.greedy or cfg.beam == 1 and cfg.nbest == 1


def search(
    model: Transformer,
    src: torch.Tensor,  # (B, S)
    cfg: DecodeConfig,
    *,
    alignment: bool = False,
    with_scores: bool = False,
    prefixes: list[list[int]] | None = None,
    constraints: list[list[list[int]]] | None = None,
    sampling: Sampling | None = None,
    rules: Sequence[StepRule] = (),
    edges: WordEdges | None = None,
) -> list[list[Hypothesis]]:
    """The hypotheses of each row, best first: constrained beam search for rows with
    constraints (a phrase ending in a letter ending a word, given `edges`), greedy search or
    sampling (one each), else beam search."""
    if constraints is not None and any(constraints):
        return constrained_beam_search(model, src, constraints, cfg, rules=rules, edges=edges)
    if is_greedy(cfg) or sampling is not None:
        hyps = greedy_search(
            model,
            src,
            cfg,
            alignment=alignment,
            with_scores=with_scores or sampling is not None,
            prefixes=prefixes,
            sampling=sampling,
            rules=rules,
        )
        return [[h] for h in hyps]
    return beam_search(model, src, cfg, alignment=alignment, prefixes=prefixes, rules=rules)

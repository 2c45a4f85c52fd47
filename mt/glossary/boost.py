"""A glossary's target terms made likelier during search: the step rule (mt.search.rules) that
turns a line's terms into a bonus on their pieces.

A constraint forces a term in, a search of its own that costs 1.3-2x a plain one
(docs/decoding.md); a boost only raises the term's pieces in the plain search the line takes
anyway. Each row gets `bonus` on the first piece of every term it has not yet written, or, while
it is writing one (its last pieces are the term's first ones), on that term's next piece alone;
a term written as often as the source holds it gets nothing more, so it is not repeated. The model
still chooses where the term goes and how it ends: `hound` boosted, the row writes `hounds`
where the sentence wants the plural (a piece after the term's is not touched). A boost does not
guarantee the term: the guard (mt.translation.terms) checks the translation and constrains the
lines that still miss one. Rows of sentences without terms are left bit for bit as they were.
"""

from __future__ import annotations

from collections import Counter

import torch

from mt.search.rules import Boost, Restriction, Step
from mt.tokenizer import PAD


class TermBoost:
    """The rule for one batch: `phrases[b]`, the target-id phrases of sentence b (a phrase
    named n times must be written n times), each raised by `bonus`."""

    reads_history = True

    def __init__(self, phrases: list[list[list[int]]], bonus: float, device: torch.device) -> None:
        counted = [Counter(tuple(p) for p in row if p) for row in phrases]
        width = max((len(c) for c in counted), default=0)
        length = max((len(p) for c in counted for p in c), default=0)
        ids = torch.full((len(phrases), max(width, 1), max(length, 1)), PAD, dtype=torch.long)
        times = torch.zeros((len(phrases), max(width, 1)), dtype=torch.long)
        for b, c in enumerate(counted):
            for k, (p, n) in enumerate(c.items()):
                ids[b, k, : len(p)] = torch.tensor(p, dtype=torch.long)
                times[b, k] = n
        self.ids, self.times = ids.to(device), times.to(device)
        self.bonus = bonus

    def restrict(self, step: Step) -> Restriction | None:
        ph = self.ids[step.sent]  # (R, P, L)
        live = ph.ne(PAD)
        wanted = self.times[step.sent]  # (R, P); 0 for the padding phrases
        hist = step.history
        length = ph.size(2)
        t = hist.size(1)
        if t:  # how often each phrase is written: windows of L pieces, padding as a wildcard
            padded = torch.nn.functional.pad(hist, (0, length - 1), value=PAD)
            windows = padded.unfold(1, length, 1)  # (R, t, L)
            same = windows[:, None, :, :].eq(ph[:, :, None, :]) | ~live[:, :, None, :]
            written = same.all(-1).sum(-1)  # (R, P)
        else:
            written = torch.zeros_like(wanted)
        todo = written.lt(wanted)  # (R, P) terms still to write
        if not bool(todo.any()):
            return None
        nexts, begun = [], torch.zeros_like(todo)
        for j in range(1, min(length, t + 1)):  # a term begun: its next piece
            on = hist[:, None, t - j :].eq(ph[:, :, :j]).all(-1) & live[:, :, j] & todo
            nexts.append(torch.where(on, ph[:, :, j], PAD))
            begun |= on
        # A term begun is continued, not begun again: its first piece is not raised beside
        # its next one (a term that starts with the bare word-boundary piece would otherwise
        # write that piece again and again).
        first = torch.where(todo & ~begun.any(1, keepdim=True), ph[:, :, 0], PAD)
        return Restriction(boost=Boost(torch.cat([first, *nexts], 1), self.bonus))

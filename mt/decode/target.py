"""The target language of a multilingual model: which one each line asks for, how the model is
told, and the guard that keeps the output in it.

This is the one place decoding decides the target language. A request names it (`to`, from
`--to`, a JSONL line's `"to"` or a server request); a model that writes one language needs no
name. The model is told with its language token (mt/languages.py): before the source, or forced
as the first output token, which is then taken off the hypothesis. The guard
(`TargetVocabulary`) lets the search score only the pieces that the language's training text
holds, so a zero-shot direction cannot drift into English; it sits between the search and the
model's output layer, so greedy, beam, constrained search, sampling and ensembles all pass
through it without knowing of languages.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mt.decode.steps import Hypothesis
from mt.languages import Languages
from mt.tokenizer import Tokenizer


class TargetVocabulary:
    """A model seen through one language's vocabulary: the logits of every piece outside it
    are -inf. Everything but `project` is the model's own."""

    def __init__(self, model: torch.nn.Module, allowed: torch.Tensor) -> None:
        self.model = model
        self.banned = ~allowed  # (V,) bool on the model's device

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.project(hidden).masked_fill(self.banned, float("-inf"))

    def __getattr__(self, name: str):
        return getattr(self.model, name)


@dataclass
class Target:
    """How a batch of one target language is decoded."""

    lang: str | None  # None: a bilingual model
    src_mark: list[int]  # ids put before the source ids
    tgt_mark: list[int]  # ids forced first in the output, then taken off
    guard: torch.Tensor | None  # (V,) allowed pieces, or None (no guard)


class Targets:
    """Per language, what decoding into it needs; built once per translator."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        device: torch.device,
        to: str | None = None,
        frm: str | None = None,
        guard: bool = True,
        where: str = "--to",
    ) -> None:
        self.languages: Languages | None = tokenizer.languages
        self.tokenizer, self.device, self.guard, self.where = tokenizer, device, guard, where
        self.frm = frm
        self.default: str | None = None
        self._cache: dict[str, Target] = {}
        if self.languages is not None and (to is not None or len(self.languages.targets) == 1):
            self.default = self.languages.check(to, frm, where)

    def resolve(self, to: str | None) -> str | None:
        """The language a request writes: its own `to`, the translator's, or the only one;
        none of these is one line naming the model's languages. A bilingual model writes its
        one language (the session has checked any `to` given)."""
        if self.languages is None:
            return None
        return self.languages.check(to or self.default, self.frm, self.where)

    def of(self, lang: str | None) -> Target:
        if lang is None or self.languages is None:
            return Target(None, [], [], None)
        if lang not in self._cache:
            tok, langs = self.tokenizer, self.languages
            mark = [tok.lang_id(lang)]
            allowed = None
            if self.guard:
                mask = torch.from_numpy(langs.allowed(lang, tok.tgt_vocab_size))
                if langs.placement == "target":
                    mask[mark[0]] = True  # forced first, then taken off
                allowed = mask.to(self.device)
            source = langs.placement == "source"
            self._cache[lang] = Target(
                lang, mark if source else [], [] if source else mark, allowed
            )
        return self._cache[lang]


def model_for(model: torch.nn.Module, target: Target) -> torch.nn.Module:
    return model if target.guard is None else TargetVocabulary(model, target.guard)


def strip_mark(hyps: list[Hypothesis], target: Target) -> list[Hypothesis]:
    """Hypotheses as if no language token had been there: without the forced first token
    (target placement), and with alignments counted in the source's own pieces (source
    placement: the token took position 0)."""
    n, shift = len(target.tgt_mark), len(target.src_mark)
    if not n and not shift:
        return hyps
    return [
        Hypothesis(h.tokens[n:], h.score, [max(a - shift, 0) for a in h.alignment[n:]])
        for h in hyps
    ]

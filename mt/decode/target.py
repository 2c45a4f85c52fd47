"""The target language of a multilingual model: which one each line asks for, how the model is
told, and the guard that keeps the output in it.

This is the one place decoding decides the target language. A request names it (`to`, from
`--to`, a JSONL line's `"to"` or a server request); a model that writes one language needs no
name. The model is told with its language token (mt/languages.py): before the source ids
(`data.lang_token: source`), or as the decoder's first input in place of BOS (`target`). Both
the second and the guard live in `TargetLanguage`, the model seen from one target language: it
feeds the token wherever a search or scorer feeds BOS, and lets the search score only the
pieces that are the language's own, so a zero-shot direction cannot drift into English. It
sits between the search and the model, so greedy, beam and constrained search, sampling,
scoring and ensembles all pass through it without knowing of languages.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mt.decode.steps import Hypothesis
from mt.errors import MtError
from mt.languages import Languages
from mt.tokenizer import BOS, Tokenizer


class TargetLanguage:
    """A model seen from one target language: BOS fed to the decoder becomes `start` (None:
    unchanged), and the logits of every piece outside `allowed` are -inf (None: all pass).
    Everything else is the model's own."""

    def __init__(
        self, model: torch.nn.Module, start: int | None, allowed: torch.Tensor | None
    ) -> None:
        self.model, self.start = model, start
        self.banned = None if allowed is None else ~allowed  # (V,) bool on the model's device

    def _first(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens if self.start is None else tokens.masked_fill(tokens.eq(BOS), self.start)

    def step_hidden(self, prev: torch.Tensor, state, **kwargs):
        return self.model.step_hidden(self._first(prev), state, **kwargs)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        return self.model(src, self._first(tgt_in))

    __call__ = forward

    def attention_maps(self, src: torch.Tensor, tgt_in: torch.Tensor):
        return self.model.attention_maps(src, self._first(tgt_in))

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.model.project(hidden)  # this call's own tensor: masked in place
        return logits if self.banned is None else logits.masked_fill_(self.banned, float("-inf"))

    def __getattr__(self, name: str):
        return getattr(self.model, name)


@dataclass
class Target:
    """How a batch of one target language is decoded."""

    lang: str | None  # None: a bilingual model
    src_mark: list[int]  # ids put before the source ids
    start: int | None  # the decoder's first input instead of BOS
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
        ratio: float = 0.1,
    ) -> None:
        self.languages: Languages | None = tokenizer.languages
        self.tokenizer, self.device, self.guard, self.where = tokenizer, device, guard, where
        self.frm, self.ratio = frm, ratio
        self.default: str | None = None
        self._cache: dict[str, Target] = {}
        if self.languages is not None and (to is not None or len(self.languages.targets) == 1):
            self.default = self.languages.check(to, frm, where)

    def resolve(self, to: str | None, frm: str | None = None, where: str = "") -> str | None:
        """The language a request writes: its own `to`, the translator's, or the only one;
        none of these is one line naming the model's languages (and `where`, the JSONL line
        or item that asked). A bilingual model writes its one language (the session has
        checked any `to` given)."""
        if self.languages is None:
            return None
        try:
            return self.languages.check(to or self.default, frm or self.frm, self.where)
        except MtError as err:
            if not where:
                raise
            raise MtError(f"{where}: {err}") from None

    def of(self, lang: str | None) -> Target:
        if lang is None or self.languages is None:
            return Target(None, [], None, None)
        if lang not in self._cache:
            token = self.tokenizer.lang_id(lang)
            allowed = None
            if self.guard:
                allowed = torch.from_numpy(self.languages.allowed(lang, self.ratio))
                allowed = allowed.to(self.device)
            source = self.languages.placement == "source"
            self._cache[lang] = Target(
                lang, [token] if source else [], None if source else token, allowed
            )
        return self._cache[lang]


def model_for(model: torch.nn.Module, target: Target) -> torch.nn.Module:
    """`model` as the search should see it for `target` (itself for a bilingual model)."""
    if target.start is None and target.guard is None:
        return model
    return TargetLanguage(model, target.start, target.guard)  # type: ignore[return-value]


def strip_mark(hyps: list[Hypothesis], target: Target) -> list[Hypothesis]:
    """Hypotheses with alignments counted in the source's own pieces (source placement: the
    language token took position 0)."""
    shift = len(target.src_mark)
    if not shift:
        return hyps
    return [Hypothesis(h.tokens, h.score, [max(a - shift, 0) for a in h.alignment]) for h in hyps]

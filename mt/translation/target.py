"""The target language of a multilingual model: which one each line asks for, how the model is
told, and the guard that keeps the output in it.

This is the one place decoding decides the target language. A request names it (`to`, from
`--to`, a JSONL line's `"to"` or a server request); a model that writes one language needs no
name. The model is told with its language token (mt/languages.py): before the source ids
(`data.lang_token: source`), or as the decoder's first input in place of BOS (`target`). The
second lives in `TargetLanguage`, the model seen from one target language: it feeds the token
wherever a search or scorer feeds BOS. It sits between the search and the model, so greedy,
beam and constrained search, sampling, scoring and ensembles all pass through it without
knowing of languages. The guard, which lets the search score only the pieces that are the
language's own so that a zero-shot direction cannot drift into English, is a step rule
(`LanguageGuard`, `mt.search.rules`): the search's distribution over the language's pieces.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from mt.errors import MtError
from mt.languages import Languages
from mt.search.rules import Columns, Restriction, Step, StepRule
from mt.search.steps import Hypothesis
from mt.tokenizer import BOS, Tokenizer


class TargetLanguage:
    """A model seen from one target language: BOS fed to the decoder becomes `start` (None:
    unchanged). `forced` (M2M/NLLB): the decoder reads BOS then this token before the search's first
    choice, so the token is written without being searched or scored (HF's forced BOS).
    Everything else is the model's own."""

    def __init__(
        self, model: torch.nn.Module, start: int | None, forced: int | None = None
    ) -> None:
        self.model, self.start, self.forced = model, start, forced

    def _first(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.forced is not None:  # (B, T) -> (B, T + 1): the forced token after BOS
            column = torch.full_like(tokens[:, :1], self.forced)
            return torch.cat([tokens[:, :1], column, tokens[:, 1:]], dim=1)
        return tokens if self.start is None else tokens.masked_fill(tokens.eq(BOS), self.start)

    def step_hidden(self, prev: torch.Tensor, state, **kwargs):
        if self.forced is not None and state.length == 0:
            self.model.step_hidden(prev, state, **kwargs)
            prev = torch.full_like(prev, self.forced)
        return self.model.step_hidden(
            self._first(prev) if self.forced is None else prev, state, **kwargs
        )

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        logits = self.model(src, self._first(tgt_in))
        return logits if self.forced is None else logits[:, 1:]  # not the forced token's

    __call__ = forward

    def attention_maps(self, src: torch.Tensor, tgt_in: torch.Tensor):
        maps = self.model.attention_maps(src, self._first(tgt_in))
        if self.forced is None:
            return maps
        keep = list(range(1, tgt_in.size(1) + 1))  # from the forced token on, as many as fed
        maps.decoder = [w[:, :, keep][:, :, :, keep] for w in maps.decoder]
        maps.cross = [w[:, :, keep] for w in maps.cross]
        return maps

    def __getattr__(self, name: str):
        return getattr(self.model, name)


@dataclass
class Target:
    """How a batch of one target language is decoded."""

    lang: str | None  # None: a bilingual model
    src_mark: list[int]  # ids put before the source ids
    start: int | None  # the decoder's first input instead of BOS
    guard: torch.Tensor | None  # (V,) allowed pieces, or None (no guard)
    forced: int | None = None  # read after BOS before the output (placement "forced")

    @cached_property
    def rules(self) -> list[StepRule]:
        """The step rules of a search into this language: its guard, where it has one (kept
        with the target, which `Targets` keeps per language)."""
        return [] if self.guard is None else [LanguageGuard(self.guard)]


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

    def of(self, lang: str | None, frm: str | None = None) -> Target:
        """How to decode into `lang`; `frm` (else the translator's) matters only to a model
        that reads its source language's token (placement "forced": M2M, NLLB)."""
        if lang is None or self.languages is None:
            return Target(None, [], None, None)
        if self.languages.placement == "forced":
            source = self.languages.canonical(frm or self.frm)
            if source is None:
                raise MtError(f"this model reads its source language's token: say which with "
                              f"{self.where.replace('--to', '--from')}")  # fmt: skip
            key = f"{source}>{lang}"
            if key not in self._cache:
                mark = [self.tokenizer.lang_id(source)]
                self._cache[key] = Target(lang, mark, None, None, self.tokenizer.lang_id(lang))
            return self._cache[key]
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
    if target.start is None and target.forced is None:
        return model
    wrapped = TargetLanguage(model, target.start, target.forced)
    return wrapped  # type: ignore[return-value]


class LanguageGuard:
    """The step rule of a target language's guard: the pieces outside `allowed` (V,) bool
    are out of the distribution, so the search scores only the language's own."""

    reads_history = False

    def __init__(self, allowed: torch.Tensor) -> None:
        self.support = Columns.of(~allowed)

    def restrict(self, step: Step) -> Restriction:
        return Restriction(support=self.support)


def target_rules(target: Target | None) -> list[StepRule]:
    """The step rules a search into `target` applies: its guard, where it has one."""
    return [] if target is None else target.rules


def strip_mark(hyps: list[Hypothesis], target: Target) -> list[Hypothesis]:
    """Hypotheses with alignments counted in the source's own pieces (source placement: the
    language token took position 0)."""
    shift = len(target.src_mark)
    if not shift:
        return hyps
    return [Hypothesis(h.tokens, h.score, [max(a - shift, 0) for a in h.alignment]) for h in hyps]

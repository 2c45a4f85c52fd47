"""Evaluation during training: teacher-forced validation loss and greedy dev BLEU.

Dev BLEU needs a decoder, so this is where training uses `mt.translate` and `mt.metrics`. The
greedy translations are returned with the scores, for sinks that show a few of them. A
multilingual model has a dev set per direction: each gets `dev_bleu/de-en` (and chrF), and
`dev_bleu` is their mean, which picks `best.pt`. The sets of `train.watch` (mt/train/watch.py)
get `watch_loss/NAME`, `watch_bleu/NAME` and `watch_chrf/NAME`, outside every mean.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from mt.batching import token_batches
from mt.cat import FORMATS, strip_codes
from mt.config import DataConfig, DecodeConfig, TrainConfig
from mt.data.corpus import read_pairs
from mt.data.loader import collate_store
from mt.data.prepare import Prepared
from mt.data.store import TokenStore
from mt.device import autocast
from mt.metrics import bleu, chrf
from mt.model import Transformer
from mt.tokenizer import PAD
from mt.train.loss import label_smoothed_loss
from mt.translation.requests import Request
from mt.translation.session import DecodeOptions, Session
from mt.translation.translator import translate_stream
from mt.views.attention import AttentionView, sentence_attention


@dataclass
class Evaluation:
    metrics: dict[str, float]  # valid_loss, valid_nll, valid_ppl; (eval_bleu) dev_bleu, dev_chrf
    hypotheses: list[str] = field(default_factory=list)  # greedy, one per line of the first set


@dataclass
class DevSet:
    """One direction's dev set: its token store for the loss, raw text for BLEU."""

    store: TokenStore
    sources: list[str]
    references: list[str]
    to: str | None = None  # the target language of a multilingual model's direction
    name: str = ""  # "de-en" with several directions ("" alone: the plain metric names)
    # Its lines hold inline codes as tags (a TMX or XLIFF dev set, mt.cat): BLEU and chrF
    # compare the text without them, as `mt eval` does.
    codes: bool = False

    def scores(self, hyps: list[str]) -> tuple[float, float]:
        """(BLEU, chrF) of `hyps` against this set's references."""
        refs = self.references
        if self.codes:
            hyps, refs = [strip_codes(h) for h in hyps], [strip_codes(r) for r in refs]
        return bleu(hyps, refs), chrf(hyps, refs)


def dev_sets_of(prepared: Prepared, limit: int) -> list[DevSet]:
    """The dev set of each direction `prepare` made a store for (named and with a target
    language when the model is multilingual)."""
    multi = prepared.tokenizer.languages is not None
    out = []
    for store, source in zip(prepared.valid, prepared.valid_sources):
        src, ref = read_pairs(source, limit)
        name = f"{source.src_lang}-{source.tgt_lang}" if multi else ""
        to = source.tgt_lang if multi else None
        out.append(DevSet(store, src, ref, to, name, codes=source.format in FORMATS))
    return out


@dataclass(frozen=True)
class EvalSettings:
    """What the evaluation reads of the train and data sections (the decode settings come
    with its session)."""

    bleu: bool  # train.eval_bleu: translate the dev sets (else the loss only)
    max_tokens: int  # train.max_tokens: the dev loss's batches
    label_smoothing: float  # train.label_smoothing: the dev loss is the training loss
    lang_token: str  # data.lang_token: where a multilingual model reads its target language

    @classmethod
    def of(cls, t: TrainConfig, d: DataConfig) -> EvalSettings:
        return cls(t.eval_bleu, t.max_tokens, t.label_smoothing, d.lang_token)


def dev_options() -> DecodeOptions:
    """Dev BLEU's decode settings as `mt eval`'s overrides of the run's decode section:
    greedy (one output, no sampling) with the section's length limits and batch size; the
    settings meant for the final model (no_repeat_ngram, int8) and the read-ahead are the
    defaults, so the curve is comparable between runs. (`mt eval CHECKPOINT --beam 1` with
    these flags scores the same translations.)"""
    plain = DecodeConfig()
    return DecodeOptions(
        beam=1,
        nbest=1,
        greedy=False,
        sample=False,
        int8=False,
        no_repeat_ngram=plain.no_repeat_ngram,
        buffer_lines=plain.buffer_lines,
    )


class Evaluator:
    """Scores the model on its dev sets (one per direction), translating through `session`
    (mt.translation.session), the door `mt eval` uses."""

    def __init__(
        self,
        session: Session,
        settings: EvalSettings,
        sets: list[DevSet],
        precision: str,
        watch: list[DevSet] | None = None,
    ) -> None:
        """`session` holds the model being trained (`Session.from_model`); `precision` is the
        training's autocast, which decoding runs under too; `watch`: the sets of `train.watch`
        (mt/train/watch.py), scored beside `sets` under their names and in no `dev_*` mean."""
        model = session.model
        assert isinstance(model, Transformer), "training evaluates one model"
        self.session, self.settings = session, settings
        self.model, self.tokenizer, self.device = model, session.tokenizer, session.device
        self.sets = sets
        self.watch = watch or []
        # The examples and the attention picture show the first direction.
        self.sources, self.references = sets[0].sources, sets[0].references
        self.precision = precision

    @torch.no_grad()
    def __call__(self) -> Evaluation:
        """Validation loss (teacher forced) and greedy dev BLEU; leaves the model in train
        mode."""
        self.model.eval()
        out = self._loss(self.sets)
        first: list[str] = []
        if self.settings.bleu:
            scores: list[tuple[float, float]] = []
            for k, dev in enumerate(self.sets):
                hyps = self.translate(dev.sources, dev.to)
                first = hyps if k == 0 else first
                scores.append(dev.scores(hyps))
                if dev.name:
                    out[f"dev_bleu/{dev.name}"], out[f"dev_chrf/{dev.name}"] = scores[-1]
            out["dev_bleu"] = float(np.mean([b for b, _ in scores]))
            out["dev_chrf"] = float(np.mean([c for _, c in scores]))
        for w in self.watch:
            out[f"watch_loss/{w.name}"] = self._loss([w])["valid_loss"]
            if self.settings.bleu:
                out[f"watch_bleu/{w.name}"], out[f"watch_chrf/{w.name}"] = w.scores(
                    self.translate(w.sources, w.to)
                )
        self.model.train()
        return Evaluation(out, first)

    def _loss(self, sets: list[DevSet]) -> dict[str, float]:
        """Teacher-forced loss, NLL and perplexity per target token over all of `sets`."""
        e = self.settings
        loss_sum = nll_sum = 0.0
        ntok = 0
        placement = e.lang_token
        for dev in sets:
            lang = None if dev.to is None else self.tokenizer.lang_id(dev.to)
            mark = lang is not None and placement == "source"
            sizes = dev.store.sizes.astype(np.int64) + mark  # + the source's language token
            fits = np.nonzero(sizes <= self.model.cfg.max_positions)[0]  # longer: no positions
            for idx in token_batches(sizes, e.max_tokens, items=fits):
                b = collate_store(dev.store, idx, lang, placement).to(self.device)
                with autocast(self.device, self.precision):
                    logits = self.model(b.src, b.tgt_in)
                loss, nll = label_smoothed_loss(logits, b.tgt_out, e.label_smoothing, PAD)
                loss_sum += float(loss)
                nll_sum += float(nll)
                ntok += b.tgt_tokens
        return {
            "valid_loss": loss_sum / ntok,
            "valid_nll": nll_sum / ntok,
            "valid_ppl": math.exp(min(nll_sum / ntok, 50.0)),
        }

    def bleu(self, options: DecodeOptions) -> float:
        """Dev BLEU with these overrides of the run's decode settings (the mean over
        directions), as `mt eval` with those flags would score the model: for choosing decode
        settings on dev (mt/train/tune.py). It decodes in the dtype `mt eval` decodes the
        checkpoint in (on a CPU `auto`: fp32), not under the training's autocast: a grid's
        settings lie within a tenth of a BLEU of each other, and bf16's rounding reordered
        them (docs/studies/recipe-search.md, "Choosing the decode settings")."""
        dtype = "auto" if self.device.type == "cpu" else self.session.cfg.decode.dtype
        options = replace(options, dtype=dtype)
        scores = [
            d.scores(self.translate(d.sources, d.to, options, precision="fp32"))[0]
            for d in self.sets
        ]
        return float(np.mean(scores))

    @torch.no_grad()
    def translate(
        self,
        lines: list[str],
        to: str | None = None,
        options: DecodeOptions | None = None,
        precision: str | None = None,
    ) -> list[str]:
        """Translations (into `to`, for a multilingual model): greedy (`dev_options`), or as
        `options` override the run's decode settings; through the session's translator and
        the translator's one path with `mt eval`'s default steps (spans kept and restored,
        capitals), so dev BLEU is what `mt eval` measures on the same checkpoint with the same
        settings."""
        # The session decodes in fp32 under the training's autocast (its precision decides,
        # unless `precision` names another), so no copy of the model per evaluation.
        was_training = self.model.training
        self.model.eval()
        translator = self.session.translator(options or dev_options())
        with autocast(self.device, precision or self.precision):
            done = translate_stream(translator, [Request(x, to=to) for x in lines])
            hyps = [t.text for t in done]
        self.model.train(was_training)
        return hyps

    def examples(self, hypotheses: list[str], n: int) -> list[tuple[str, str, str]]:
        """The first `n` dev pairs with their translation: the evaluation's greedy output, or
        (without dev BLEU) a greedy translation of just these."""
        sources, references = self.sources[:n], self.references[:n]
        hyps = hypotheses[:n] if hypotheses else self.translate(sources, self.sets[0].to)
        return list(zip(sources, references, hyps))

    def attention_views(self, sentence: str, step: int) -> tuple[str, list[AttentionView]]:
        """The title and the encoder-decoder attention (top layer) behind the greedy
        translation of `sentence` (the one the examples show), for `attention_picture`. This
        part runs the model, so it is done before training goes on."""
        greedy = replace(self.session.cfg.decode, beam=1, nbest=1)
        to = self.sets[0].to
        target = self.session.targets().of(to) if to else None
        text, views = sentence_attention(self.model, self.tokenizer, sentence, greedy, -1, target)
        self.model.train()
        cross = [v for v in views if v.name == "encoder-decoder attention"]
        return f"{sentence}  ->  {text}   (step {step})", cross


def attention_picture(title: str, views: list[AttentionView]) -> Any:
    """The figure `mt attention` draws (head mean), from the same code. Needs no model, so it
    can be drawn while training goes on."""
    from mt.plot import attention_figure

    with warnings.catch_warnings():  # a very long output: matplotlib warns at every eval
        warnings.filterwarnings("ignore", "Tight layout not applied", UserWarning)
        return attention_figure(views, title, None)

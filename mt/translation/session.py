"""The one door into a trained model: load it, settle device and decoding options, use it.

`mt translate`, `eval`, `score`, `attention`, `vectors`, `export` and `mt serve` all come in
here, so a checkpoint path, an ensemble, a device name and a caller's overrides mean the same
thing everywhere:

- `Session(paths, device, dtype=None)` loads one checkpoint or several (an ensemble: the members
  must share the vocabulary) on a resolved device. A run directory stands for its `best.pt`.
  `session.with_adapter(path)` is the same model with an adapter applied (mt.adapt: checked
  against its base, decoding with the adapter's settings); `mt serve` holds several on one
  base, each such a session.
  `dtype` is how this process computes (`--dtype` of translate, eval, score and serve), like the
  device: a caller's option set may still name one; without either, a CPU decodes `auto` and
  CUDA as the checkpoint's decode.dtype says (the setting was made for the GPU it trained on).
- `session.decode_config(options)` applies a caller's `DecodeOptions` (mt.translation.options: one
  optional field per DecodeConfig field) to a copy of the
  checkpoint's decode settings and checks the result with the config's own rules
  (`mt.decode_rules.with_overrides`), naming each setting as the caller does (`--beam` for the CLI,
  `options.beam` for the server). The checkpoint's config is never written to.
- `translator(...)`, `scorer(...)` and `attention(...)` build on that one validated config.
  A translator has one method, `translate(requests)`; each `Request` carries the `Plan` of
  steps around search it takes (protection, capitals, numbers, HTML, pivot, sentences), and
  `mt.translation.translator.translate_stream` feeds it an endless input buffer by buffer.

An ensemble is a model like any other here: translate (greedy, beam, n-best, prefixes,
constraints, sampling), score and int8 work on it; attention and vectors, which show one
model's internals, refuse it in one line.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from mt.adapt.files import Adapter, check_base, fingerprint
from mt.adapt.files import read as read_adapter
from mt.adapt.lora import fold, with_adapter
from mt.checkpoint import Loaded, load_model, resolve_checkpoint
from mt.config import Config, DecodeConfig, to_dict
from mt.decode_rules import with_overrides
from mt.device import planless_attention, resolve_decode_dtype, resolve_device
from mt.errors import MtError
from mt.languages import Languages
from mt.model import Transformer
from mt.runtime.dtype import uses_onednn
from mt.runtime.int8 import engine_available
from mt.search.ensemble import Ensemble
from mt.shortlist import Shortlist
from mt.spans import index as spans_index
from mt.tokenizer import Tokenizer
from mt.translation.options import DecodeOptions
from mt.translation.target import Targets
from mt.translation.translator import Translator
from mt.views.score import Scorer


def flag_name(key: str) -> str:
    """`decode.no_repeat_ngram` -> `--no-repeat-ngram`: how the CLI names a setting."""
    return "--" + key.split(".")[-1].replace("_", "-")


class Session:
    """One model (or ensemble) loaded on one device, ready for any number of decodes."""

    def __init__(
        self,
        paths: Sequence[Path | str],
        device: str = "auto",
        name: Callable[[str], str] = flag_name,
        dtype: str | None = None,
    ) -> None:
        if not paths:
            raise MtError("no checkpoint given")
        self.device = resolve_device(device)
        planless_attention(self.device)
        self.name = name  # how errors name a setting
        if dtype is not None:  # a bad --dtype is one line before any model loads
            resolve_decode_dtype(dtype, self.device, option="--dtype")
        self.dtype = dtype
        self.paths = [resolve_checkpoint(Path(p)) for p in paths]
        members = [load_model(p, self.device) for p in self.paths]
        first = members[0]
        key = first.tokenizer.vocabulary_key()
        for path, other in zip(self.paths[1:], members[1:]):
            if other.tokenizer.vocabulary_key() != key:
                raise MtError(
                    f"{path}: its tokenizer's vocabulary differs from {self.paths[0]}'s; an "
                    "ensemble needs one vocabulary (train the members with the same spm.model)"
                )
        self.loaded: list[Loaded] = members
        self.cfg = first.cfg  # the first checkpoint's settings lead an ensemble
        self.tokenizer: Tokenizer = first.tokenizer
        self.model: Transformer | Ensemble = (
            first.model if len(members) == 1 else Ensemble([m.model for m in members]).eval()
        )
        self.adapter: Adapter | None = None  # the adapter applied (`with_adapter`)
        self._fingerprint: str | None = None
        self.shortlist = shortlist_of(first, self.paths[0])  # the first's, as its settings

    def base_fingerprint(self) -> str:
        """The fingerprint of this session's one model as a base (mt.adapt.files), computed
        once from its checkpoint's weights."""
        if self._fingerprint is None:
            data = self.loaded[0].data
            self._fingerprint = fingerprint(data["model"], data["config"]["model"])
        return self._fingerprint

    def with_adapter(self, path: Path | str, merge: bool = False) -> Session:
        """A session over this one's model with the adapter at `path` applied, decoding as
        the adapter's run says (its decode section). Unmerged, it shares every base weight
        with this session (several adapters cost one base); `merge` folds the adapter into
        a copy of the weights instead, which decodes as fast as the base (the CLI's choice:
        it decodes with one adapter). An adapter of another base is refused in one line."""
        if len(self.loaded) != 1:
            raise MtError(f"{path}: an adapter applies to one checkpoint, not to an ensemble")
        if self.adapter is not None:
            raise MtError(f"{path}: the model has an adapter already ({self.adapter.path})")
        adapter = read_adapter(path)
        check_base(adapter, self.paths[0], self.base_fingerprint())
        try:
            model = with_adapter(self.model, adapter.spec, adapter.weights)
        except ValueError as err:
            raise MtError(f"{adapter.path}: {err}") from None
        view = copy.copy(self)
        view.model = fold(model) if merge else model
        view.cfg = dataclasses.replace(self.cfg, decode=adapter.cfg.decode)
        view.adapter = adapter
        return view

    @classmethod
    def from_model(
        cls,
        model: Transformer,
        tokenizer: Tokenizer,
        cfg: Config,
        device: torch.device,
        dtype: str | None = None,
        name: Callable[[str], str] = flag_name,
    ) -> Session:
        """A session over a model in memory, `cfg` standing for the config its checkpoint
        would hold: training's evaluation decodes through this door, so dev BLEU is what
        `mt eval` measures. The model is used as it is (not copied, its mode untouched);
        `paths` is empty, as nothing was read from a file."""
        self = cls.__new__(cls)
        self.device, self.name, self.dtype = device, name, dtype
        self.paths, self.loaded = [], []
        self.cfg, self.tokenizer, self.model = cfg, tokenizer, model
        self.adapter, self._fingerprint = None, None
        self.shortlist = None  # a model mid-training has none: decode.shortlist is not applied
        return self

    def decode_config(self, options: DecodeOptions | None = None) -> DecodeConfig:
        """The checkpoint's decode settings with `options` applied, checked once."""
        given = (options or DecodeOptions()).given()
        n = self.name
        if "dtype" not in given and (self.dtype is not None or self.device.type == "cpu"):
            given["dtype"] = self.dtype or "auto"
        dcfg = with_overrides(self.cfg.decode, given, self.device.type, n)
        precision = resolve_decode_dtype(dcfg.dtype, self.device, dcfg.int8, n("decode.dtype"))
        if dcfg.gemm == "onednn" and dcfg.int8:
            if not engine_available("onednn"):
                raise MtError(
                    f"{n('decode.gemm')} onednn with {n('decode.int8')}: torch "
                    f"{torch.__version__} has no oneDNN int8 engine"
                )
        elif dcfg.gemm == "onednn" and not uses_onednn("onednn", precision, self.device, False):
            if precision.name not in ("fp32", "bf16") or self.device.type != "cpu":
                here = f"this decode is {precision.name} on {self.device.type}"
            else:
                here = f"torch {torch.__version__} lacks the oneDNN {precision.name} ops"
            raise MtError(f"{n('decode.gemm')} onednn decodes fp32 or bf16 on a CPU, but {here}")
        return dcfg

    @property
    def languages(self) -> Languages | None:
        """A multilingual model's languages (None: one pair, `cfg.data.src_lang/tgt_lang`)."""
        return self.tokenizer.languages

    def source_language(self) -> str:
        """The language a bilingual model reads (a multilingual model's first source): what
        sentence splitting assumes when a request names none."""
        if self.languages is None:
            return self.cfg.data.src_lang
        return self.languages.pairs[0][0]

    def targets(
        self,
        to: str | None = None,
        frm: str | None = None,
        target_vocab: bool = True,
        ratio: float | None = None,
    ) -> Targets:
        """The target-language choice for a decode (mt.translation.target), checked once: an
        unknown language is one line naming the model's languages. A bilingual model takes
        no `to` but its own target language."""
        if self.languages is None:
            d = self.cfg.data
            for given, own, what in ((to, d.tgt_lang, "writes"), (frm, d.src_lang, "reads")):
                if given is not None and given != own:
                    raise MtError(
                        f"this model translates {d.src_lang}-{d.tgt_lang} only: it {what} "
                        f"{own!r}, not {given!r}"
                    )
            to = frm = None
        elif frm is None and self.languages.placement == "forced":
            frm = self.cfg.data.src_lang  # M2M/NLLB read a source token: the imported default
        if ratio is None:
            ratio = self.cfg.decode.target_vocab_ratio
        return Targets(
            self.tokenizer, self.device, to, frm, target_vocab, self.name("data.to"), ratio
        )

    def translator(
        self,
        options: DecodeOptions | None = None,
        alignment: bool = False,
        with_scores: bool = False,
        targets: Targets | None = None,
    ) -> Translator:
        """A Translator with these options; `alignment` and `with_scores` shape its output,
        `targets` (from `targets()`) says which language to write. What happens around
        search (protection, capitals, HTML...) is each request's `Plan`."""
        dcfg = self.decode_config(options)
        if dcfg.shortlist and self.shortlist is None and self.paths:
            raise MtError(
                f"{self.paths[0]}: has no lexical shortlist for {self.name('decode.shortlist')}; "
                "build one with mt shortlist"
            )
        targets = targets or self.targets(ratio=dcfg.target_vocab_ratio)
        try:
            return Translator(
                self.model,
                self.tokenizer,
                dcfg,
                self.device,
                alignment,
                with_scores,
                targets,
                self.shortlist,
            )
        except ValueError as err:  # a decoding option this model or torch cannot do
            raise MtError(f"{self.paths[0] if self.paths else 'the model'}: {err}") from None

    def scorer(
        self, options: DecodeOptions | None = None, protect: bool = True, to: str | None = None
    ) -> Scorer:
        """A Scorer; with `protect` a model trained with data.protect scores spans as the
        placeholders it learned; `to`: the target language of a multilingual model."""
        dcfg = self.decode_config(options)
        targets = self.targets(to, target_vocab=False)
        target = targets.of(targets.resolve(None))
        return Scorer(self.model, self.tokenizer, dcfg, self.device, protect, target)

    def single_model(self, what: str) -> Transformer:
        """The model, for views of one model's internals; an ensemble is refused."""
        if isinstance(self.model, Ensemble):
            raise MtError(f"{what} shows one model's internals: give one checkpoint")
        return self.model

    def attention(self, sentence: str, options: DecodeOptions | None = None, to: str | None = None):
        """`sentence` translated with these options (into `to`, for a multilingual model),
        with every attention weight the model computed for that translation
        (mt.views.attention.SentenceAttention)."""
        from mt.views.attention import translate_with_attention

        model = self.single_model("attention")
        if not sentence.strip():
            raise MtError("the sentence is empty")
        dcfg = self.decode_config(options)
        targets = self.targets(to, ratio=dcfg.target_vocab_ratio)
        target = targets.of(targets.resolve(None))
        return translate_with_attention(model, self.tokenizer, sentence.strip(), dcfg, target)

    def describe(self) -> dict[str, Any]:
        """What a client may want to know of the model: languages, size, settings."""
        params = sum(p.numel() for p in self.model.parameters())
        cfg = to_dict(self.cfg)
        langs = self.languages
        pairs = (
            [list(p) for p in langs.pairs]
            if langs
            else [[self.cfg.data.src_lang, self.cfg.data.tgt_lang]]
        )
        return {
            "checkpoints": [str(p) for p in self.paths],
            "source_language": pairs[0][0],
            "target_language": pairs[0][1],
            "directions": pairs,
            "languages": langs.languages if langs else pairs[0],
            "parameters": params,
            "ensemble": len(self.loaded),
            "config": {k: cfg[k] for k in ("model", "tokenizer", "decode")},
        }


def shortlist_of(loaded: Loaded, path: Path) -> Shortlist | None:
    """The lexical shortlist a checkpoint holds (`mt shortlist`), checked against its
    vocabularies; None where it holds none."""
    stored = loaded.data.get("shortlist")
    if stored is None:
        return None
    shortlist = Shortlist.from_dict(stored, str(path))
    shortlist.check(loaded.tokenizer, str(path))
    return shortlist


def keep_learned() -> None:
    """Keep what the span ban learned of each vocabulary for the next process
    (`mt.spans.kept`): a command that translated lines calls this when they are done."""
    spans_index.keep_learned()

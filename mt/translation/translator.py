"""Requests in, translations out: the one door to search, `Translator.translate(requests)`.

Each request's `Plan` (mt.translation.requests) names the steps around search it takes (protection,
capitals, numbers, pivot, sentences, HTML: mt.translation.stages); `translate` runs them, and their
rounds of search come back here, where sentences are sorted by length and cut into token-budget
batches (little padding), then put back in input order. `translate_stream` feeds an endless
input `buffer_lines` at a time, so memory stays bounded on any input size. Every input line
yields exactly one output line (`nbest` lines with --nbest); an empty line yields an empty
line without running the model.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping

import torch

from mt.batching import pad, token_batches
from mt.config import DecodeConfig
from mt.decode_rules import can_constrain, validate_constraints
from mt.device import resolve_decode_dtype
from mt.errors import MtError
from mt.glossary.boost import TermBoost
from mt.glossary.inline import takes_terms
from mt.model import Transformer
from mt.runtime.dtype import decode_model
from mt.runtime.workers import WorkerPool
from mt.search.dispatch import is_greedy, search
from mt.search.phrases import WordEdges, phrase_ids, word_edges
from mt.search.rules import StepRule
from mt.search.steps import Hypothesis, Sampling
from mt.shortlist import Shortlist
from mt.spans.bans import Bans, SpanRule
from mt.textstats import LONG, SHORT
from mt.tokenizer import EOS, Tokenizer
from mt.translation.casing import recase_stage
from mt.translation.doubt import doubt_stage
from mt.translation.html_input import html_stage
from mt.translation.number_guard import numbers_stage
from mt.translation.pivot import pivot_stage
from mt.translation.protect import SearchBelow, protect_stage
from mt.translation.requests import Plan, Request, Translation, isolated, translation_record
from mt.translation.sentences import split_stage
from mt.translation.shortlist import OutputRows, Shortlisted
from mt.translation.stages import Stage, run, spelling_cost
from mt.translation.target import Target, Targets, model_for, strip_mark, target_rules
from mt.translation.terms import glossary_stage, preferred


class Translator:
    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer,
        cfg: DecodeConfig,
        device: torch.device,
        alignment: bool = False,
        with_scores: bool = False,
        targets: Targets | None = None,
        shortlist: Shortlist | None = None,
    ) -> None:
        # decode.dtype, int8 and gemm (mt.runtime.dtype): a copy of the model or a context around
        # each call, so the caller's model (maybe mid-training) is not touched.
        self.precision = resolve_decode_dtype(cfg.dtype, device, cfg.int8)
        self.model = decode_model(model, self.precision, device, cfg.int8, cfg.gemm)
        # decode.shortlist: each batch's candidates (mt.shortlist), projected by a view of the
        # model that computes those rows of the output layer only (mt.translation.shortlist).
        self.shortlist = shortlist if cfg.shortlist else None
        self._rows = OutputRows.of(model, self.model) if self.shortlist is not None else None
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.device = device
        self.greedy = is_greedy(cfg)
        self.alignment = alignment
        # decode.sample: draw instead of search (one output per line), seeded on the device
        # the draws happen on, so the same input and batch settings give the same output.
        self.sampling = (
            Sampling(
                cfg.topk,
                cfg.topp,
                cfg.temperature,
                torch.Generator(device=device).manual_seed(cfg.seed),
            )
            if cfg.sample
            else None
        )
        self.with_scores = with_scores  # greedy: compute the log-probability (costs a pass)
        # Requests that prefer terms choose among all of a beam's outputs (stop_early ends a
        # sentence by decode.nbest, so it keeps the one list): mt.translation.terms.preferred.
        self.widens = not (self.greedy or cfg.sample or cfg.stop_early)
        self.max_src = model.cfg.max_positions
        self.truncated = 0  # lines cut to the model's longest input, reported by the CLI
        # Protection: search writes no span of its own (mt.spans.bans; built on first use),
        # and the protection stage (mt.translation.protect) lifts out and puts back the source's.
        self._bans: Bans | None = None
        self._edges: WordEdges | None = None  # where a constraint's word may end (on first use)
        # The target language of each line (a multilingual model): mt.translation.target.
        self.targets = targets or Targets(tokenizer, device)
        self._cost = spelling_cost(tokenizer)  # how the capitals stage ranks spellings
        # Whether this search takes constraints: the one rule (mt.decode_rules), which the
        # stages that turn spans or numbers into constraints ask too.
        self.constrain = can_constrain(cfg, alignment)

    def length_bounds(self, r: Request) -> tuple[float, float]:
        """The (short, long) length bounds of request `r`'s direction (mt.textstats)."""
        stats = self.tokenizer.text_stats
        if stats is None:
            return SHORT, LONG
        return stats.bounds(r.frm or self.targets.frm, r.to or self.targets.default)

    def case_table(self, r: Request) -> Mapping[str, str] | None:
        """The case table of request `r`'s source language; None: the model has none."""
        stats = self.tokenizer.text_stats
        return None if stats is None else stats.spellings(r.frm or self.targets.frm)

    def _search(
        self,
        src: torch.Tensor,
        prefixes: list[list[int]] | None,
        constraints: list[list[list[int]]] | None = None,
        alignment: bool = False,
        bans: Bans | None = None,
        target: Target | None = None,
        favoured: list[list[list[int]]] | None = None,
        nbest: int | None = None,
    ) -> list[list[Hypothesis]]:
        # The model seen from the batch's target language (its token, its guard); `nbest`: more
        # outputs than decode.nbest, which only cuts the list (the search is the same).
        cfg = self.cfg if nbest is None else dataclasses.replace(self.cfg, nbest=nbest)
        model = self.model if target is None else model_for(self.model, target)
        if constraints is not None and self._edges is None:
            self._edges = word_edges(self.tokenizer, self.device)
        rules: list[StepRule] = [bans] if bans is not None else []
        if favoured is not None:  # a glossary's terms, raised (mt.glossary.boost)
            rules.append(TermBoost(favoured, self.cfg.glossary_boost, self.device))
        if self.shortlist is not None and self._rows is not None:
            model = self._shortlisted(model, src, prefixes, (constraints or []) + (favoured or []))
        return search(
            model,
            src,
            cfg,
            alignment=alignment,
            with_scores=self.with_scores,
            prefixes=prefixes,
            constraints=constraints,
            sampling=self.sampling,
            rules=rules + target_rules(target),
            edges=self._edges,
        )

    def _shortlisted(
        self,
        model: torch.nn.Module,
        src: torch.Tensor,
        prefixes: list[list[int]] | None,
        constraints: list[list[list[int]]] | None,
    ) -> Shortlisted:
        """`model` writing only the batch's shortlist candidates, which hold its prefixes' and
        constraints' pieces (a forced piece must be writable)."""
        assert self.shortlist is not None and self._rows is not None
        extra = [t for p in prefixes or [] for t in p]
        extra += [t for phrases in constraints or [] for p in phrases for t in p]
        vocab = self._rows.weights[0].size(0)
        ids = self.shortlist.candidates(src, self.cfg.shortlist, extra, vocab)
        return Shortlisted(model, self._rows, ids.to(self.device))

    def translate(self, requests: list[Request]) -> list[Translation]:
        """Translations of `requests`, in their order, each through the steps its plan
        names (requests of one plan go through them together, split into sentences or not:
        `Plan.unsplit`)."""
        out: list = [None] * len(requests)
        keys = [r.plan.unsplit() for r in requests]
        for plan in dict.fromkeys(keys):
            rows = [i for i, key in enumerate(keys) if key == plan]
            split = any(requests[i].plan.split is not None for i in rows)
            terms = any(requests[i].glossary is not None for i in rows)
            one_round = lambda reqs, align, p=plan.protect: self._search_requests(  # noqa: E731
                reqs, align, p
            )
            stages = self._stages(plan, split, terms)
            done = run(stages, [requests[i] for i in rows], one_round)
            for i, t in zip(rows, done):
                out[i] = t
        return out

    def _stages(self, plan: Plan, split: bool, terms: bool = False) -> list[Stage]:
        """The steps around search `plan` names, outermost first (mt.translation.stages); `split`:
        some requests are translated sentence by sentence (each request's own `plan.split`);
        `terms`: some carry a glossary (mt.translation.terms: inside the capitals and numbers
        stages, so it sees a line in its usual case, and the numbers' retry keeps the terms)."""
        beam = not (self.greedy or self.sampling is not None)
        below = SearchBelow(self.tokenizer, self.cfg.nbest, self.constrain)
        if terms and (plan.html or plan.pivot is not None):
            raise MtError("a glossary cannot be combined with HTML input or a pivot language")
        if plan.html:
            return [html_stage(below, plan.protect)]
        inner = [doubt_stage(beam, self.cfg.alpha, self.length_bounds)]
        inner += [protect_stage(below)] if plan.protect else []
        if plan.pivot is not None:
            return [pivot_stage(self.targets, plan.pivot), *inner]
        steps = [recase_stage(self._cost, self.case_table)] if plan.recase else []
        bounds = self.length_bounds
        if plan.keep_numbers:
            steps.append(numbers_stage(self.tokenizer, self.constrain, bounds))
        if terms:
            inline = takes_terms(self.tokenizer)
            boost = self.cfg.glossary_boost > 0
            steps.append(
                glossary_stage(
                    self.constrain, plan.glossary_hard, inline, plan.glossary_soft, boost
                )
            )
        if split:
            return [split_stage(self.tokenizer, self.max_src, bounds), *steps, *inner]
        return steps + inner

    def _bans_for(self, protect: bool) -> Bans | None:
        if not protect:
            return None
        if self._bans is None:
            self._bans = Bans(spans=SpanRule(self.tokenizer, self.device))
        return self._bans

    def _search_requests(
        self, requests: list[Request], alignment: bool, protect: bool
    ) -> list[Translation]:
        """One round of search: `alignment` asks for alignments whatever the translator's
        own setting (placing spans needs them); `protect` bans the spans no source holds."""
        return self._search_batches(requests, alignment, protect)

    def _search_batches(
        self, requests: list[Request], alignment: bool, protect: bool
    ) -> list[Translation]:
        lines = [r.src for r in requests]
        ids = self.tokenizer.encode_src([line.strip() for line in lines])
        prefix_ids = self._prefix_ids(requests)
        constraint_ids = self._constraint_ids(requests)
        results: list[list[Hypothesis]] = [[] for _ in lines]
        todo = [i for i, line in enumerate(lines) if line.strip()]
        langs = [self.targets.resolve(r.to, r.frm, r.where) for r in requests]
        for i in todo:
            mark = self.targets.of(langs[i], requests[i].frm).src_mark
            if len(ids[i]) + len(mark) > self.max_src:
                ids[i] = ids[i][: self.max_src - 1 - len(mark)] + [EOS]
                self.truncated += 1
            ids[i] = mark + ids[i]
        favour_ids = self._favour_ids(requests)
        # A batch has one target language (its token and guard are per batch), and lines with
        # constraints take the constrained search, which has no prefixes: apart.
        has_terms = [
            constraint_ids is not None and bool(constraint_ids[i]) for i in range(len(lines))
        ]
        keys = dict.fromkeys((langs[i], has_terms[i]) for i in todo)
        for lang, constrained in keys:
            target = self.targets.of(lang)
            group = [i for i in todo if langs[i] == lang and has_terms[i] == constrained]
            sizes = [len(ids[i]) for i in group]
            for batch in token_batches(sizes, self.cfg.max_tokens):
                rows = [group[j] for j in batch]
                src = pad([ids[r] for r in rows]).to(self.device)
                prefixes = [prefix_ids[r] for r in rows] if prefix_ids is not None else None
                terms = [constraint_ids[r] for r in rows] if constrained else None  # type: ignore[index]
                favoured = [favour_ids[r] for r in rows] if favour_ids is not None else None
                if favoured is not None and not any(favoured):
                    favoured = None
                align = self.alignment or alignment
                bans = self._bans_for(protect)
                if bans is not None and any(requests[r].keep for r in rows):
                    bans = dataclasses.replace(bans, allowed=[requests[r].keep for r in rows])
                wide = self.widens and any(requests[r].prefer for r in rows)
                nbest = self.cfg.beam if wide else None
                found = self._search(src, prefixes, terms, align, bans, target, favoured, nbest)
                for r, hyps in zip(rows, found):
                    results[r] = strip_mark(hyps, target)
        out = []
        for r, hyps in zip(requests, results):
            hyps = hyps if r.prefer else hyps[: self.cfg.nbest]
            texts = [self.tokenizer.decode_tgt(h.tokens) for h in hyps]
            hyps, texts = preferred(hyps, texts, r, self.cfg.nbest)
            pieces = self.tokenizer.tgt_pieces(hyps[0].tokens) if hyps else []
            out.append(Translation(texts[0] if texts else "", hyps, texts, pieces))
        return out

    def _constraint_ids(self, requests: list[Request]) -> list[list[list[int]]] | None:
        """Target ids of each request's constraint phrases (None when no request has any).
        Constrained search is a beam search of its own: the options it lacks are refused."""
        if not any(r.constraints for r in requests):
            return None
        validate_constraints(self.cfg, self.alignment)
        if any(r.constraints and r.prefix for r in requests):
            raise MtError("a line cannot have both a prefix and constraints")
        out = []
        for r in requests:
            phrases = [phrase_ids(self.tokenizer, text) for text in r.constraints]
            out.append([p for p in phrases if p])
        return out

    def _favour_ids(self, requests: list[Request]) -> list[list[list[int]]] | None:
        """Target ids of each request's favoured phrases; None when no request has any or the
        boost is off (the search then takes no rule for them)."""
        if not self.cfg.glossary_boost or not any(r.favour for r in requests):
            return None
        return [[p for t in r.favour if (p := phrase_ids(self.tokenizer, t))] for r in requests]

    def _prefix_ids(self, requests: list[Request]) -> list[list[int]] | None:
        """Target ids of each request's prefix (None when no request has one), cut so that
        at least one position is left for the continuation."""
        if not any(r.prefix for r in requests):
            return None
        ids = self.tokenizer.encode_tgt([r.prefix for r in requests])
        return [p[: self.max_src - 2] for p in ids]


def translate_stream(
    translator: Translator | WorkerPool,
    items: Iterable[str | Request],
    plan: Plan | None = None,
) -> Iterator[Translation]:
    """Translate an endless iterable (of lines, or requests) buffer by buffer, yielding in
    input order; a line becomes a request with `plan` (default: the CLI's defaults). A
    `WorkerPool` (mt.runtime.workers) in place of the translator spreads each buffer over its
    processes."""
    chunks = buffers(items, translator.cfg.buffer_lines, plan or Plan())
    if isinstance(translator, WorkerPool):
        for done in translator.stream(chunks):
            yield from done
        return
    for chunk in chunks:
        yield from isolated(translator.translate, chunk)


def buffers(items: Iterable[str | Request], size: int, plan: Plan) -> Iterator[list[Request]]:
    """`items` as requests (a line gets `plan`), `size` at a time."""
    it = iter(items)
    while chunk := [
        x if isinstance(x, Request) else Request(x.rstrip("\r\n"), plan=plan)
        for x in itertools.islice(it, size)
    ]:
        yield chunk


def format_translation(t: Translation, index: int, nbest: int, alignment: bool) -> list[str]:
    """Output lines for one input line.

    One-best: the translation, plus with `alignment` a tab and `src-tgt` pairs (0-based, the
    source position each target token attends to most, counted in sentencepiece tokens).
    N-best: `nbest` lines `INDEX ||| TRANSLATION ||| SCORE` (Moses style, INDEX 0-based);
    missing hypotheses are padded with empty ones so every input line has exactly N lines.
    """
    if nbest == 1:
        if not alignment:
            return [t.text]
        pairs = (
            " ".join(f"{s}-{j}" for j, s in enumerate(t.hypotheses[0].alignment))
            if t.hypotheses
            else ""
        )
        return [f"{t.text}\t{pairs}"]
    lines = []
    for k in range(nbest):
        if k < len(t.hypotheses):
            lines.append(f"{index} ||| {t.texts[k]} ||| {t.hypotheses[k].score:.4f}")
        else:
            lines.append(f"{index} |||  ||| 0.0000")  # empty input: the empty output, p = 1
    return lines


def write_translations(
    translations: Iterable[Translation],
    out,  # a text stream
    nbest: int = 1,
    alignment: bool = False,
    jsonl: bool = False,
    failed: Callable[[int, str], None] | None = None,
    start: int = 0,
) -> int:
    """Write and flush after each buffer-sized group; returns the number of input lines.
    With `jsonl`, one JSON object per input line (see `translation_record`). A line that
    could not be translated is written empty (so later lines keep their line numbers) and
    reported to `failed(line number, error)`. `start`: the 0-based number of the first input
    line (n-best indices and line numbers of a chunk of a longer input)."""
    n = 0
    for n, t in enumerate(translations, 1):
        if t.error and failed is not None:
            failed(start + n, t.error)
        if jsonl:
            out.write(json.dumps(translation_record(t, alignment), ensure_ascii=False) + "\n")
        else:
            for line in format_translation(t, start + n - 1, nbest, alignment):
                out.write(line + "\n")
        if out is sys.stdout or n % 64 == 0:
            out.flush()
    out.flush()
    return n

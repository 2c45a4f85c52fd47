"""The rules a config value must meet.

Every rule lives once: here (`validate`), or, for the decode settings, beside them in
mt/config_decode.py (`decode_checks`, which a caller's decode overrides meet too); the bounds
that turn a typo into one error line are mt/config_bounds.py. They hold for a YAML file,
`--set` and a checkpoint's stored config alike; the dataclasses they check are mt/config.py.
What a caller may ask of one decode beside them (its overrides applied, the searches that
take constraints, the steps around search) is ruled in mt/decode_rules.py.
"""

from __future__ import annotations

import re
from pathlib import Path

from mt.adapt.defaults import keeping
from mt.config import Config, DataConfig, ModelConfig, TokenizerConfig, TrainConfig
from mt.config_bounds import (
    MAX_ACCUM,
    MAX_BATCH_TOKENS,
    MAX_BEAM,
    MAX_LAYERS,
    MAX_LENGTH,
    MAX_SEED,
    MAX_THREADS,
    MAX_TIMEOUT_S,
    MAX_VOCAB,
    MAX_WIDTH,
    in_range,
    raise_first,
)
from mt.config_decode import decode_checks

_LANG = re.compile(r"[a-z]{2,3}(_[A-Za-z0-9]{2,4})?")


def parse_pair(item: str) -> tuple[str, str] | None:
    """`"de-en"` -> ("de", "en"); None when it is not two language codes joined by `-`."""
    parts = item.split("-")
    if len(parts) != 2 or not all(_LANG.fullmatch(p) for p in parts):
        return None
    return parts[0], parts[1]


def pair_checks(d: DataConfig) -> list[tuple[bool, str]]:
    """`data.pairs`: each a `src-tgt` of two different codes, none twice, not with corpora."""
    checks: list[tuple[bool, str]] = []
    for i, item in enumerate(d.pairs):
        pair = parse_pair(item)
        checks.append(
            (
                pair is not None,
                f"data.pairs[{i}] must be two language codes joined by '-' (de-en), got {item!r}",
            )
        )
        if pair is not None:
            checks.append((pair[0] != pair[1], f"data.pairs[{i}] ({item}) names one language"))
    checks.append((len(set(d.pairs)) == len(d.pairs), "data.pairs names a pair twice"))
    checks.append(
        (
            not (d.pairs and d.corpora),
            "data.pairs and data.corpora cannot be combined (each pair is read from data.root)",
        )
    )
    return checks


_WATCH_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def watch_checks(cfg: Config) -> list[tuple[bool, str]]:
    """`train.watch`: named sets with their files, each name once; `keep_within` needs BLEU."""
    from mt.cat import format_of

    t = cfg.train
    checks: list[tuple[bool, str]] = [
        (
            not (t.watch and cfg.data.pairs),
            "train.watch is for a run in one direction (with data.pairs each direction has its "
            "own dev BLEU already)",
        )
    ]
    names = [w.name for w in t.watch]
    for i, w in enumerate(t.watch):
        where = f"train.watch[{i}]"
        bilingual = bool(w.src) and format_of(Path(w.src)) is not None
        checks += [
            (
                bool(_WATCH_NAME.fullmatch(w.name)),
                f"{where}.name must be letters, digits, '_', '-' or '.', got {w.name!r}",
            ),
            (w.name not in names[:i], f"{where}.name {w.name!r} is given twice"),
            (w.src != "", f"{where}.src must be given (a text, TMX or XLIFF file)"),
            (
                bilingual or w.ref != "",
                f"{where}.ref must be given (the references of the text file {where}.src)",
            ),
            (
                not (bilingual and w.ref),
                f"{where}.ref must be empty: the TMX or XLIFF file {where}.src holds them",
            ),
            (w.max_examples >= 0, f"{where}.max_examples must be >= 0"),
            (
                w.keep_within is None or 0 <= w.keep_within <= 100,
                f"{where}.keep_within must be in [0, 100] BLEU, got {w.keep_within}",
            ),
            (
                w.keep_within is None or t.eval_bleu,
                f"{where}.keep_within compares BLEU: it needs train.eval_bleu: true",
            ),
        ]
    return checks


def keep_checks(cfg: Config) -> list[tuple[bool, str]]:
    """`finetune.keep`: a weight that means something, and the base's own vocabulary (the KL
    compares distributions over the same pieces)."""
    f = cfg.finetune
    kept = keeping(f)
    return [
        (
            f.keep_weight is None or 0 < f.keep_weight <= 1000,
            f"finetune.keep_weight must be in (0, 1000], got {f.keep_weight}",
        ),
        (
            not kept.term or cfg.train.init_vocab == "keep",
            f"finetune.keep: {f.keep} compares the model with its base over the base's "
            "vocabulary: it cannot be combined with train.init_vocab: new"
            + (" (finetune.keep: none turns it off)" if kept.auto else ""),
        ),
        (
            f.keep_on == "all" or f.keep == "kl",
            "finetune.keep_on: general chooses the pairs of finetune.keep: kl's term: it needs "
            "finetune.keep: kl",
        ),
        (
            f.keep_on == "all"
            or bool(f.replay_sources)
            or any(c.general for c in cfg.data.corpora),
            "finetune.keep_on: general needs general pairs: finetune.replay_sources, or a corpus "
            "of data.corpora marked general: true",
        ),
        (
            f.replay_weight is None or 0 < f.replay_weight <= 1000,
            f"finetune.replay_weight must be in (0, 1000], got {f.replay_weight}",
        ),
        (f.replay_beam >= 1, f"finetune.replay_beam must be >= 1, got {f.replay_beam}"),
        (
            f.replay_max_lines >= 0,
            f"finetune.replay_max_lines must be >= 0, got {f.replay_max_lines}",
        ),
        (
            not f.replay_sources or not cfg.data.pairs,
            "finetune.replay_sources translates data.src_lang -> data.tgt_lang: it cannot be "
            "combined with data.pairs",
        ),
    ]


AUGMENT_MODIFIERS = ("uppercase", "titlecase", "no_final_punct", "typos")


def augment_checks(items: list[str]) -> list[tuple[bool, str]]:
    """`data.augment`: known modifiers, each once, probabilities in (0, 1] summing to <= 1."""
    checks, total, seen = [], 0.0, set()
    for i, item in enumerate(items):
        name, sep, p = item.partition(":")
        try:
            prob = float(p) if sep else -1.0
        except ValueError:
            prob = -1.0
        where = f"data.augment[{i}]"
        checks.append(
            (
                name in AUGMENT_MODIFIERS and name not in seen,
                f"{where}: {name!r} is not a modifier or is given twice "
                f"(known: {', '.join(AUGMENT_MODIFIERS)})",
            )
        )
        checks.append((0 < prob <= 1, f"{where} must be MODIFIER:PROBABILITY in (0, 1]"))
        seen.add(name)
        total += max(prob, 0.0)
    checks.append((total <= 1, "data.augment: the probabilities must sum to at most 1"))
    return checks


def terms_checks(d: DataConfig) -> list[tuple[bool, str]]:
    """`data.terms`: a share in [0, 1] and the lexicon's bounds; one language pair."""
    t = d.terms
    return [
        in_range("data.terms.share", t.share, 0.0, 1.0),
        in_range("data.terms.mask", t.mask, 0.0, 1.0),
        in_range("data.terms.max_terms", t.max_terms, 1, 16),
        (0 < t.min_dice <= 1, f"data.terms.min_dice must be in (0, 1], got {t.min_dice}"),
        in_range("data.terms.min_count", t.min_count, 1, 1_000_000),
        in_range("data.terms.skip_common", t.skip_common, 0, 100_000),
        in_range("data.terms.lexicon_lines", t.lexicon_lines, 100, 100_000_000),
        (
            not (t.share and d.pairs),
            "data.terms is learnt for one language pair: it cannot be combined with data.pairs",
        ),
    ]


def distill_checks(cfg: Config) -> list[tuple[bool, str]]:
    """`distill`: the teachers' search, how its output is cut and mixed; one direction."""
    d = cfg.distill
    return [
        in_range("distill.beam", d.beam, 1, MAX_BEAM),
        (d.alpha is None or 0 <= d.alpha <= 10, f"distill.alpha must be in [0, 10], got {d.alpha}"),
        in_range("distill.max_tokens", d.max_tokens, 0, MAX_BATCH_TOKENS),
        in_range("distill.buffer_lines", d.buffer_lines, 0, 10_000_000),
        in_range("distill.chunk_lines", d.chunk_lines, 0, 1_000_000_000),
        (
            not (d.chunk_lines and d.buffer_lines) or d.chunk_lines % d.buffer_lines == 0,
            f"distill.chunk_lines ({d.chunk_lines:,}) must be a multiple of "
            f"distill.buffer_lines ({d.buffer_lines:,}): a chunk is batched as one process would",
        ),
        in_range("distill.workers", d.workers, 1, 1024),
        in_range("distill.keep_original", d.keep_original, 0.0, 1000.0),
        in_range("distill.interpolate (at most distill.beam)", d.interpolate, 0, d.beam),
        (
            not (d.teachers and cfg.data.pairs),
            "distill is for a student of one direction: it cannot be combined with data.pairs",
        ),
    ]


def finetune_checks(cfg: Config) -> list[tuple[bool, str]]:
    """An adapter trains alone on a frozen base: what would train the base too is refused."""
    f, t = cfg.finetune, cfg.train
    lora = f.adapter == "lora"
    return [
        in_range("finetune.lora_rank", f.lora_rank, 1, MAX_WIDTH),
        (f.lora_alpha > 0, "finetune.lora_alpha must be > 0"),
        (0 < f.lora_b_lr <= 1000, "finetune.lora_b_lr must be in (0, 1000]"),
        (0.0 <= f.lora_dropout < 1.0, "finetune.lora_dropout must be in [0, 1)"),
        (not lora or bool(f.lora_targets), "finetune.lora_targets must name a projection"),
        (
            not lora or not (t.freeze or t.init_keep_optimizer or t.init_vocab == "new"),
            "finetune.adapter: lora trains the adapter alone on a frozen base: it cannot be "
            "combined with train.freeze, train.init_keep_optimizer or train.init_vocab: new",
        ),
    ]


def validate(cfg: Config) -> None:
    """Reject values that type-check but cannot work; messages name the key (the caller adds
    the file or the `--set` item). The first rule broken is the one reported, in this order."""
    checks = model_checks(cfg.model, cfg.tokenizer)
    checks += tokenizer_checks(cfg.tokenizer)
    checks += train_checks(cfg.train)
    checks += finetune_checks(cfg)
    checks += data_checks(cfg.data)
    checks += decode_checks(cfg.decode)
    checks += pair_checks(cfg.data)
    checks += augment_checks(cfg.data.augment)
    checks += terms_checks(cfg.data)
    checks += watch_checks(cfg)
    checks += keep_checks(cfg)
    checks += distill_checks(cfg)
    for i, c in enumerate(cfg.data.corpora):
        checks.append((c.name != "", f"data.corpora[{i}].name must be given"))
        checks.append((0 < c.weight <= 1000, f"data.corpora[{i}].weight must be in (0, 1000]"))
    raise_first(checks)


def model_checks(m: ModelConfig, tok: TokenizerConfig) -> list[tuple[bool, str]]:
    """The model's shape, and what its tying asks of the tokenizer."""
    return [
        in_range("model.d_model", m.d_model, 1, MAX_WIDTH),
        in_range("model.n_heads", m.n_heads, 1, max(m.d_model, 1)),
        (
            m.n_heads > 0 and m.d_model % m.n_heads == 0,
            f"model.d_model ({m.d_model}) must be divisible by model.n_heads ({m.n_heads})",
        ),
        (m.d_model % 2 == 0, "model.d_model must be even (sinusoidal positions)"),
        in_range("model.d_ff", m.d_ff, 1, MAX_WIDTH * 4),
        in_range("model.encoder_layers", m.encoder_layers, 1, MAX_LAYERS),
        in_range("model.decoder_layers", m.decoder_layers, 1, MAX_LAYERS),
        (0.0 <= m.dropout < 1.0, "model.dropout must be in [0, 1)"),
        (0.0 <= m.attention_dropout < 1.0, "model.attention_dropout must be in [0, 1)"),
        (0.0 <= m.activation_dropout < 1.0, "model.activation_dropout must be in [0, 1)"),
        in_range("model.max_positions", m.max_positions, 1, MAX_LENGTH + 1),
        in_range("model.position_offset", m.position_offset, 0, MAX_LENGTH),
        (
            not (m.tie_output and m.tie_embeddings),
            "model.tie_output is for separate embeddings (model.tie_embeddings: false)",
        ),
        (
            not m.tie_embeddings or tok.joint,
            "model.tie_embeddings needs tokenizer.joint: true (one shared vocabulary)",
        ),
    ]


def tokenizer_checks(tok: TokenizerConfig) -> list[tuple[bool, str]]:
    return [
        in_range("tokenizer.vocab_size", tok.vocab_size, 16, MAX_VOCAB),
        in_range("tokenizer.input_sentence_size", tok.input_sentence_size, 2, 2**31 - 1),
        (0.0 < tok.character_coverage <= 1.0, "tokenizer.character_coverage must be in (0, 1]"),
        in_range("tokenizer.sample_alpha", tok.sample_alpha, 0.0, 1.0),
        in_range("tokenizer.sample_copies", tok.sample_copies, 1, 64),
    ]


def train_checks(t: TrainConfig) -> list[tuple[bool, str]]:
    return [
        (t.warmup > 0, "train.warmup must be > 0"),
        in_range("train.max_tokens", t.max_tokens, 1, MAX_BATCH_TOKENS),
        in_range("train.accum_steps", t.accum_steps, 1, MAX_ACCUM),
        in_range("train.seed", t.seed, 0, MAX_SEED),
        (0.0 <= t.weight_decay <= 1.0, "train.weight_decay must be in [0, 1]"),
        (t.lr > 0, "train.lr must be > 0"),
        (t.lr_scale > 0, "train.lr_scale must be > 0"),
        (0.0 <= t.label_smoothing < 1.0, "train.label_smoothing must be in [0, 1)"),
        (t.clip_norm >= 0, "train.clip_norm must be >= 0"),
        (t.max_bad_updates > 0, "train.max_bad_updates must be > 0"),
        (t.max_steps > 0, "train.max_steps must be > 0"),
        (t.max_epochs >= 0, "train.max_epochs must be >= 0"),
        (t.max_minutes >= 0, "train.max_minutes must be >= 0"),
        (t.patience >= 0, "train.patience must be >= 0"),
        (t.checkpoint_minutes >= 0, "train.checkpoint_minutes must be >= 0"),
        (
            0 < t.collective_timeout_s <= MAX_TIMEOUT_S,
            f"train.collective_timeout_s must be in (0, {MAX_TIMEOUT_S:,}] seconds",
        ),
        (t.log_every > 0, "train.log_every must be > 0"),
        (t.eval_every > 0, "train.eval_every must be > 0"),
        (t.keep_last >= 0, "train.keep_last must be >= 0"),
        (t.average_last >= 0, "train.average_last must be >= 0"),
        (
            t.average_last <= t.keep_last,
            f"train.average_last ({t.average_last}) must be <= train.keep_last "
            f"({t.keep_last}): the run keeps only that many step checkpoints to average",
        ),
        (0.0 <= t.rdrop <= 100.0, f"train.rdrop must be in [0, 100], got {t.rdrop}"),
        (0.0 <= t.cooldown < 1.0, f"train.cooldown must be in [0, 1), got {t.cooldown}"),
        (0.0 <= t.ema_decay < 1.0, f"train.ema_decay must be in [0, 1), got {t.ema_decay}"),
        (len(t.tune_beam) <= 16, "train.tune_beam takes at most 16 beam sizes"),
        (len(t.tune_alpha) <= 16, "train.tune_alpha takes at most 16 length penalties"),
        in_range("train.tune_within", t.tune_within, 0.0, 100.0),
        *(in_range("train.tune_beam", b, 1, MAX_BEAM) for b in t.tune_beam),
        *(in_range("train.tune_alpha", a, 0.0, 10.0) for a in t.tune_alpha),
        in_range("train.threads", t.threads, 0, MAX_THREADS),
        (0 <= t.loader_workers <= 64, "train.loader_workers must be in [0, 64]"),
        (
            len(t.optimizer_betas) == 2 and all(0 <= b < 1 for b in t.optimizer_betas),
            "train.optimizer_betas must be two numbers in [0, 1)",
        ),
        (t.optimizer_eps > 0, "train.optimizer_eps must be > 0"),
        (len(set(t.freeze)) < 3, "train.freeze cannot name all three parts: nothing would train"),
        (
            t.init_vocab == "keep" or not (t.init_keep_optimizer or "embeddings" in t.freeze),
            "train.init_vocab: new cannot be combined with train.init_keep_optimizer or "
            "freezing the embeddings (the vocabulary's rows change)",
        ),
        (
            not (t.freeze and t.init_keep_optimizer),
            "train.freeze and train.init_keep_optimizer cannot be combined (the kept optimizer "
            "state covers every parameter)",
        ),
        *dropout_rule_checks(t),
    ]


def dropout_rule_checks(t: TrainConfig) -> list[tuple[bool, str]]:
    """`train.dropout_by_epochs`: increasing epochs, one rate per epoch in each list set."""
    r, key = t.dropout_by_epochs, "train.dropout_by_epochs"
    checks = [
        (
            all(0 <= a < b for a, b in zip(r.epochs, r.epochs[1:], strict=False))
            and all(e >= 0 for e in r.epochs),
            f"{key}.epochs must be increasing numbers >= 0, got {r.epochs}",
        ),
        (bool(r.epochs) or not r.dropout, f"{key}.dropout needs {key}.epochs"),
        (not r.epochs or bool(r.dropout), f"{key}.epochs needs {key}.dropout"),
    ]
    for name in ("dropout", "attention_dropout", "activation_dropout"):
        rates = getattr(r, name)
        checks += [
            (
                not rates or len(rates) == len(r.epochs),
                f"{key}.{name} needs one rate per epoch count ({len(r.epochs)}), got {rates}",
            ),
            (all(0 <= p < 1 for p in rates), f"{key}.{name} must be in [0, 1), got {rates}"),
        ]
    return checks


def data_checks(d: DataConfig) -> list[tuple[bool, str]]:
    return [
        in_range("data.max_len", d.max_len, 1, MAX_LENGTH),
        (d.max_len_ratio >= 1.0, "data.max_len_ratio must be >= 1"),
        (d.src_lang != d.tgt_lang, "data.src_lang and data.tgt_lang must differ"),
        (0 < d.sampling_temperature <= 100, "data.sampling_temperature must be in (0, 100]"),
        (d.max_train_examples >= 0, "data.max_train_examples must be >= 0"),
        (d.max_valid_examples >= 0, "data.max_valid_examples must be >= 0"),
    ]

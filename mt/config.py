"""Typed configuration: the plain dataclasses of a run's settings.

One config has the sections `data`, `tokenizer`, `model`, `train`, `finetune`, `decode` and
`distill`, each a dataclass below (`decode`'s, with its settings' one description each, in
mt/config_decode.py). The rules a value must meet live once, in mt/config_rules.py
(`validate`) and, for the decode settings, mt/config_decode.py (`decode_checks`); reading
YAML and `--set` into these classes is mt/config_file.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from mt.config_decode import DecodeConfig


@dataclass
class CorpusConfig:
    """One training corpus among several (`data.corpora`), read like `data.train`.

    `weight` is how many times each of its pairs is seen per epoch on average: 1 takes every pair
    once, 0.3 a fresh random 30% each epoch (a large web-crawled set next to a clean one), 2 every
    pair twice. Empty `root` and `format` take the values of the `data` section.
    """

    name: str = ""  # the corpus, as `data.train` names one (a file stem, a file, a split)
    root: str = ""  # its folder or `datasets` name; empty: `data.root`
    format: Literal["", "text", "tsv", "jsonl", "hf", "tmx", "xliff"] = ""  # empty: `data.format`
    hf_subset: str = ""  # format hf: the dataset's configuration; empty: `data.hf_subset`
    weight: float = 1.0  # times each pair is seen per epoch on average (0.3: a random 30%)
    # Text of the general domain the base knew (its own data, or finetune.replay_sources' pairs,
    # which are marked so): with finetune.keep_on: general the KL term sees these pairs only.
    general: bool = False


@dataclass
class WatchConfig:
    """A dev set scored beside `data.valid` at each evaluation (`train.watch`): the general
    domain beside a fine-tuning run's own, so losing it shows while it happens.

    Its metrics are `watch_bleu/NAME`, `watch_chrf/NAME` and `watch_loss/NAME`. With
    `keep_within`, `best.pt` is the best `dev_bleu` among the evaluations whose BLEU on this set
    is at most `keep_within` below its value when the run started (the base model's, evaluated
    before the first step).
    """

    name: str = ""  # how its metrics are named: letters, digits, `_`, `-`, `.`
    src: str = ""  # its source file: text (`.gz` too), or a TMX/XLIFF file holding both sides
    ref: str = ""  # its reference file (text); empty for a TMX or XLIFF `src`
    max_examples: int = 0  # 0 scores every line; else its first N pairs
    # BLEU this set may lose against the start of the run and still let an evaluation become
    # best.pt (e.g. 1.0); unset: the set is watched, not a rule.
    keep_within: float | None = None


@dataclass
class DropoutByEpochs:
    """Dropout chosen from the epochs a run's budget reaches (`train.dropout_by_epochs`): the
    same 30-minute recipe overfits on a machine that trains three times as fast, where more
    dropout wins, and underfits with it on a slow one (docs/studies/recipe-search.md).

    A step-bounded run knows its epochs from `max_steps` before the first update; a time-bounded
    one projects them from the pace of its first updates (mt/train/budget.py) and sets the rates
    then, during warmup. Between two points the rates are interpolated linearly; outside, the
    nearest point's. The choice is logged, and checkpoints carry it in their model section.
    """

    epochs: list[float] = field(default_factory=list)  # increasing; empty = off
    dropout: list[float] = field(default_factory=list)  # model.dropout at each of `epochs`
    attention_dropout: list[float] = field(default_factory=list)  # empty: the model's own
    activation_dropout: list[float] = field(default_factory=list)  # empty: the model's own


@dataclass
class TermsConfig:
    """Terms learnt (`data.terms`): a share of the training lines carry, after some of their
    words, the word's translation between markers (`｟term｠ Hunde｟to｠ dog｟/term｠`), so
    the model learns to use a term it is given and to inflect it (Dinu et al. 2019; target
    lemmas: Bergmanis and Pinnis 2021). `--glossary` then writes a glossary's terms into the
    source the same way (docs/decoding.md: Terminology).

    The term pairs are found in the training data (mt/glossary/lexicon.py): Dice's
    coefficient over the stems of content words on a uniform sample of the corpus, linked one
    to one in each line, neighbours joined into phrases; the lexicon is kept in the run
    directory as `terms.lexicon.tsv`.
    """

    share: float = 0.0  # share of the training pairs annotated, drawn per pair; 0 = off; e.g. 0.3
    max_terms: int = 3  # terms annotated in one line at most (between 1 and this, drawn)
    min_dice: float = 0.3  # Dice's coefficient a source and a target stem need to be a term pair
    min_count: int = 3  # training lines a term pair must co-occur in
    # The most frequent stems of each side are never terms (the function words: `der`, `the`).
    skip_common: int = 100
    lexicon_lines: int = 200_000  # training pairs sampled (uniformly) to find the term pairs on
    # Share of the annotated terms written without their source words
    # (`｟term｠｟to｠ dog｟/term｠`): the target can then only be copied, which teaches the model
    # to take a term it is given rather than translate the word itself (source term masking,
    # Ailem et al. 2021). At translation time every term keeps its source words. 0.5 measured
    # best (docs/decoding.md).
    mask: float = 0.5


@dataclass
class DataConfig:
    """Where the parallel corpus lives and which sentence pairs to keep.

    `format` says how `train`/`valid`/`test` are read: `text` means `{root}/{name}.{lang}` (or
    `.gz`); `tsv` and `jsonl` mean a file `{root}/{name}`; `hf` means `root` is a `datasets` name
    (or a folder written by `save_to_disk`), `hf_subset` its configuration (`de-en` for `wmt14`)
    and the names are its splits; `tmx` and `xliff` mean a file `{root}/{name}` (`.gz` too) of
    CAT tools, its segments' languages matched against `src_lang`/`tgt_lang` (mt/cat). `corpora`,
    when given, replaces `train` with several corpora.
    """

    root: str = "${MT_DATA:-data/multi30k}"  # the corpus folder (or `datasets` name, format hf)
    src_lang: str = "de"  # source language code: the file suffix, the TSV/JSONL column name
    tgt_lang: str = "en"  # target language code, as `src_lang`
    format: Literal["text", "tsv", "jsonl", "hf", "tmx", "xliff"] = "text"  # how read (above)
    hf_subset: str = ""  # format hf: the dataset's configuration (`de-en` for `wmt14`)
    train: str = "train"  # the training corpus: `{root}/{train}.{lang}` for format text
    corpora: list[CorpusConfig] = field(default_factory=list)  # several corpora, replaces `train`
    valid: str = "val"  # the dev set: evaluation during training, dev BLEU, `best.pt`
    test: str = "test_2016_flickr"  # the test set's name, for scripts that score a run
    max_len: int = 128  # training pairs with more tokens on either side are dropped
    max_len_ratio: float = 3.0  # ... and pairs whose token-length ratio exceeds this
    max_train_examples: int = 0  # 0 keeps all; tests and demos take a slice
    max_valid_examples: int = 0  # 0 keeps all of the dev set; else its first N pairs
    # Prepared token stores; empty means env MT_CACHE when set (a node's own folder in a
    # multi-node job), else `{run_dir}/cache`.
    cache_dir: str = ""
    protect: bool = False  # spans (%s, {0}, tags, URLs) as reserved pieces on both sides
    # One model for several directions (mt/languages.py): "src-tgt" items, each read as
    # `{split}.{src}` / `{split}.{tgt}` under `root` like one pair; empty: src_lang -> tgt_lang.
    pairs: list[str] = field(default_factory=list)
    # How often each pair is drawn: probability ~ (pairs in it / all pairs) ** (1 / T);
    # 1 is proportional to size, larger values lift the small pairs (fairseq, M2M).
    sampling_temperature: float = 1.0
    # Where a multilingual model reads which language to write: "target" makes the token
    # `<2xx>` the decoder's first input in place of BOS (M2M, NLLB), "source" puts it before
    # the source (Johnson et al. 2017, Marian). "target" kept zero-shot output in its language
    # more often (README: Many languages).
    lang_token: Literal["source", "target"] = "target"
    # Robustness as data (mt/data/augment.py): "modifier:probability" items, a pair getting at
    # most one, applied when the training stores are built; modifiers: uppercase, titlecase,
    # no_final_punct, typos (source only). Empty: the corpus as it is.
    augment: list[str] = field(default_factory=list)
    # Terms learnt: a share of the training lines annotated with the translations of some of
    # their words (mt/data/terms.py); off by default (`share` 0).
    terms: TermsConfig = field(default_factory=TermsConfig)


@dataclass
class TokenizerConfig:
    """sentencepiece settings; one joint model by default so embeddings can be tied."""

    type: Literal["unigram", "bpe"] = "unigram"  # sentencepiece's model type
    vocab_size: int = 8000  # pieces in the vocabulary (each side's, when not joint)
    joint: bool = True  # one vocabulary for both languages (needed by model.tie_embeddings)
    character_coverage: float = 1.0  # share of characters covered; rarer ones map to <unk>
    input_sentence_size: int = 1_000_000  # sentences sampled from the corpus to train it on
    # Subword regularisation: training text segmented by sampling (sentencepiece, nbest -1)
    # with this alpha: for unigram the smoothing of the piece probabilities (lower: more
    # varied and longer segmentations), for bpe the BPE-dropout rate. 0 = off (the best
    # segmentation); dev, test and decoding always use the best one.
    sample_alpha: float = 0.0
    # With sample_alpha: sampled copies of the training corpus prepared ahead (a token store
    # each); epoch e trains on copy e mod N, so the hot path holds no Python per token.
    sample_copies: int = 8


@dataclass
class ModelConfig:
    """Shape of the encoder-decoder Transformer; defaults are the paper's base model."""

    d_model: int = 512  # width of embeddings and every layer's output
    n_heads: int = 8  # attention heads per layer; must divide d_model
    d_ff: int = 2048  # inner width of each feed-forward block
    encoder_layers: int = 6  # encoder layers
    decoder_layers: int = 6  # decoder layers
    # What each decoder layer attends its own output with: self-attention (the paper), or an
    # SSRU (mt/ssru.py: a light recurrent unit, Bergamot's students; faster decoding steps)
    decoder_self: Literal["attention", "ssru"] = "attention"
    dropout: float = 0.1  # on embeddings+positions and on every residual branch
    attention_dropout: float = 0.0  # on the attention weights
    activation_dropout: float = 0.0  # inside the feed-forward block, after its activation
    norm: Literal["post", "pre"] = "post"  # layer norm after each residual add (paper) or before
    tie_embeddings: bool = True  # needs a joint vocabulary
    max_positions: int = 1024  # longest sequence in tokens the sinusoidal positions cover
    # What a model imported from another toolkit (mt/hub: HF Marian, M2M-100, NLLB) may need;
    # the defaults are mt's own Transformer, so a checkpoint without these keys is unchanged.
    # tie_output: with tie_embeddings false, the output layer is still the target table (Marian).
    tie_output: bool = False
    activation: Literal["relu", "swish", "gelu"] = "relu"  # inside the feed-forward block
    scale_embeddings: bool = True  # token embeddings times sqrt(d_model) before the positions
    # Sinusoids: "interleaved" (sin, cos of a frequency side by side: the paper), "halves" (all
    # sines, then cosines: Marian), "fairseq" (halves at 10000^(-i/(d/2-1)): M2M-100, NLLB).
    positions: Literal["interleaved", "halves", "fairseq"] = "interleaved"
    position_offset: int = 0  # row of the first position (M2M-100/NLLB: 2, fairseq's pad + 1)
    # A fixed bias added to the output logits (Marian's final_logits_bias; a row of -1e4 marks
    # an input-only token such as an imported model's decoder start); not trained.
    logits_bias: bool = False


# Model keys that shape training only, not what a trained model computes: a fine-tuning run may
# change them (mt/train/finetune.py), and an adapter's base fingerprint leaves them out.
DROPOUT_KEYS = ("dropout", "attention_dropout", "activation_dropout")


@dataclass
class TrainConfig:
    """The optimisation loop, its stopping rules and where it writes."""

    run_dir: str = "runs/default"  # where the run writes (also `--run-dir`)
    seed: int = 1  # weights, data order and dropout are reproducible for the same seed
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA when present
    # auto: bf16 autocast on CUDA (fp16 with a scaler where bf16 is missing); on a CPU bf16 only
    # where it computes bf16 natively (avx512_bf16 or amx_bf16; emulated bf16 runs slower than
    # fp32), else fp32; the start line says which and why
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    # CPU threads, at most the usable cores (affinity, cgroup quota); 0: as mt/device.py picks
    threads: int = 0
    loader_workers: int = 1  # processes that collate batches ahead of the step; 0 = in-process
    max_tokens: int = 4096  # per batch, counting padding
    accum_steps: int = 1  # batches whose gradients are summed into one update
    optimizer_betas: list[float] = field(default_factory=lambda: [0.9, 0.98])  # Adam's betas
    optimizer_eps: float = 1e-9  # Adam's epsilon
    weight_decay: float = 0.0  # L2 penalty added to the gradient (torch Adam's); 0: none
    # The learning-rate schedule: noam (the paper's), inverse_sqrt (fairseq's), constant (warmup
    # then flat; with `cooldown` below, warmup-stable-decay).
    schedule: Literal["noam", "inverse_sqrt", "constant"] = "noam"
    lr_scale: float = 1.0  # noam: lr = scale * d_model^-0.5 * min(step^-0.5, step*warmup^-1.5)
    lr: float = 5e-4  # inverse_sqrt, constant: peak lr reached at `warmup`
    warmup: int = 4000  # updates over which the learning rate rises
    # The last fraction of the budget (max_minutes, or max_steps when that ends first) over
    # which the learning rate falls linearly to 0, so a run ends annealed rather than at its
    # schedule's midway rate; with max_minutes it follows the clock. 0 = off; e.g. 0.2.
    cooldown: float = 0.0
    label_smoothing: float = 0.1  # probability mass spread over the vocabulary in the loss
    # Dropout by the epochs the budget reaches (DropoutByEpochs above); off unless `epochs` set.
    dropout_by_epochs: DropoutByEpochs = field(default_factory=DropoutByEpochs)
    # R-Drop's alpha: each batch goes through the model twice (two dropout masks), and the loss
    # adds alpha/2 times the mean of the two KL divergences between the predictions (the
    # paper's loss, halved). 0 = off; e.g. 5.
    rdrop: float = 0.0
    clip_norm: float = 0.0  # 0 disables gradient clipping
    max_bad_updates: int = 20  # updates in a row with a non-finite gradient before the run stops
    max_steps: int = 100_000  # updates before the run stops
    max_epochs: int = 0  # 0 = no limit
    max_minutes: float = 0.0  # wall-clock budget for training; 0 = no limit
    patience: int = 0  # evaluations without a better dev BLEU before stopping; 0 = never
    # Also write last.pt when this many minutes of training passed since the last one, so a
    # kill or a preemption loses at most this much work, not up to eval_every steps; 0 = off.
    checkpoint_minutes: float = 0.0
    # Seconds a process waits in a collective (all-reduce, barrier) under torchrun before the
    # run stops with one line: a hung or vanished peer ends the run instead of holding it.
    collective_timeout_s: float = 1800.0
    log_every: int = 100  # updates between log lines and metrics.jsonl records
    eval_every: int = 1000  # updates between evaluations on the dev set (and checkpoints)
    eval_bleu: bool = True  # greedy dev BLEU at each evaluation (picks `best.pt`)
    # Dev sets scored beside data.valid at each evaluation and before the first step (the
    # general domain beside a fine-tuning's own), each under its name (watch_bleu/NAME,
    # watch_chrf/NAME, watch_loss/NAME); a `keep_within` on one bounds which evaluation may
    # become best.pt (docs/fine-tuning.md: Keeping the general domain).
    watch: list[WatchConfig] = field(default_factory=list)
    keep_last: int = 3  # step checkpoints kept besides last.pt and best.pt
    # At the end, average the last N step checkpoints into averaged.pt and score it on the dev
    # set; it is copied to best.pt when it beats the best evaluation (0 = off; <= keep_last).
    average_last: int = 0
    # Exponential moving average of the weights, updated after every optimizer step with this
    # decay (warmed up as min(decay, (1+step)/(10+step))); dev evaluation, best.pt and the step
    # checkpoints use it, last.pt keeps the raw weights and the average. 0 = off; e.g. 0.999.
    ema_decay: float = 0.0
    # Beam sizes and length penalties (decode.alpha) tried on the dev set at the end of the
    # run; the best pair is stored in best.pt's decode section, which `mt translate` and
    # `mt eval` use unless a flag overrides it. Both empty = off; one empty keeps decode's value.
    tune_beam: list[int] = field(default_factory=list)
    tune_alpha: list[float] = field(default_factory=list)  # decode.alpha values to try (above)
    # Speed over the last tenths: the smallest beam whose dev BLEU is within this many points of
    # the best pair's (then its best alpha). 0 = the best pair. A distilled student's greedy
    # search is near its beam search (docs/studies/distillation.md), so it decodes greedy.
    tune_within: float = 0.0
    # TensorBoard events in RUN_DIR/tensorboard (mt/train/tensorboard.py): "auto" when the
    # package is installed; true without it stops the run at the start.
    tensorboard: Literal["auto", True, False] = "auto"
    compile: bool = False  # torch.compile the model: for CUDA (on CPU it made steps slower)
    # Fine-tuning (mt/train/finetune.py): start from this checkpoint's weights, tokenizer and
    # model config instead of random weights and a new tokenizer.
    init_from: str = ""
    # False: a fresh optimizer, step 1 and a new warmup. True: keep the checkpoint's optimizer
    # state (Adam's moments) and step, so the LR schedule continues where the base run stopped.
    init_keep_optimizer: bool = False
    # "keep": the checkpoint's tokenizer. "new": a tokenizer trained on this run's data (the
    # tokenizer section) with the checkpoint's embeddings for the pieces both share, fresh
    # ones for the rest (eole's update_vocab; mt/train/vocab_update.py).
    init_vocab: Literal["keep", "new"] = "keep"
    # True: the model section's encoder_layers / decoder_layers may be fewer than the
    # checkpoint's, and the model starts from evenly spaced ones of its layers (the first
    # always; mt/train/shrink.py): a distilled student from its teacher ("shrink and fine-tune").
    init_shrink: bool = False
    # Parts that keep their weights while fine-tuning; with tied embeddings, "embeddings"
    # freezes the output projection too.
    freeze: list[Literal["embeddings", "encoder", "decoder"]] = field(default_factory=list)


@dataclass
class FinetuneConfig:
    """How a fine-tuning run (`train.init_from`) changes its base model."""

    # "none": the base's weights train (those train.freeze leaves). "lora": the base stays
    # frozen and low-rank adapters on the projections of `lora_targets` train alone
    # (mt/adapt/lora.py); the run's checkpoints hold only them and the base's fingerprint,
    # decoded with `--adapter` on the base or folded in by `mt adapter merge`.
    adapter: Literal["none", "lora"] = "none"
    lora_rank: int = 8  # the rank r of each adapter: r * (inputs + outputs) values per projection
    lora_alpha: float = 16.0  # the adapter's update is scaled by lora_alpha / lora_rank
    lora_dropout: float = 0.0  # on an adapter's input while training
    lora_b_lr: float = 1.0  # B learns at this multiple of train.lr (LoRA+, Hayou et al. 2024)
    # The projections wrapped in every attention and feed-forward block (q, k, v, out; ffn:
    # both layers); embed: the embedding tables and output layer (one update where tied).
    lora_targets: list[Literal["q", "k", "v", "out", "ffn", "embed"]] = field(
        default_factory=lambda: ["q", "k", "v", "out", "ffn", "embed"]
    )
    # What keeps the fine-tuned model close to its base on what the base knew (mt/adapt/keep.py):
    # "kl" adds keep_weight times the KL divergence from the frozen base's next-token
    # distribution to the model's, per target token of the pairs of keep_on (Khayrallah et al.
    # 2018); "auto": the measured default (mt/adapt/defaults.py): the term on the replayed
    # pairs alone where a full fine-tune self-replays (replay_sources), none otherwise.
    keep: Literal["auto", "none", "kl"] = "auto"
    # The KL term's weight beside the loss; unset: 2 on the general pairs, 1 on every pair.
    keep_weight: float | None = None
    # The pairs keep: kl's term sees: "all", or "general": those of the corpora marked
    # `general` (and the replayed ones): the domain's pairs learn the domain unhindered, the
    # general ones learn the base's whole distribution rather than its one translation.
    keep_on: Literal["all", "general"] = "all"
    # General text in the source language (a file, one sentence a line, .gz too) that the base
    # of train.init_from translates once (mt/adapt/replay.py, with mt distill's machinery: kept
    # in RUN/replay/ under a digest of the base, the search and the lines; a rerun or a resumed
    # run translates nothing); its pairs train beside the domain's corpora at replay_weight:
    # replay of what the base says on general text, for a base whose own data is absent.
    replay_sources: str = ""
    # The replayed pairs' weight, as data.corpora's: the share of them each epoch sees (0.25: a
    # fresh random quarter). More keeps more of the general domain and less of the domain's
    # gain (docs/fine-tuning.md measures the trade). Unset: 0.1 beside the KL term on the
    # replayed pairs (keep: auto's), 0.25 without it.
    replay_weight: float | None = None
    # The base's beam on the replay sources (1: greedy, 2.3x faster here, and its repetitions
    # cost the general domain more: docs/fine-tuning.md).
    replay_beam: int = 5
    replay_max_lines: int = 0  # the first this many lines of replay_sources (0: all)


@dataclass
class DistillConfig:
    """Sequence-level knowledge distillation (`mt distill`, mt/distill.py; Kim and Rush 2016):
    the teachers translate the training sources of this config with beam search and the model
    this config describes, the student, trains on their translations.

    The translations are kept in the run directory under a digest of the teachers' weights,
    these settings and the source lines: a rerun with the same ones translates nothing, a
    changed teacher or beam translates again. `mt train` on the same config ignores this
    section and trains on the original pairs (the student's baseline).
    """

    # The teacher checkpoints (a run directory means its best.pt; an imported model is a
    # checkpoint like any other; `${ENV}` is expanded); several decode as an ensemble, which
    # must share a vocabulary.
    teachers: list[str] = field(default_factory=list)
    beam: int = 5  # the teachers' beam size (one output per source line)
    alpha: float | None = None  # beam search's length penalty; unset: the first teacher's
    max_tokens: int = 0  # tokens per translation batch; 0: the first teacher's decode.max_tokens
    buffer_lines: int = 0  # lines read ahead and sorted by length; 0: the teacher's (2000)
    # Lines per chunk, the unit written once and skipped when the job starts again (a multiple
    # of the buffer lines); 0: the buffer lines.
    chunk_lines: int = 0
    workers: int = 1  # CPU processes translating shares of each buffer (decode.workers)
    # The original pairs trained beside the teachers' translations, with this weight (as
    # data.corpora's: 1 sees each once per epoch); 0: the translations alone.
    keep_original: float = 0.0
    # N > 1: the teachers keep their N best translations of a line, and the one nearest its
    # reference (sentence BLEU) is the target: Kim and Rush's sequence-level interpolation,
    # which moves the targets toward the references while they stay the teachers' own output.
    # 0 (or 1): the teachers' best.
    interpolate: int = 0


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)


def to_dict(cfg: Config) -> dict[str, Any]:
    return dataclasses.asdict(cfg)

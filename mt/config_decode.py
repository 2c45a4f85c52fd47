"""The `decode` section: the search settings, each defined once with its one description, and
their rules.

A decode setting is more than a config key: it is a caller's override of a checkpoint's value
(mt.translation.options.DecodeOptions), a flag of `mt translate` and of other commands, and an
option of the server's requests, all made from the fields below; `setting` keeps the one text
that the config reference and every `--help` show. The section joins the others in
mt/config.py (`Config.decode`); its rules (`decode_checks`) are the same for a config file and
a caller's overrides, named as each caller names a setting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from mt.config_bounds import (
    MAX_BATCH_TOKENS,
    MAX_BEAM,
    MAX_LENGTH,
    MAX_SEED,
    MAX_SHORTLIST,
    in_range,
    raise_first,
)


def setting(default: Any, text: str, needs: str = "") -> Any:
    """A decode setting: its default and its one description, which the config reference and
    the `--help` of each command offering it as a flag both show (mt/cli/options.py reads
    `metadata["help"]`), so a new setting is written once. `needs`: the switch a caller must
    turn on to override this one (`topk` means nothing without `sample`; mt.translation.session
    refuses the override alone)."""
    return field(default=default, metadata={"help": " ".join(text.split()), "needs": needs})


@dataclass
class DecodeConfig:
    """Search settings used by `mt translate`, `mt eval` and dev BLEU.

    Each field is also a caller's override (mt.translation.options.DecodeOptions), a flag of
    `mt translate` and, where mt.translation.options.OFFERED says so, of other commands and of the
    server's requests: adding a field here (and its rule in mt/config_rules.py) is all the
    wiring a new setting needs before its search code.
    """

    beam: int = setting(5, "beam size")
    nbest: int = setting(
        1, "hypotheses written per input line (at most the beam): 'i ||| text ||| score' lines"
    )
    alpha: float = setting(
        0.6,
        "length penalty of beam search, GNMT's ((5 + len) / 6) ** alpha (see `penalty`); "
        "train.tune_alpha stores the value chosen on dev",
    )
    penalty: Literal["gnmt", "power"] = setting(
        "gnmt",
        'How beam search divides a finished score by its length: "gnmt" ((5 + len) / 6) ** '
        "alpha, or \"power\" len ** alpha (HF generate's length_penalty, fairseq's lenpen).",
    )
    length_offset: int = setting(
        0, "tokens the penalty counts before the output (M2M's language: 1)"
    )
    stop_early: bool = setting(
        False,
        "beam search: end a sentence once its best candidate ends (CTranslate2's rule; faster) "
        "instead of after beam finished hypotheses",
    )
    hf_stopping: bool = setting(
        False,
        "Beam search ends a sentence as HF generate does by default (early_stopping=False): "
        "once it has beam finished hypotheses and its best running one, divided by its length "
        "so far, scores no better than the worst of them; until then a better ending replaces "
        "the worst. The EOS forced at the length limit then adds 0 to a score, as HF's "
        "forced_eos_token_id. Off: after beam finished hypotheses (fairseq's rule, HF's "
        "early_stopping=True).",
    )
    no_repeat_ngram: int = setting(
        0, "> 0: no n-gram of this many tokens occurs twice in an output"
    )
    int8: bool = setting(
        False, "CPU only: Linear layers dynamically quantised to int8 (faster, a small BLEU cost)"
    )
    dtype: Literal["auto", "fp32", "bf16", "fp16"] = setting(
        "auto",
        "what decoding computes in: auto is bf16 on a GPU with bf16 (else fp16) and on a CPU "
        "that computes bf16 natively (avx512_bf16 or amx_bf16), fp32 on other CPUs; fp16: CUDA "
        "only; not with int8. bf16 and fp16 decode a half copy of the weights (the log-softmax "
        "stays fp32). The checkpoint's value applies on CUDA; a CPU decodes as `--dtype` says "
        "(default auto).",
    )
    gemm: Literal["auto", "torch", "onednn"] = setting(
        "auto",
        "the matrix multiply of decoding on a CPU: onednn (oneDNN, the library CTranslate2 "
        "uses) for the output layer in fp32 (faster on AMD CPUs; logits differ from torch's in "
        "the last bits), for every Linear layer in bf16, on weights packed once, and with int8 "
        "for oneDNN's int8 kernels; torch: torch's default (MKL in fp32, FBGEMM's int8 on x86); "
        "auto: onednn where this torch has it and the decode is fp32 or bf16 on a CPU, else "
        "torch (int8 included: FBGEMM's was the faster on the CPU measured).",
    )
    max_len_a: float = setting(1.2, "output length limit a * src_len + b: its a")
    max_len_b: int = setting(10, "output length limit a * src_len + b: its b, in tokens")
    max_tokens: int = setting(
        4096,
        "Tokens per batch; a row counts its longest known side (the source when translating, "
        "source or target+EOS when scoring).",
    )
    buffer_lines: int = setting(2000, "lines read ahead, sorted by length, then written in order")
    workers: int = setting(
        1,
        "CPU: processes that decode shares of each buffer side by side, one thread each "
        "(CTranslate2's inter_threads); up to the usable cores is faster than one process's "
        "threads on files of many lines. 1: one process, --threads threads.",
    )
    greedy: bool = setting(
        False, "greedy search instead of beam search (as is beam 1 with nbest 1)"
    )
    sample: bool = setting(False, "draw each token (back-translation) instead of searching")
    topk: int = setting(0, "sample: among the k most probable tokens (0: all)", "sample")
    topp: float = setting(
        1.0, "sample: nucleus, the most probable tokens with mass p (1: all)", "sample"
    )
    temperature: float = setting(
        1.0, "sample: > 1 flattens the distribution, < 1 sharpens it", "sample"
    )
    seed: int = setting(
        1, "sample: the draws are reproducible for the same input and batch settings", "sample"
    )
    shortlist: int = setting(
        0,
        "> 0: write only each batch's candidates from the checkpoint's lexical shortlist (`mt "
        "shortlist`): this many best target pieces per source piece (at most the number it "
        "was built with), the frequent pieces and copies; the output layer then computes only "
        "those rows (faster on a large vocabulary, a small BLEU cost). 0: the whole vocabulary.",
    )
    glossary_boost: float = setting(
        3.0,
        "A glossary's target terms made likelier in the first search of a line that holds "
        "them (the guard's, and --glossary-soft's): this is added to the logits of each "
        "term's first piece, and of its next piece once begun, until the term is written; "
        "fewer lines then need the guard's constrained second search (0: none; docs/"
        "decoding.md: Glossaries).",
    )
    target_vocab_ratio: float = setting(
        0.1,
        "A multilingual model writes only its target language's pieces (mt/languages.py): "
        "those seen in that language's text at a rate >= this times their highest rate in "
        "another language (0: every piece seen). Off with `--no-target-vocab`.",
    )


def _key(key: str) -> str:
    return key


def decode_checks(d: DecodeConfig, name: Callable[[str], str] = _key) -> list[tuple[bool, str]]:
    """The rules of decoding settings, for a config file and for a caller's overrides alike;
    `name` turns a key ("decode.beam") into what the caller calls it ("--beam")."""
    n = name
    return [
        in_range(n("decode.beam"), d.beam, 1, MAX_BEAM),
        (
            0 < d.nbest <= d.beam,
            f"{n('decode.nbest')} must be between 1 and the beam size {n('decode.beam')} "
            f"({d.beam:,}), got {d.nbest:,}",
        ),
        (
            d.nbest == 1 or not (d.greedy or d.sample),
            f"{n('decode.nbest')} needs beam search; it cannot be combined with "
            f"{n('decode.greedy') if d.greedy else n('decode.sample')}",
        ),
        (
            not (d.greedy and d.sample),
            f"{n('decode.sample')} draws one output per line: it cannot be combined with "
            f"{n('decode.greedy')}",
        ),
        in_range(n("decode.max_tokens"), d.max_tokens, 1, MAX_BATCH_TOKENS),
        (0.0 <= d.alpha <= 10.0, f"{n('decode.alpha')} must be in [0, 10]"),
        in_range(n("decode.length_offset"), d.length_offset, 0, 16),
        (
            d.penalty in ("gnmt", "power"),
            f"{n('decode.penalty')} must be gnmt or power, got {d.penalty!r}",
        ),
        (
            not (d.hf_stopping and d.stop_early),
            f"{n('decode.hf_stopping')} and {n('decode.stop_early')} are two stopping rules: "
            "choose one",
        ),
        in_range(n("decode.buffer_lines"), d.buffer_lines, 1, 10_000_000),
        in_range(n("decode.workers"), d.workers, 1, 1024),
        (
            d.workers == 1 or not d.sample,
            f"{n('decode.workers')} > 1 cannot be combined with {n('decode.sample')}: the draws "
            "would depend on which worker took which lines",
        ),
        in_range(n("decode.no_repeat_ngram"), d.no_repeat_ngram, 0, MAX_LENGTH),
        (d.max_len_a >= 0, f"{n('decode.max_len_a')} must be >= 0"),
        (d.max_len_b >= 0, f"{n('decode.max_len_b')} must be >= 0"),
        (d.topk >= 0, f"{n('decode.topk')} must be >= 0 (0: no limit), got {d.topk:,}"),
        (0 < d.topp <= 1, f"{n('decode.topp')} must be in (0, 1], got {d.topp}"),
        (0 < d.temperature, f"{n('decode.temperature')} must be > 0, got {d.temperature}"),
        in_range(n("decode.seed"), d.seed, 0, MAX_SEED),
        in_range(n("decode.target_vocab_ratio"), d.target_vocab_ratio, 0.0, 1.0),
        in_range(n("decode.shortlist"), d.shortlist, 0, MAX_SHORTLIST),
        in_range(n("decode.glossary_boost"), d.glossary_boost, 0.0, 100.0),
        (
            d.dtype in ("auto", "fp32", "bf16", "fp16"),
            f"{n('decode.dtype')} must be one of auto, fp32, bf16, fp16, got {d.dtype!r}",
        ),
    ]


def validate_decode(d: DecodeConfig, name: Callable[[str], str] = _key) -> None:
    """Check decoding settings after a caller's overrides (flags, a request's options)."""
    raise_first(decode_checks(d, name))

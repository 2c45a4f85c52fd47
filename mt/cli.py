"""The `mt` command line: parse flags, call one function per command, map errors to exit codes.

User errors (MtError) print one line on stderr and exit with their code; Ctrl-C exits 130 and a
closed pipe (`mt translate | head`) exits quietly. Tracebacks are left for real bugs.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TextIO

import typer

from mt.errors import EXIT_GATE, EXIT_INTERRUPTED, MtError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Train Transformer translation models and use them.",
)


def _device(name: str):
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise MtError("--device cuda: no CUDA device is available")
    if name not in ("cpu", "cuda"):
        raise MtError(f"--device must be cpu, cuda or auto, got {name!r}")
    return torch.device(name)


def _read_text_file(path: Path) -> list[str]:
    from mt.data.corpus import read_lines

    return read_lines(path)


# The options `mt train` and `mt prepare` share: both read a config into a run directory.
ConfigArg = Annotated[Path, typer.Argument(help="YAML config file.")]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a config value: section.key=value (repeatable)."),
]
RunDirOption = Annotated[
    Path | None, typer.Option(help="Run directory (default: train.run_dir of the config).")
]


def _load(config: Path, set_: list[str] | None, run_dir: Path | None):
    """The config with overrides applied and `--run-dir` taking the place of train.run_dir."""
    from mt.config import load_config

    cfg = load_config(config, set_ or [])
    if run_dir is not None:
        cfg.train.run_dir = str(run_dir)
    return cfg


@app.command()
def train(
    config: ConfigArg,
    set_: SetOption = None,
    run_dir: RunDirOption = None,
    resume: Annotated[bool, typer.Option(help="Continue the run in the run directory.")] = False,
    init_from: Annotated[
        Path | None,
        typer.Option(
            help="Fine-tune: start from this checkpoint's weights, tokenizer and model "
            "(sets train.init_from)."
        ),
    ] = None,
) -> None:
    """Train a tokenizer and a Transformer as CONFIG says."""
    from mt.memory import check_model_fits, keep_freed_memory

    keep_freed_memory()

    if init_from is not None:  # an override, so validation sees it (train.freeze needs it)
        set_ = [*(set_ or []), f"train.init_from={json.dumps(str(init_from))}"]
    cfg = _load(config, set_, run_dir)  # before importing torch: config errors come fast
    # A model too big for this machine, refused before the data is prepared (the vocabulary
    # is the configured size here; build_model checks again with the trained one).
    check_model_fits(cfg.model, cfg.tokenizer.vocab_size, cfg.tokenizer.vocab_size)
    from mt.train.trainer import train as run_training

    state = run_training(cfg, Path(cfg.train.run_dir), resume)
    typer.echo(f"done: step {state.step}, checkpoints in {cfg.train.run_dir}", err=True)


@app.command()
def prepare(
    config: ConfigArg,
    set_: SetOption = None,
    run_dir: RunDirOption = None,
) -> None:
    """Train the tokenizer and build the token stores, without training.

    A cluster job can prepare once on a CPU node; `mt train` on the same run directory (and
    data.cache_dir) then maps the stores and starts at once.
    """
    from mt.data.prepare import prepare as run_prepare
    from mt.train import finetune
    from mt.train.rundir import lock_run_dir

    cfg = _load(config, set_, run_dir)
    folder = Path(cfg.train.run_dir)
    lock = lock_run_dir(folder, "prepare")
    try:
        # A fine-tuning run (train.init_from) prepares its data with the checkpoint's tokenizer.
        finetune.write_tokenizer(finetune.load_init(cfg, folder, resume=False), folder)
        run_prepare(cfg, folder)
    finally:
        lock.release()


STOP_EARLY_HELP = (
    "Beam search: end a sentence when its best candidate ends (CTranslate2's rule; faster) "
    "instead of after beam-size finished hypotheses (default: decode.stop_early)."
)

PROTECT_HELP = (
    "Keep placeholders (%s, {0}, $VAR), entities, tags, URLs and e-mail addresses exactly as "
    "written (see README, Software strings and HTML)."
)

INT8_HELP = "CPU: int8 Linear layers, faster at a small BLEU cost (default: decode.int8)."


def _on(sampling, dev):
    """The sampling generator moved to `dev` with the same seed (draws happen there)."""
    import torch

    return torch.Generator(device=dev).manual_seed(sampling.generator.initial_seed())


def _check_beam(beam: int) -> None:
    from mt.config import MAX_BEAM

    if not 1 <= beam <= MAX_BEAM:
        raise MtError(f"--beam must be between 1 and {MAX_BEAM:,}, got {beam:,}")


def _check_max_tokens(max_tokens: int) -> None:
    from mt.config import MAX_BATCH_TOKENS

    if not 1 <= max_tokens <= MAX_BATCH_TOKENS:
        raise MtError(
            f"--max-tokens must be between 1 and {MAX_BATCH_TOKENS:,}, got {max_tokens:,}"
        )


def _load_models(paths: list[Path], dev):
    """One checkpoint's Loaded, or for several an Ensemble in the first one's Loaded (its
    tokenizer and decode settings); members must share the tokenizer."""
    from mt.checkpoint import load_model
    from mt.decode.ensemble import Ensemble

    first = load_model(paths[0], dev)
    if len(paths) == 1:
        return first
    members = [first.model]
    for path in paths[1:]:
        other = load_model(path, dev)
        if other.tokenizer.fingerprint() != first.tokenizer.fingerprint():
            raise MtError(
                f"{path}: its tokenizer differs from {paths[0]}'s; an ensemble needs one "
                "vocabulary (train the members with the same spm.model)"
            )
        members.append(other.model)
    first.model = Ensemble(members).eval()
    return first


def _translator(
    checkpoint_path: Path | list[Path],
    device: str,
    beam: int | None,
    nbest: int,
    max_tokens: int | None,
    greedy: bool,
    alignment: bool,
    stop_early: bool | None = None,
    int8: bool | None = None,
    sampling=None,
    no_repeat_ngram: int | None = None,
    with_scores: bool = False,
    protect: bool = False,
):
    from mt.config import MAX_LENGTH
    from mt.decode.translator import Translator

    dev = _device(device)
    paths = checkpoint_path if isinstance(checkpoint_path, list) else [checkpoint_path]
    loaded = _load_models(paths, dev)
    dcfg = loaded.cfg.decode
    if beam is not None:
        _check_beam(beam)
        dcfg.beam = beam
    if greedy and nbest > 1:
        raise MtError("--nbest needs beam search; it cannot be combined with --greedy")
    if nbest < 1 or nbest > dcfg.beam:
        raise MtError(f"--nbest must be between 1 and the beam size ({dcfg.beam}), got {nbest}")
    dcfg.nbest = nbest
    if stop_early is not None:
        dcfg.stop_early = stop_early
    if int8 is not None:
        dcfg.int8 = int8
    if dcfg.int8 and dev.type != "cpu":
        raise MtError("int8 decoding (--int8, decode.int8) runs on CPU only; add --device cpu")
    if max_tokens is not None:
        _check_max_tokens(max_tokens)
        dcfg.max_tokens = max_tokens
    if no_repeat_ngram is not None:
        if not 0 <= no_repeat_ngram <= MAX_LENGTH:
            raise MtError(
                f"--no-repeat-ngram must be between 0 and {MAX_LENGTH:,}, got {no_repeat_ngram:,}"
            )
        dcfg.no_repeat_ngram = no_repeat_ngram
    if sampling is not None and sampling.generator is not None:
        sampling.generator = sampling.generator if dev.type == "cpu" else _on(sampling, dev)
    try:
        return Translator(
            loaded.model,
            loaded.tokenizer,
            dcfg,
            dev,
            greedy=greedy,
            alignment=alignment,
            sampling=sampling,
            with_scores=with_scores,
            protect=protect,
        )
    except ValueError as err:  # a decoding option this model or torch cannot do
        raise MtError(f"{checkpoint_path}: {err}") from None


def _sampling(
    sample: bool,
    topk: int | None,
    topp: float | None,
    temperature: float | None,
    seed: int | None,
    greedy: bool,
    beam: int | None,
    nbest: int,
):
    """The Sampling of --sample and its options, or None; misuse is one line."""
    from mt.config import MAX_SEED

    given = [
        f
        for f, v in (
            ("--topk", topk),
            ("--topp", topp),
            ("--temperature", temperature),
            ("--seed", seed),
        )
        if v is not None
    ]
    if not sample:
        if given:
            raise MtError(f"{given[0]} needs --sample")
        return None
    if greedy or beam is not None or nbest != 1:
        raise MtError(
            "--sample draws one output per line: it cannot be combined with "
            "--greedy, --beam or --nbest"
        )
    if topk is not None and topk < 0:
        raise MtError(f"--topk must be >= 0 (0: no limit), got {topk:,}")
    if topp is not None and not 0 < topp <= 1:
        raise MtError(f"--topp must be in (0, 1], got {topp}")
    if temperature is not None and not (0 < temperature < float("inf")):
        raise MtError(f"--temperature must be > 0, got {temperature}")
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise MtError(f"--seed must be between 0 and {MAX_SEED:,}, got {seed:,}")
    import torch

    from mt.decode.search import Sampling

    generator = torch.Generator().manual_seed(seed if seed is not None else 1)
    return Sampling(
        topk or 0,
        1.0 if topp is None else topp,
        1.0 if temperature is None else temperature,
        generator,
    )


def _write_output(output: Path | None, write: Callable[[TextIO], object]) -> None:
    """Run `write` on `output` (stdout when None), a file written whole or not at all.

    A closed stdout (`mt translate | head`) ends quietly, as Unix tools do: typer would turn
    BrokenPipeError into exit 1.
    """
    from mt.atomic import write_with

    if output is not None:
        write_with(output, "the output", write, mode="w")
        return
    try:
        write(sys.stdout)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _warn_truncated(count: int, max_src: int, what: str) -> None:
    """One warning line when `count` lines were cut to the model's longest input."""
    if count:
        typer.echo(
            f"warning: {count} {what} line(s) were longer than the model's {max_src} "
            "positions and were truncated",
            err=True,
        )


def _text_lines(stream):
    """Lines of a byte stream; invalid UTF-8 is reported with its line number."""
    for i, raw in enumerate(stream, 1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MtError(f"{getattr(stream, 'name', '<stdin>')}:{i}: invalid UTF-8") from None


@app.command()
def translate(
    checkpoints: Annotated[
        list[Path],
        typer.Argument(
            help="A checkpoint written by mt train; several decode as an ensemble.",
            metavar="CHECKPOINT...",
        ),
    ],
    input: Annotated[Path | None, typer.Option("--input", "-i", help="Default: stdin.")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Default: stdout.")] = None,
    beam: Annotated[int | None, typer.Option(help="Beam size (default: from the config).")] = None,
    nbest: Annotated[int, typer.Option(help="Lines per input: 'i ||| text ||| score'.")] = 1,
    max_tokens: Annotated[int | None, typer.Option(help="Source tokens per batch.")] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "auto",
    greedy: Annotated[bool, typer.Option(help="Greedy search instead of beam search.")] = False,
    alignment: Annotated[
        bool, typer.Option(help="Append a tab and 'src-tgt' attention alignment pairs.")
    ] = False,
    stop_early: Annotated[bool | None, typer.Option(help=STOP_EARLY_HELP)] = None,
    int8: Annotated[bool | None, typer.Option(help=INT8_HELP)] = None,
    input_format: Annotated[
        str,
        typer.Option(
            help='text, html (one fragment per line), or jsonl: {"src": ..., "prefix": ..., '
            '"constraints": [...]}.'
        ),
    ] = "text",
    output_format: Annotated[
        str, typer.Option(help="text, or jsonl: translation, score, nbest, tokens, alignment.")
    ] = "text",
    no_repeat_ngram: Annotated[
        int | None, typer.Option(help="No n-gram of N tokens twice in an output (0: off).")
    ] = None,
    sample: Annotated[
        bool, typer.Option(help="Draw each token (back-translation) instead of searching.")
    ] = False,
    topk: Annotated[int | None, typer.Option(help="--sample: among the k best (0: all).")] = None,
    topp: Annotated[
        float | None, typer.Option(help="--sample: nucleus, the best tokens with mass p.")
    ] = None,
    temperature: Annotated[float | None, typer.Option(help="--sample: > 1 flattens.")] = None,
    seed: Annotated[int | None, typer.Option(help="--sample: random seed (default 1).")] = None,
    protect: Annotated[bool, typer.Option(help=PROTECT_HELP)] = True,
) -> None:
    """Translate one sentence per line, from stdin (or --input) to stdout (or --output)."""
    from mt.decode.requests import read_requests
    from mt.decode.translator import write_translations

    if input is not None and not input.is_file():
        raise MtError(f"{input}: input file not found")
    if input_format not in ("text", "jsonl", "html"):
        raise MtError(f"--input-format must be text, jsonl or html, got {input_format!r}")
    if output_format not in ("text", "jsonl"):
        raise MtError(f"--output-format must be text or jsonl, got {output_format!r}")
    sampling = _sampling(sample, topk, topp, temperature, seed, greedy, beam, nbest)
    translator = _translator(
        checkpoints,
        device,
        beam,
        nbest,
        max_tokens,
        greedy,
        alignment,
        stop_early,
        int8,
        sampling,
        no_repeat_ngram,
        with_scores=output_format == "jsonl",
        protect=protect,
    )
    if input is None and sys.stdin.isatty():
        translator.cfg.buffer_lines = 1  # someone is typing: answer each line at once
    src = open(input, "rb") if input is not None else sys.stdin.buffer
    name = str(input) if input is not None else "<stdin>"
    with src:
        if input_format == "html":
            from mt.decode.markup import translate_html

            translations = translate_html(translator, _text_lines(src), name)
        else:
            translations = translator.translate_stream(
                read_requests(_text_lines(src), input_format, name)
            )
        _write_output(
            output,
            lambda out: write_translations(
                translations,
                out,
                nbest=nbest,
                alignment=alignment,
                jsonl=output_format == "jsonl",
            ),
        )
    _warn_truncated(translator.truncated, translator.max_src, "input")


@app.command(name="eval")
def evaluate(
    checkpoints: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Checkpoint to translate with; several decode as an ensemble.",
            metavar="CHECKPOINT",
        ),
    ] = None,
    src: Annotated[Path | None, typer.Option(help="Source file to translate.")] = None,
    ref: Annotated[Path | None, typer.Option(help="Reference translations.")] = None,
    hyp: Annotated[Path | None, typer.Option(help="Score this output instead.")] = None,
    beam: Annotated[int | None, typer.Option(help="Beam size (default: from the config).")] = None,
    greedy: Annotated[bool, typer.Option(help="Greedy search.")] = False,
    stop_early: Annotated[bool | None, typer.Option(help=STOP_EARLY_HELP)] = None,
    int8: Annotated[bool | None, typer.Option(help=INT8_HELP)] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Source tokens per batch.")] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "auto",
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    min_bleu: Annotated[
        float | None, typer.Option(help="Exit 1 when BLEU is below this (a CI gate).")
    ] = None,
    protect: Annotated[bool, typer.Option(help=PROTECT_HELP)] = True,
) -> None:
    """Score a checkpoint or an ensemble (CHECKPOINT... --src --ref) or a translation (--hyp
    --ref)."""
    from mt.metrics import format_scores, score

    if ref is None:
        raise MtError("mt eval needs --ref")
    refs = _read_text_file(ref)
    if hyp is not None:
        if checkpoints or src is not None:
            raise MtError("mt eval: give either --hyp or CHECKPOINT with --src, not both")
        hyps = _read_text_file(hyp)
        where = hyp
    else:
        if not checkpoints or src is None:
            raise MtError("mt eval needs CHECKPOINT and --src (or --hyp)")
        sources = _read_text_file(src)
        if len(sources) != len(refs):
            raise MtError(f"{src} has {len(sources)} lines but {ref} has {len(refs)}")
        translator = _translator(
            checkpoints,
            device,
            beam,
            1,
            max_tokens,
            greedy,
            False,
            stop_early,
            int8,
            protect=protect,
        )
        hyps = [t.text for t in translator.translate_stream(sources)]
        where = src
    if len(hyps) != len(refs):
        raise MtError(f"{where} has {len(hyps)} lines but {ref} has {len(refs)}")
    scores = score(hyps, refs)
    if json_:
        typer.echo(json.dumps(scores.as_dict()))
    else:
        typer.echo(format_scores(scores))
    if min_bleu is not None and scores.bleu < min_bleu:
        typer.echo(f"BLEU {scores.bleu:.2f} is below --min-bleu {min_bleu}", err=True)
        raise typer.Exit(EXIT_GATE)


@app.command()
def attention(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint written by mt train.")],
    src: Annotated[str, typer.Option("--src", help="The sentence to translate and show.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="PNG file.")] = Path("attn.png"),
    layer: Annotated[int, typer.Option(help="Layer; negative counts from the top.")] = -1,
    head: Annotated[
        int | None, typer.Option(help="One head; -1 draws every head; default: head mean.")
    ] = None,
    beam: Annotated[int | None, typer.Option(help="Beam size (default: from the config).")] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "cpu",
) -> None:
    """Draw encoder, decoder and encoder-decoder attention for one translated sentence."""
    from mt.checkpoint import load_model
    from mt.decode.attention import sentence_attention
    from mt.plot import attention_figure, save_figure

    if not src.strip():
        raise MtError("--src is empty")
    loaded = load_model(checkpoint, _device(device))
    if beam is not None:
        _check_beam(beam)
        loaded.cfg.decode.beam = beam
    n_heads = loaded.cfg.model.n_heads
    if head is not None and not -1 <= head < n_heads:
        raise MtError(f"--head must be -1 or between 0 and {n_heads - 1}, got {head}")
    try:
        text, views = sentence_attention(
            loaded.model, loaded.tokenizer, src.strip(), loaded.cfg.decode, layer
        )
    except IndexError:
        raise MtError(f"--layer {layer} is out of range for this model") from None
    title = f"{src.strip()}  ->  {text}   (layer {layer})"
    save_figure(attention_figure(views, title, head), output)
    typer.echo(text)


@app.command()
def plot(
    run_dir: Annotated[Path, typer.Argument(help="A run directory of mt train.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="PNG file.")] = Path("curves.png"),
) -> None:
    """Draw training loss, validation loss, dev BLEU and learning rate over steps."""
    from mt.plot import curves_figure, read_metrics, save_figure

    records = read_metrics(run_dir / "metrics.jsonl")
    save_figure(curves_figure(records, str(run_dir)), output)


@app.command()
def average(
    checkpoints: Annotated[list[Path], typer.Argument(help="Checkpoints of one run.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Averaged checkpoint.")],
) -> None:
    """Average the weights of several checkpoints (e.g. the last ones of a run) into one."""
    from mt.checkpoint import average as average_weights
    from mt.checkpoint import save

    save(average_weights(checkpoints), output)
    typer.echo(f"averaged {len(checkpoints)} checkpoints into {output}", err=True)


@app.command()
def score(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint written by mt train.")],
    src: Annotated[Path, typer.Option(help="Source sentences, one per line.")],
    tgt: Annotated[Path, typer.Option(help="Their translations to score, line by line.")],
    json_: Annotated[
        bool, typer.Option("--json", help="One JSON object per line, with token scores.")
    ] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Default: stdout.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Tokens per batch.")] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "auto",
    int8: Annotated[bool | None, typer.Option(help=INT8_HELP)] = None,
    protect: Annotated[
        bool,
        typer.Option(help="A model trained with data.protect: score spans as its placeholders."),
    ] = True,
) -> None:
    """Score given translations (forced decoding): 'LOGPROB<TAB>SCORE' per pair, SCORE
    length-normalised as beam search ranks it."""
    from mt.checkpoint import load_model
    from mt.decode.score import Scorer, count_parallel, score_files, write_scores

    for path in (src, tgt):
        if not path.is_file():
            raise MtError(f"{path}: file not found")
    if max_tokens is not None:
        _check_max_tokens(max_tokens)
    count_parallel(src, tgt)  # unequal files or bad UTF-8 fail before the model loads
    dev = _device(device)
    loaded = load_model(checkpoint, dev)
    dcfg = loaded.cfg.decode
    dcfg.max_tokens = max_tokens or dcfg.max_tokens
    dcfg.int8 = dcfg.int8 if int8 is None else int8
    if dcfg.int8 and dev.type != "cpu":
        raise MtError("int8 scoring (--int8, decode.int8) runs on CPU only; add --device cpu")
    scorer = Scorer(loaded.model, loaded.tokenizer, dcfg, dev, protect=protect)
    scores = score_files(scorer, src, tgt, dcfg.buffer_lines)
    _write_output(output, lambda out: write_scores(scores, out, json_))
    _warn_truncated(scorer.truncated, scorer.max_src, "source")


@app.command(name="export")
def export_model(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint written by mt train.")],
    out_dir: Annotated[Path, typer.Argument(help="Folder to write (must not exist).")],
    to: Annotated[str, typer.Option("--to", help="ctranslate2 or marian (HF transformers).")],
    quantization: Annotated[
        str | None, typer.Option(help="ctranslate2: int8, int8_float16, float16, bfloat16, ...")
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing OUT_DIR.")] = False,
) -> None:
    """Export a checkpoint for CTranslate2 or HF transformers (needs `pip install 'mt[export]'`)."""
    from mt.export import export

    export(checkpoint, to, out_dir, quantization, force)
    typer.echo(f"exported {checkpoint} to {out_dir} ({to})", err=True)


def main() -> None:
    """Entry point: run the app, turning user errors and interrupts into one line + exit code."""
    try:
        rc = app(standalone_mode=False)
    except MtError as err:
        print(f"mt: error: {err}", file=sys.stderr)
        sys.exit(err.code)
    except KeyboardInterrupt:
        print("mt: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except typer.Exit as ex:
        sys.exit(ex.exit_code)
    except Exception as err:
        # Usage errors (bad flags) come from the click that typer vendors; they know how to
        # show themselves. Anything else is a bug and keeps its traceback.
        if hasattr(err, "show") and hasattr(err, "exit_code"):
            err.show()
            sys.exit(err.exit_code)
        raise
    if rc == EXIT_INTERRUPTED:  # typer turns Ctrl-C into a return code of 130
        print("mt: interrupted", file=sys.stderr)
    if isinstance(rc, int) and rc:
        sys.exit(rc)

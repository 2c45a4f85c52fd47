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


# Options several decoding commands share, with one meaning each (DecodeConfig's fields).
CheckpointsArg = Annotated[
    list[Path],
    typer.Argument(
        help="Checkpoints written by mt train (a run directory means its best.pt); several "
        "decode as an ensemble.",
        metavar="CHECKPOINT...",
    ),
]
DeviceOption = Annotated[str, typer.Option(help="cpu, cuda or auto.")]
BeamOption = Annotated[int | None, typer.Option(help="Beam size (default: decode.beam).")]
MaxTokensOption = Annotated[
    int | None,
    typer.Option(
        help="Tokens per batch, each row counting its longest known side (decode.max_tokens)."
    ),
]
StopEarlyOption = Annotated[
    bool | None,
    typer.Option(
        help="Beam search: end a sentence when its best candidate ends (CTranslate2's rule; "
        "faster) instead of after beam-size finished hypotheses (default: decode.stop_early)."
    ),
]
Int8Option = Annotated[
    bool | None,
    typer.Option(help="CPU: int8 Linear layers, faster at a small BLEU cost (decode.int8)."),
]


def _session(checkpoints: list[Path], device: str):
    """The front door (mt.decode.session), saying on stderr when a run directory stood for
    its best.pt."""
    from mt.decode.session import Session

    session = Session(checkpoints, device)
    for given, path in zip(checkpoints, session.paths):
        if given != path:
            typer.echo(f"mt: {given} is a run directory; using {path}", err=True)
    return session


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
    checkpoints: CheckpointsArg,
    input: Annotated[Path | None, typer.Option("--input", "-i", help="Default: stdin.")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Default: stdout.")] = None,
    beam: BeamOption = None,
    nbest: Annotated[
        int | None, typer.Option(help="Lines per input: 'i ||| text ||| score'.")
    ] = None,
    max_tokens: MaxTokensOption = None,
    device: DeviceOption = "auto",
    greedy: Annotated[bool, typer.Option(help="Greedy search instead of beam search.")] = False,
    alignment: Annotated[
        bool, typer.Option(help="Append a tab and 'src-tgt' attention alignment pairs.")
    ] = False,
    stop_early: StopEarlyOption = None,
    int8: Int8Option = None,
    input_format: Annotated[
        str,
        typer.Option(help='text, or jsonl: {"src": ..., "prefix": ..., "constraints": [...]}.'),
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
) -> None:
    """Translate one sentence per line, from stdin (or --input) to stdout (or --output)."""
    from mt.decode.requests import read_requests
    from mt.decode.session import DecodeOptions
    from mt.decode.translator import write_translations

    if input is not None and not input.is_file():
        raise MtError(f"{input}: input file not found")
    for flag, value in (("--input-format", input_format), ("--output-format", output_format)):
        if value not in ("text", "jsonl"):
            raise MtError(f"{flag} must be text or jsonl, got {value!r}")
    typing = input is None and sys.stdin.isatty()  # someone is typing: answer each line at once
    options = DecodeOptions(
        beam=beam,
        nbest=nbest,
        greedy=greedy or None,
        stop_early=stop_early,
        int8=int8,
        max_tokens=max_tokens,
        no_repeat_ngram=no_repeat_ngram,
        buffer_lines=1 if typing else None,
        sample=sample or None,
        topk=topk,
        topp=topp,
        temperature=temperature,
        seed=seed,
    )
    session = _session(checkpoints, device)
    translator = session.translator(options, alignment, with_scores=output_format == "jsonl")
    src = open(input, "rb") if input is not None else sys.stdin.buffer
    name = str(input) if input is not None else "<stdin>"
    with src:
        requests = read_requests(_text_lines(src), input_format, name)
        _write_output(
            output,
            lambda out: write_translations(
                translator.translate_stream(requests),
                out,
                nbest=translator.cfg.nbest,
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
            help="Checkpoint to translate with (a run directory means its best.pt); several "
            "decode as an ensemble.",
            metavar="CHECKPOINT",
        ),
    ] = None,
    src: Annotated[Path | None, typer.Option(help="Source file to translate.")] = None,
    ref: Annotated[Path | None, typer.Option(help="Reference translations.")] = None,
    hyp: Annotated[Path | None, typer.Option(help="Score this output instead.")] = None,
    beam: BeamOption = None,
    greedy: Annotated[bool, typer.Option(help="Greedy search.")] = False,
    stop_early: StopEarlyOption = None,
    int8: Int8Option = None,
    max_tokens: MaxTokensOption = None,
    device: DeviceOption = "auto",
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    min_bleu: Annotated[
        float | None, typer.Option(help="Exit 1 when BLEU is below this (a CI gate).")
    ] = None,
) -> None:
    """Score a checkpoint or an ensemble (CHECKPOINT... --src --ref) or a translation (--hyp
    --ref)."""
    from mt.data.corpus import read_lines
    from mt.decode.session import DecodeOptions
    from mt.metrics import format_scores, score

    if ref is None:
        raise MtError("mt eval needs --ref")
    refs = read_lines(ref)
    if hyp is not None:
        if checkpoints or src is not None:
            raise MtError("mt eval: give either --hyp or CHECKPOINT with --src, not both")
        hyps, where = read_lines(hyp), hyp
    else:
        if not checkpoints or src is None:
            raise MtError("mt eval needs CHECKPOINT and --src (or --hyp)")
        sources = read_lines(src)
        if len(sources) != len(refs):
            raise MtError(f"{src} has {len(sources)} lines but {ref} has {len(refs)}")
        options = DecodeOptions(
            beam=beam,
            nbest=1,
            greedy=greedy or None,
            stop_early=stop_early,
            int8=int8,
            max_tokens=max_tokens,
        )
        translator = _session(checkpoints, device).translator(options)
        hyps, where = [t.text for t in translator.translate_stream(sources)], src
    if len(hyps) != len(refs):
        raise MtError(f"{where} has {len(hyps)} lines but {ref} has {len(refs)}")
    scores = score(hyps, refs)
    typer.echo(json.dumps(scores.as_dict()) if json_ else format_scores(scores))
    if min_bleu is not None and scores.bleu < min_bleu:
        typer.echo(f"BLEU {scores.bleu:.2f} is below --min-bleu {min_bleu}", err=True)
        raise typer.Exit(EXIT_GATE)


@app.command()
def attention(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint (or run directory).")],
    src: Annotated[str, typer.Option("--src", help="The sentence to translate and show.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="PNG file (default attn.png).")
    ] = None,
    html: Annotated[
        Path | None, typer.Option(help="Write an interactive page (every layer and head).")
    ] = None,
    layer: Annotated[int, typer.Option(help="Layer; negative counts from the top.")] = -1,
    head: Annotated[
        int | None, typer.Option(help="One head; -1 draws every head; default: head mean.")
    ] = None,
    beam: BeamOption = None,
    device: DeviceOption = "cpu",
) -> None:
    """Draw encoder, decoder and encoder-decoder attention for one translated sentence."""
    from mt.decode.attention import attention_json, layer_label
    from mt.decode.session import DecodeOptions

    if not src.strip():
        raise MtError("--src is empty")
    session = _session([checkpoint], device)
    n_heads = session.cfg.model.n_heads
    if head is not None and not -1 <= head < n_heads:
        raise MtError(f"--head must be -1 or between 0 and {n_heads - 1}, got {head}")
    att = session.sentence_attention(src, DecodeOptions(beam=beam))
    views = session.layer_views(att, layer)
    if html is not None:
        from mt.viewer import write_html

        write_html(html, attention_json(att), f"attention: {att.source}")
    if output is not None or html is None:
        from mt.plot import attention_figure, save_figure

        where = layer_label(layer, len(att.maps.encoder))
        title = f"{att.source}  ->  {att.translation}   ({where})"
        save_figure(attention_figure(views, title, head), output or Path("attn.png"))
    typer.echo(att.translation)


@app.command()
def vectors(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint written by mt train.")],
    word: Annotated[str, typer.Option(help="The word to follow (a whole word, case as given).")],
    src: Annotated[list[str] | None, typer.Option("--src", help="A sentence (repeatable).")] = None,
    input: Annotated[
        Path | None, typer.Option("--input", "-i", help="Sentences, one per line.")
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="PNG file.")] = None,
    html: Annotated[Path | None, typer.Option(help="Write an interactive page.")] = None,
    json_: Annotated[
        bool, typer.Option("--json", help="Print every number drawn as one JSON object.")
    ] = False,
    centre: Annotated[
        bool,
        typer.Option(help="Remove each depth's mean over the occurrences before the PCA."),
    ] = False,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "cpu",
) -> None:
    """Follow a word's vector from its embedding through every encoder layer, in each
    sentence, and name the keys whose attention pushed it most."""
    from mt.decode.vectors import read_sentences, summary, word_vectors

    sentences = read_sentences(src or [], input)
    session = _session([checkpoint], device)
    model = session.single_model("vectors")
    found = word_vectors(model, session.tokenizer, sentences, word, centre)
    if any(len(o.tokens) > 1 for o in found.occurrences):
        typer.echo(f"note: '{word}' is several pieces; their vectors are averaged", err=True)
    if output is not None:
        from mt.plot import save_figure, vectors_figure

        save_figure(vectors_figure(found), output)
    if html is not None:
        from mt.viewer import write_html

        write_html(html, found.to_json(), f"vectors: {word}")
    typer.echo(json.dumps(found.to_json(), ensure_ascii=False) if json_ else summary(found))


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
    force: Annotated[
        bool, typer.Option(help="Average checkpoints even when they are of different runs.")
    ] = False,
) -> None:
    """Average the weights of several checkpoints (e.g. the last ones of a run) into one."""
    from mt.checkpoint import average as average_weights
    from mt.checkpoint import save

    save(average_weights(checkpoints, force), output)
    typer.echo(f"averaged {len(checkpoints)} checkpoints into {output}", err=True)


@app.command()
def score(
    checkpoints: CheckpointsArg,
    src: Annotated[Path, typer.Option(help="Source sentences, one per line.")],
    tgt: Annotated[Path, typer.Option(help="Their translations to score, line by line.")],
    json_: Annotated[
        bool, typer.Option("--json", help="One JSON object per line, with token scores.")
    ] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Default: stdout.")] = None,
    max_tokens: MaxTokensOption = None,
    device: DeviceOption = "auto",
    int8: Int8Option = None,
) -> None:
    """Score given translations (forced decoding): 'LOGPROB<TAB>SCORE' per pair, SCORE
    length-normalised as beam search ranks it."""
    from mt.decode.score import count_parallel, score_files, write_scores
    from mt.decode.session import DecodeOptions

    for path in (src, tgt):
        if not path.is_file():
            raise MtError(f"{path}: file not found")
    count_parallel(src, tgt)  # unequal files or bad UTF-8 fail before the model loads
    session = _session(checkpoints, device)
    scorer = session.scorer(DecodeOptions(max_tokens=max_tokens, int8=int8))
    scores = score_files(scorer, src, tgt, scorer.cfg.buffer_lines)
    _write_output(output, lambda out: write_scores(scores, out, json_))
    _warn_truncated(scorer.truncated, scorer.max_src, "source")


@app.command()
def serve(
    checkpoints: Annotated[
        list[str],
        typer.Argument(
            help="Models to serve, each [NAME=]CHECKPOINT[,CHECKPOINT...] (several paths: an "
            "ensemble; a run directory means its best.pt). The first is the default.",
            metavar="MODEL...",
        ),
    ],
    host: Annotated[
        str, typer.Option(help="Address to bind; other than loopback needs --api-key-file.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    device: DeviceOption = "auto",
    api_key_file: Annotated[
        Path | None, typer.Option(help="File of API keys, one per line; requests must give one.")
    ] = None,
    cors_origin: Annotated[
        list[str] | None, typer.Option(help="Allow browser pages of this origin (repeatable).")
    ] = None,
    max_items: Annotated[int, typer.Option(help="Sentences per request.")] = 100,
    max_chars: Annotated[int, typer.Option(help="Characters per sentence.")] = 5000,
    max_queue: Annotated[int, typer.Option(help="Sentences queued per model (then 503).")] = 2000,
    batch_window_ms: Annotated[
        float, typer.Option(help="How long a worker pools concurrent requests' sentences.")
    ] = 5.0,
) -> None:
    r"""Serve models over HTTP: JSON API, LibreTranslate's API and a page at / (needs the
    serve extra: pip install 'mt\[serve]')."""
    from mt.serve import serve as run_server
    from mt.serve.limits import Limits

    limits = Limits(
        max_items=max_items,
        max_chars=max_chars,
        max_queue=max_queue,
        batch_window_ms=batch_window_ms,
    )
    run_server(checkpoints, host, port, device, api_key_file, cors_origin, limits)


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

"""What several commands share: option types with one meaning each, the front door, output."""

from __future__ import annotations

import dataclasses
import functools
import gc
import inspect
import os
import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TextIO, TypeVar

import typer

from mt.decode_rules import validate_plan
from mt.errors import EXIT_GATE, MtError
from mt.plan import PlanOptions
from mt.translation.options import DecodeOptions, base_type, choices

F = TypeVar("F", bound=Callable[..., Any])

# The options `mt train` and `mt prepare` share: both read a config into a run directory.
ConfigArg = Annotated[Path, typer.Argument(help="YAML config file.")]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a config value: section.key=value (repeatable)."),
]
RunDirOption = Annotated[
    Path | None, typer.Option(help="Run directory (default: train.run_dir of the config).")
]


def load_run_config(config: Path, set_: list[str] | None, run_dir: Path | None):
    """The config with overrides applied and `--run-dir` taking the place of train.run_dir."""
    from mt.config_file import load_config

    cfg = load_config(config, set_ or [])
    if run_dir is not None:
        cfg.train.run_dir = str(run_dir)
    return cfg


# Options several decoding commands share, with one meaning each; the decode settings among
# them are made from DecodeConfig by `decode_flags` below.
CheckpointsArg = Annotated[
    list[Path],
    typer.Argument(
        help="Checkpoints written by mt train (a run directory means its best.pt); several "
        "decode as an ensemble.",
        metavar="CHECKPOINT...",
    ),
]
DeviceOption = Annotated[str, typer.Option(help="cpu, cuda or auto.")]
AdapterOption = Annotated[
    Path | None,
    typer.Option(
        help="An adapter (a run with finetune.adapter: its best.pt or run directory) applied "
        "to CHECKPOINT, its base; it decodes with the adapter's decode settings."
    ),
]
ToOption = Annotated[
    str | None,
    typer.Option(
        "--to",
        help="Target language of a multilingual model (needed when it writes several).",
    ),
]
FromOption = Annotated[
    str | None,
    typer.Option("--from", help="Source language (optional; checked against the model's)."),
]
TargetVocabOption = Annotated[
    bool,
    typer.Option(
        help="A multilingual model writes only pieces seen in the target language's training "
        "text, so its output stays in that language."
    ),
]
ThreadsOption = Annotated[
    int | None,
    typer.Option(
        help="CPU threads, at most the usable cores (affinity mask, container CPU quota); "
        "default: OMP_NUM_THREADS, else those cores."
    ),
]


def flag_help(name: str, text: str) -> str:
    """A decode flag's help: its setting's description (`text`) and, unless that says where its
    default comes from, that it is the checkpoint's."""
    text = (text or name.replace("_", " ")).rstrip(".")
    text = text[0].upper() + text[1:]
    if "default" in text.lower():
        return text + "."
    return f"{text} (default: the checkpoint's decode.{name})."


def decode_flags(names: Sequence[str], options_class: type = DecodeOptions) -> Callable[[F], F]:
    """Give a command the decode settings `names` (its entry of mt.translation.options.OFFERED) as
    flags, and hand it one `options: DecodeOptions` in their place.

    Each flag is made from its DecodeConfig field (through `options_class`, whose fields are
    DecodeConfig's): `--max-len-a` from `max_len_a`, its type (a bool is `--x/--no-x`), default
    None (the checkpoint's value) and its help from the field's description."""
    fields = {f.name: f for f in dataclasses.fields(options_class)}
    hints = typing.get_type_hints(options_class)

    def flag(name: str) -> inspect.Parameter:
        help_text = flag_help(name, fields[name].metadata.get("help", ""))
        allowed = choices(hints[name])  # shown in --help; mt.config_rules checks the value
        metavar = "[" + "|".join(allowed) + "]" if allowed else None
        option = typer.Option(help=help_text, metavar=metavar)
        return _keyword(name, Annotated[base_type(hints[name]) | None, option], None)

    def build(given: dict[str, Any]) -> Any:
        return options_class(**{k: v for k, v in given.items() if v is not None})

    return _flags_for("options", [flag(name) for name in names], build)


def plan_flags(names: Sequence[str], options_class: type = PlanOptions) -> Callable[[F], F]:
    """Give a command the plan options `names` (its entry of mt.plan.OFFERED) as flags, and
    hand it one `plan: PlanOptions` in their place: each flag made from its field, its type
    (a bool is `--x/--no-x`), default and help (`--split-sentences` from `split_sentences`)."""
    fields = {f.name: f for f in dataclasses.fields(options_class)}
    hints = typing.get_type_hints(options_class)

    def flag(name: str) -> inspect.Parameter:
        meta = fields[name].metadata
        option = typer.Option(help=meta["help"], metavar=meta.get("metavar"))
        return _keyword(name, Annotated[hints[name], option], fields[name].default)

    return _flags_for("plan", [flag(name) for name in names], lambda given: options_class(**given))


def _keyword(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def _flags_for(
    param: str, flags: list[inspect.Parameter], build: Callable[[dict[str, Any]], Any]
) -> Callable[[F], F]:
    """Write `flags` into a command's signature where its parameter `param` stands, and call
    it with `param` = `build(the flags' values)`. Typer reads a command's parameters from
    `inspect.signature`, so the flags are written into the command's `__signature__` (every
    parameter keyword-only, as typer passes them)."""
    names = [f.name for f in flags]

    def wrap(func: F) -> F:
        own = inspect.signature(func, eval_str=True)
        assert param in own.parameters, f"{func.__name__} takes no `{param}`"
        params: list[inspect.Parameter] = []
        for p in own.parameters.values():
            if p.name == param:
                params += flags
            else:
                params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))

        @functools.wraps(func)
        def command_with_flags(**kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in names}
            return func(**{param: build(given)}, **kwargs)

        signature = own.replace(parameters=params)
        command_with_flags.__signature__ = signature  # type: ignore[attr-defined]
        command_with_flags.__annotations__ = {
            p.name: p.annotation for p in signature.parameters.values()
        } | {"return": signature.return_annotation}
        return command_with_flags  # type: ignore[return-value]

    return wrap


# Decoding one file in many processes (mt.runtime.shards).
ShardOption = Annotated[
    str | None,
    typer.Option(
        help="K/N: write share K (0..N-1) of N of --input's chunks, then the last share to "
        "finish merges --output (array jobs; under torchrun each rank takes its own share)."
    ),
]
ChunkLinesOption = Annotated[
    int | None,
    typer.Option(help="Lines per chunk when shared out; a multiple of the buffer lines."),
]


MAX_CHUNK_LINES = 10**9  # far above any real chunk: larger is a typo


def chunked_job(
    inputs: list[Path | None],
    output: Path | None,
    shard: str | None,
    chunk_lines: int | None,
    buffer_lines: int,
    settings: dict,
):
    """The chunks this process writes when the input is shared out (`--shard`, or torchrun
    with several processes); None for one process doing it all."""
    from mt.runtime.shards import ChunkedJob, this_shard

    if chunk_lines is not None and not 0 < chunk_lines <= MAX_CHUNK_LINES:
        raise MtError(f"--chunk-lines must be in [1, {MAX_CHUNK_LINES:,}], got {chunk_lines:,}")
    share = this_shard(shard)
    if share is None:
        return None
    if output is None or any(p is None for p in inputs):
        raise MtError("decoding in shares (--shard or torchrun) needs --input and --output files")
    chunk = chunk_lines or buffer_lines
    if chunk <= 0 or chunk % buffer_lines:
        raise MtError(
            f"--chunk-lines must be a positive multiple of the buffer lines ({buffer_lines}), "
            f"got {chunk}: a chunk is then batched as one process batches it"
        )
    paths = [p for p in inputs if p is not None]
    return ChunkedJob(paths, output, chunk, settings, share)


def use_threads(command: str, asked: int | None, say: bool | None = None):
    """Check `--threads` (once, here), size torch's pool by mt.device's policy and say the
    count on stderr: always when `say`, by default only at a terminal, so that piped output's
    stderr holds nothing but warnings and errors."""
    from mt.device import check_threads, choose_threads, set_threads, usable_cores

    if asked is not None:
        check_threads(asked)
    threads = choose_threads(usable_cores(), asked)
    set_threads(threads)
    if say or (say is None and sys.stderr.isatty()):
        typer.echo(f"mt {command}: {threads.describe()}", err=True)
    return threads


def open_session(
    checkpoints: list[Path], device: str, dtype: str | None = None, adapter: Path | None = None
):
    """The front door (mt.translation.session), saying on stderr when a run directory stood for
    its best.pt; with `adapter` (`--adapter`), the model with it folded in."""
    from mt.translation.session import Session

    if adapter is not None and len(checkpoints) != 1:
        raise MtError(f"--adapter {adapter} applies to one checkpoint, not to an ensemble")
    session = Session(checkpoints, device, dtype=dtype)
    for given, path in zip(checkpoints, session.paths):
        if given != path:
            typer.echo(f"mt: {given} is a run directory; using {path}", err=True)
    return session if adapter is None else session.with_adapter(adapter, merge=True)


@contextmanager
def settled_heap() -> Iterator[None]:
    """Keep what is loaded by now (torch, the model, its tokenizer: some 170,000 objects) out
    of the collector's full passes while a command works through its lines, and hand it back
    after. Decoding makes enough short-lived objects to set off full collections, each a walk
    of every object in the process, so each costs what is loaded rather than what the command
    made (measured in docs/studies/span-ban.md). What the command makes while it works is
    collected as ever."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def write_output(output: Path | None, write: Callable[[TextIO], object]) -> None:
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


MaxDoubtOption = Annotated[
    float | None,
    typer.Option(
        help="Exit 1 when more than this share (0-1) of lines is flagged doubtful "
        "(copy, loop, short, long): a pipeline gate."
    ),
]


def check_plan(plan: PlanOptions, html: bool = False, alignment: bool = False) -> None:
    """The plan options' rules (mt.decode_rules.plan_checks) and the glossary file, before a
    model loads."""
    validate_plan(plan, html, alignment)
    if plan.glossary is not None and not plan.glossary.is_file():
        raise MtError(f"{plan.glossary}: glossary file not found")


def open_glossary(  # noqa: ANN201
    path: Path | None,
    session,  # noqa: ANN001
    targets,  # noqa: ANN001
    frm: str | None,
    translator,  # noqa: ANN001
    soft: bool = False,
):
    """The glossary in `path` (None: none) between the decode's languages: the source
    `frm` (else the model's) and the target `targets` writes (a bilingual model's own);
    refused unless `translator` searches with constraints (`soft`: unless the model was
    trained with terms or the translator boosts terms)."""
    if path is None:
        return None
    from mt.glossary.files import read_glossary
    from mt.glossary.inline import takes_terms
    from mt.translation.terms import NEEDS_BEAM, NEEDS_TERMS

    if soft and not (takes_terms(session.tokenizer) or translator.cfg.glossary_boost):
        raise MtError(NEEDS_TERMS)
    if not translator.constrain and not soft:
        raise MtError(NEEDS_BEAM)
    from mt.glossary.words import stemmer_name

    src = frm or session.source_language()
    tgt = targets.default if session.languages is not None else session.cfg.data.tgt_lang
    glossary = read_glossary(path, src, tgt)
    for lang in dict.fromkeys((glossary.src_lang, glossary.tgt_lang)):
        if stemmer_name(lang) is None:
            typer.echo(
                f"{path}: no stemmer for {lang!r}: its terms are matched as written (case aside)",
                err=True,
            )
    return glossary


def check_max_doubt(value: float | None) -> None:
    if value is not None and not 0 <= value <= 1:
        raise MtError(f"--max-doubt is a share of lines between 0 and 1, got {value}")


def gate_doubt(doubts, max_doubt: float | None, command: str) -> None:  # noqa: ANN001
    """With --max-doubt: the flag counts on stderr, and exit 1 when too many lines are flagged."""
    if max_doubt is None:
        return
    typer.echo(f"{command}: {doubts.summary()}", err=True)
    if doubts.share > max_doubt:
        typer.echo(
            f"{command}: {doubts.share:.1%} of lines flagged, over --max-doubt {max_doubt}",
            err=True,
        )
        raise typer.Exit(EXIT_GATE)


def warn_truncated(count: int, max_src: int, what: str) -> None:
    """One warning line when `count` lines were cut to the model's longest input."""
    if count:
        typer.echo(
            f"warning: {count} {what} line(s) were longer than the model's {max_src} "
            "positions and were truncated",
            err=True,
        )


def text_lines(stream):
    """Lines of a byte stream; invalid UTF-8 is reported with its line number."""
    for i, raw in enumerate(stream, 1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MtError(f"{getattr(stream, 'name', '<stdin>')}:{i}: invalid UTF-8") from None

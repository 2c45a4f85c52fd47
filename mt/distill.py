"""Sequence-level knowledge distillation (Kim and Rush 2016): the teachers' beam-search
translations of a student's training sources become the student's training targets.

For each training corpus of the student's config (`data.train`, or each of `data.corpora`) the
source side is copied to `RUN/distill/KEY/text.SRC` and translated into `text.TGT` by the
chunked job of mt.runtime.shards with the translator `mt translate` builds, so `text.TGT` is
what `mt translate TEACHER... --input text.SRC` with the same settings writes: one line per
source line, each chunk written once, a killed job resumed where it stopped, the chunks shared
out over torchrun's processes or `--shard` array jobs.

KEY is a digest of what decides the translation: the teachers' fingerprints (weights, model
shape, vocabulary, text statistics, shortlist), the resolved decode settings, the steps around
search, the languages and the source lines. A folder holding `distill.json` is finished, so a
rerun with the same teachers, settings and sources translates nothing; another teacher or beam
is another KEY and another folder (Marian's and fairseq's students pipelines keep the teachers'
output the same way: files named by what made them, reused until that changes).

With `distill.interpolate: N` the teachers return their N best and the one nearest the line's
reference is written (Kim and Rush's sequence-level interpolation); the references are then kept
beside the sources and are part of KEY.

The student then reads these folders as its `data.corpora`, each with its corpus's weight, and
the original corpora beside them when `distill.keep_original` > 0 (mt.config.DistillConfig).
"""

from __future__ import annotations

import dataclasses
import fcntl
import gc
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from mt.atomic import temp_path, write_text
from mt.config import Config, CorpusConfig, DataConfig, DistillConfig
from mt.data.corpus import Source, chunk_offsets, pair_chunks, train_sources
from mt.errors import MtError

FORMAT = 1  # what a distilled folder holds; a new value makes every kept folder stale
RECORD = "distill.json"  # written last in a folder: the corpus in it is whole


def teacher_paths(d: DistillConfig, where: str) -> list[Path]:
    """The teachers' checkpoint files (a run directory stands for its best.pt), each checked
    to exist before any is loaded."""
    from mt.checkpoint import resolve_checkpoint

    if not d.teachers:
        raise MtError(
            f"{where}: distill.teachers is empty: name the teacher checkpoint(s) "
            "(a checkpoint file or a run directory)"
        )
    paths = []
    for i, name in enumerate(d.teachers):
        path = Path(name)
        if not path.exists():
            raise MtError(f"{where}: distill.teachers[{i}]: {name}: no such checkpoint")
        paths.append(resolve_checkpoint(path))
    return paths


def teacher_fingerprint(data: dict[str, Any]) -> str:
    """What of a checkpoint decides its translations, as one hex digest: the weights and model
    shape (the adapters' base fingerprint, mt.adapt.files) and the tokenizer with what it
    carries (vocabulary, languages, case table, length bounds), and the lexical shortlist."""
    from mt.adapt.files import fingerprint

    def plain(value: Any) -> Any:
        return value.tolist() if hasattr(value, "tolist") else bytes(value).hex()

    h = hashlib.sha256(fingerprint(data["model"], data["config"]["model"]).encode())
    h.update(json.dumps(data["tokenizer"], sort_keys=True, default=plain).encode())
    h.update(json.dumps(data.get("shortlist"), sort_keys=True, default=plain).encode())
    return h.hexdigest()


@dataclass(frozen=True)
class Teacher:
    path: str
    fingerprint: str


class Teachers:
    """The teachers of one student loaded as one model (an ensemble when several), with the
    translator that distils and the settings that decide its output (the cache key's part)."""

    def __init__(
        self, cfg: Config, paths: list[Path], device: str, where: str, who: str = "mt distill"
    ) -> None:
        from mt.plan import PlanOptions
        from mt.translation.options import DecodeOptions
        from mt.translation.session import Session

        d, data = cfg.distill, cfg.data
        self.who = who  # what the progress lines start with
        self.session = Session(paths, device, name=lambda key: "distill." + key.split(".")[-1])
        check_direction(self.session, data, where)
        # Interpolation chooses among the N best, which the search then returns.
        self.interpolate = d.interpolate if d.interpolate > 1 else 0
        options = DecodeOptions(
            beam=d.beam,
            nbest=self.interpolate or 1,
            greedy=False,
            sample=False,
            alpha=d.alpha,
            max_tokens=d.max_tokens or None,
            buffer_lines=d.buffer_lines or None,
            workers=d.workers,
        )
        multilingual = self.session.languages is not None
        to, frm = (data.tgt_lang, data.src_lang) if multilingual else (None, None)
        try:
            targets = self.session.targets(to, frm)
        except MtError as err:
            raise MtError(f"{paths[0]}: cannot be the teacher of {where}: {err}") from None
        self.translator = self.session.translator(options, targets=targets)
        self.plan = PlanOptions()  # `mt translate`'s steps around search, as without flags
        self.chunk_lines = d.chunk_lines or self.translator.cfg.buffer_lines
        if self.chunk_lines % self.translator.cfg.buffer_lines:
            raise MtError(
                f"{where}: distill.chunk_lines ({d.chunk_lines:,}) must be a multiple of the "
                f"buffer lines ({self.translator.cfg.buffer_lines:,}, the teacher's)"
            )
        self.teachers = [
            Teacher(str(p), teacher_fingerprint(m.data))
            for p, m in zip(self.session.paths, self.session.loaded)
        ]
        self.settings = {
            "teachers": [t.fingerprint for t in self.teachers],
            "decode": asdict(self.translator.cfg),
            "plan": asdict(self.plan),
            "languages": [data.src_lang, data.tgt_lang],
        }
        if self.interpolate:  # the references decide the targets too (corpus_key)
            self.settings["interpolate"] = {"nbest": self.interpolate, "metric": "sentence BLEU"}

    def describe(self) -> str:
        """The teachers and their search, for the first progress line."""
        c = self.translator.cfg
        who = ", ".join(t.path for t in self.teachers)
        kind = "an ensemble of " if len(self.teachers) > 1 else ""
        nearest = f", nearest the reference of {c.nbest}" if self.interpolate else ""
        return (
            f"{kind}{who}, beam {c.beam}{nearest}, alpha {c.alpha}, buffer {c.buffer_lines:,} lines"
        )


def check_direction(session: Any, data: DataConfig, where: str) -> None:
    """Each bilingual teacher translates the student's direction; a multilingual one is
    asked for it by `targets` (which names its languages when it lacks one)."""
    want = (data.src_lang, data.tgt_lang)
    for path, member in zip(session.paths, session.loaded):
        if member.tokenizer.languages is not None:
            continue
        have = (member.cfg.data.src_lang, member.cfg.data.tgt_lang)
        if have != want:
            raise MtError(
                f"{path}: the teacher translates {have[0]}-{have[1]}, but {where} trains "
                f"{want[0]}-{want[1]}"
            )


@dataclass(frozen=True)
class Distilled:
    """One training corpus's sources with the teachers' translations: a text corpus."""

    source: Source  # the corpus it was translated from
    folder: Path  # RUN/distill/KEY, holding text.SRC and text.TGT
    key: str
    lines: int
    cached: bool  # found whole: nothing translated this time

    def record(self) -> dict[str, Any]:
        return {"corpus": self.source.where, "folder": str(self.folder), "lines": self.lines}


def say(text: str, who: str = "mt distill") -> None:
    print(f"{who}: {text}", file=sys.stderr, flush=True)


def one_line(text: str) -> str:
    """A sentence as one line of the source file (a JSONL or TMX value may hold breaks)."""
    return " ".join(text.splitlines()) if "\n" in text or "\r" in text else text


def copy_lines(
    chunks: Iterable[tuple[list[str], ...]], names: list[str], into: Path
) -> tuple[list[Path], str, int]:
    """Line-aligned columns of `chunks` (sources, and references where interpolating) written
    to temp files `names` in `into`: the files, one digest of all their bytes and their number
    of lines."""
    tmps = [temp_path(into / name) for name in names]
    h, n = hashlib.sha256(), 0
    try:
        with ExitStack() as stack:  # every file closed, also when a later one fails to open
            opened = (open(t, "w", encoding="utf-8", newline="\n") for t in tmps)
            files = [stack.enter_context(f) for f in opened]
            for columns in chunks:
                for f, lines in zip(files, columns):
                    text = "".join(one_line(s) + "\n" for s in lines)
                    f.write(text)
                    h.update(text.encode("utf-8"))
                n += len(columns[0])
    except OSError as err:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)
        raise MtError(f"{into}: cannot write the sources ({err.strerror or err})") from None
    except BaseException:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)
        raise
    return tmps, h.hexdigest(), n


def corpus_key(settings: dict[str, Any], source_digest: str, lines: int) -> str:
    text = json.dumps(
        {"format": FORMAT, "settings": settings, "source": source_digest, "lines": lines},
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def distil(
    teachers: Teachers, source: Source, limit: int, root: Path, shard: Any = None
) -> Distilled | None:
    """The teachers' translation of `source` under `root` (RUN/distill): found whole, or
    this process's chunks translated (`shard`: its share; None: all). None when other
    processes' chunks are still missing."""
    pairs = pair_chunks(source, limit=limit)
    # With interpolation the references travel beside the sources (translate_lines).
    chunks = pairs if teachers.interpolate else (src for src, _ in pairs)
    langs = (source.src_lang, source.tgt_lang)
    found = translate_lines(teachers, chunks, langs, source.where, root, shard, limit)
    return None if found is None else Distilled(source, *found)


def translate_lines(
    teachers: Teachers,
    chunks: Iterable[Any],
    langs: tuple[str, str],
    where: str,
    root: Path,
    shard: Any = None,
    limit: int = 0,
) -> tuple[Path, str, int, bool] | None:
    """The teachers' translation of the source lines of `chunks` (named `where`, in the
    languages `langs`) kept under `root`: its folder (holding `text.SRC` and `text.TGT`), key,
    number of lines and whether it was found whole. None when other processes' chunks are
    still missing. The corpora of `mt distill` and the replay sources of a fine-tuning run
    (mt.adapt.replay) are translated and kept alike. With `teachers.interpolate` each chunk
    is a (sources, references) pair, and the references are kept beside as `reference.TGT`."""
    from mt.runtime.shards import ChunkedJob, Shard

    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise MtError(f"{root}: cannot create ({err.strerror or err})") from None
    src_lang, tgt_lang = langs
    names = [f"text.{src_lang}"] + ([f"reference.{tgt_lang}"] if teachers.interpolate else [])
    columns = chunks if teachers.interpolate else ((src,) for src in chunks)
    tmps, digest, lines = copy_lines(columns, [f"source.{n}" for n in names], root)
    key = corpus_key(teachers.settings, digest, lines)
    folder = root / key
    inputs = [folder / name for name in names]
    tgt_file = folder / f"text.{tgt_lang}"
    with open(root / ".lock", "a") as lock:  # processes of one job place the sources once
        fcntl.lockf(lock.fileno(), fcntl.LOCK_EX)
        folder.mkdir(exist_ok=True)
        for tmp, path in zip(tmps, inputs):
            if path.exists():
                tmp.unlink()
            else:
                os.replace(tmp, path)
    if (folder / RECORD).exists():
        say(f"{where}: {lines:,} lines translated before, in {folder}", teachers.who)
        return folder, key, lines, True
    if not tgt_file.exists():
        job = ChunkedJob(inputs, tgt_file, teachers.chunk_lines, teachers.settings,
                         shard or Shard(0, 1))  # fmt: skip
        _translate(teachers, job, where, lines)
        if not tgt_file.exists():
            return None  # merged by the process that writes the last chunk
    written = chunk_offsets(tgt_file, teachers.chunk_lines)[1]
    if written != lines:
        raise MtError(f"{tgt_file}: {written:,} lines for {lines:,} sources; remove {folder}")
    record = {
        "format": FORMAT,
        "key": key,
        "teachers": [asdict(t) for t in teachers.teachers],
        "settings": teachers.settings,
        "source": {"corpus": where, "sha256": digest, "lines": lines, "limit": limit},
    }
    write_text(folder / RECORD, json.dumps(record, indent=1) + "\n", "the distillation record")
    return folder, key, lines, False


def _translate(teachers: Teachers, job: Any, where: str, lines: int) -> None:
    """This process's missing chunks of `job`, with a progress line as they are written.
    What is loaded by now stays out of the collector's full passes meanwhile (as in `mt
    translate`: mt.cli.options.settled_heap)."""
    from mt.progress import Progress
    from mt.runtime.workers import spread

    pending = job.pending_lines()
    share = f" (share {job.shard.index}/{job.shard.count})" if job.shard.count > 1 else ""
    say(f"{where}: translating {pending:,} of {lines:,} lines{share} with {teachers.describe()}",
        teachers.who)  # fmt: skip
    progress = Progress(f"{teachers.who}: {where}", "lines")
    gc.freeze()
    try:
        with spread(teachers.translator) as decoder:
            job.run(work(teachers, decoder, str(job.inputs[0])), teachers.who, progress.update)
    finally:
        gc.unfreeze()
    progress.close()


def student_data(d: DataConfig, distilled: list[Distilled], keep_original: float) -> DataConfig:
    """The student's data section: the distilled corpora (each with its corpus's weight) and,
    with `keep_original`, the original ones beside them at that share of their weight."""
    corpora = [
        CorpusConfig(name="text", root=str(x.folder), format="text", weight=x.source.weight)
        for x in distilled
    ]
    if keep_original:
        corpora += [
            CorpusConfig(s.name, s.root, s.format, s.hf_subset, s.weight * keep_original)
            for s in train_sources(d)
        ]
    return dataclasses.replace(d, corpora=corpora)


def origin(teachers: Teachers, distilled: list[Distilled]) -> dict[str, Any]:
    """What the student was distilled from: RUN/distill.json, and its checkpoints' `origin`."""
    return {
        "distill": {
            "teachers": [asdict(t) for t in teachers.teachers],
            "settings": teachers.settings,
            "corpora": [x.record() for x in distilled],
        }
    }


def work(teachers: Teachers, decoder: Any, name: str) -> Any:
    """What a chunk of the job does: `mt translate`'s text path (mt.cli.decoding), the
    requests read, translated and written as it writes them."""
    from mt.translation.requests import Plan, read_requests
    from mt.translation.translator import translate_stream, write_translations

    plan = Plan.of(teachers.plan, teachers.session.source_language())

    def failed(line: int, error: str) -> None:
        say(f"{name}:{line}: could not translate this line ({error}); written empty", teachers.who)

    def chunk(first: int, ins: list[list[str]], out: TextIO) -> None:
        requests = read_requests(ins[0], "text", name, first, plan, None)
        translations = translate_stream(decoder, requests)
        if teachers.interpolate:
            translations = nearest(translations, ins[1])
        write_translations(translations, out, failed=failed, start=first)

    return chunk


def nearest(translations: Iterable[Any], references: list[str]) -> Iterator[Any]:
    """Each translation with the hypothesis nearest its reference as its text: the highest
    sentence BLEU (smoothed by sacrebleu's effective order), the better-scored one on a tie.
    The target stays a sentence the teachers wrote, only chosen with the reference's help."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU(effective_order=True)
    for t, line in zip(translations, references, strict=True):
        if len(t.texts) > 1:
            ref = [line.rstrip("\r\n")]
            scores = [bleu.sentence_score(text, ref).score for text in t.texts]
            t = dataclasses.replace(t, text=t.texts[scores.index(max(scores))])
        yield t

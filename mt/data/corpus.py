"""Read parallel corpora as a stream of chunks, naming the file and line of anything broken.

Sources: plain text (one sentence per line, `.gz` accepted), TSV (source<TAB>target), JSONL
(`{"de": ..., "en": ...}` or `{"translation": {...}}`), the files of CAT tools (TMX and XLIFF:
mt/cat, inline codes as tags) and `datasets` sources (a folder written by `save_to_disk`, or a
hub name for users with internet). Text readers are our own so that a broken file is reported
with its name and line; `datasets` sources go through the `datasets` library.
Everything is read `chunk` pairs at a time, so a corpus of any size passes through bounded memory.
"""

from __future__ import annotations

import gzip
import itertools
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from mt.config import DataConfig
from mt.errors import MtError

CHUNK = 20_000  # pairs per chunk: large enough for batch encoding, small next to any corpus
FILE_FORMATS = ("tsv", "jsonl", "tmx", "xliff")  # a corpus that is one file `{root}/{name}`
Chunk = tuple[list[str], list[str]]


@dataclass(frozen=True)
class Source:
    """One parallel corpus: where it is and how it is read."""

    name: str
    root: str
    format: str
    src_lang: str
    tgt_lang: str
    hf_subset: str = ""
    weight: float = 1.0
    general: bool = False  # the general domain's text (finetune.keep_on: general)

    @property
    def where(self) -> str:
        """How messages name this corpus when no single file is at fault."""
        if self.format == "text":
            return f"{text_path(Path(self.root), self.name, self.src_lang)}"
        if self.format in FILE_FORMATS:
            return str(Path(self.root) / self.name)
        return f"{self.root} [{self.name}]"

    def paths(self) -> list[Path]:
        """The files this corpus is read from (what a prepared store must change with)."""
        root = Path(self.root)
        if self.format == "text":
            return [
                text_path(root, self.name, self.src_lang),
                text_path(root, self.name, self.tgt_lang),
            ]
        if self.format in FILE_FORMATS:
            return [root / self.name]
        return [root] if root.exists() else []


def directions(cfg: DataConfig) -> list[tuple[str, str]]:
    """The (source, target) languages the data section trains: `data.pairs`, else the one
    pair `src_lang`/`tgt_lang`."""
    if not cfg.pairs:
        return [(cfg.src_lang, cfg.tgt_lang)]
    return [(p.split("-")[0], p.split("-")[1]) for p in cfg.pairs]


def split_source(cfg: DataConfig, name: str) -> Source:
    """A split (`valid`, `test`, or the single `train`) as the `data` section describes it."""
    return Source(name, cfg.root, cfg.format, cfg.src_lang, cfg.tgt_lang, cfg.hf_subset)


def split_sources(cfg: DataConfig, name: str) -> list[Source]:
    """A split in every direction the data section trains (one Source per pair)."""
    return [Source(name, cfg.root, cfg.format, s, t, cfg.hf_subset) for s, t in directions(cfg)]


def train_sources(cfg: DataConfig) -> list[Source]:
    """The training corpora: `data.corpora` when given, else `data.train` (in each of
    `data.pairs` when given)."""
    if cfg.pairs:
        return split_sources(cfg, cfg.train)
    if not cfg.corpora:
        return [split_source(cfg, cfg.train)]
    return [
        Source(
            c.name,
            c.root or cfg.root,
            c.format or cfg.format,
            cfg.src_lang,
            cfg.tgt_lang,
            c.hf_subset or cfg.hf_subset,
            c.weight,
            c.general,
        )
        for c in cfg.corpora
    ]


def text_path(root: Path, name: str, lang: str) -> Path:
    plain = root / f"{name}.{lang}"
    gz = root / f"{name}.{lang}.gz"
    return gz if not plain.exists() and gz.exists() else plain


def _open(path: Path) -> BinaryIO:
    if not path.is_file():
        raise MtError(f"{path}: file not found")
    try:
        f = path.open("rb")
        if path.suffix == ".gz":
            return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
        return f
    except OSError as err:
        raise MtError(f"{path}: cannot read ({err.strerror or err})") from None


def _decode(raw: list[bytes], path: Path, first: int) -> list[str]:
    """Lines without their newline; `first` is the 0-based number of the chunk's first line."""
    data = b"".join(raw)
    if b"\0" in data:
        line = first + data.count(b"\n", 0, data.index(b"\0")) + 1
        raise MtError(f"{path}:{line}: NUL byte in line (binary data, not text)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = first + data.count(b"\n", 0, err.start) + 1
        raise MtError(f"{path}:{line}: invalid UTF-8") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if "\r" in text:
        lines = [line.rstrip("\r") for line in lines]
    return lines


def line_chunks(path: Path, chunk: int = CHUNK) -> Iterator[list[str]]:
    """The lines of a text file (`.gz` too), `chunk` at a time; a final newline adds none."""
    f = _open(path)
    done = 0
    with f:
        while True:
            raw: list[bytes] = []
            try:
                raw.extend(itertools.islice(f, chunk))  # keeps the lines read before an error
            except (OSError, EOFError, zlib.error) as err:
                reason = "truncated or damaged" if path.suffix == ".gz" else "read error"
                # The last line read may itself be cut short: count only whole lines.
                whole = done + len(raw) - (1 if raw and not raw[-1].endswith(b"\n") else 0)
                raise MtError(f"{path}: after line {whole}: {reason} ({err})") from None
            if not raw:
                return
            yield _decode(raw, path, done)
            done += len(raw)


def read_lines(path: Path) -> list[str]:
    """All lines of a (small) text file, for inputs and references."""
    return [line for lines in line_chunks(path) for line in lines]


def _count_rest(chunks: Iterator[list[str]]) -> int:
    return sum(len(c) for c in chunks)


def _missing_corpus_file(path: Path, root: Path) -> MtError:
    """A corpus file that is not there: almost always MT_DATA unset or pointing elsewhere."""
    where = "does not exist" if not root.is_dir() else "lacks it"
    return MtError(
        f"{path}: file not found (the data folder {root} {where}); set MT_DATA to the folder "
        "holding the corpus (Multi30k: see data/README.md)"
    )


def _text_chunks(source: Source, chunk: int) -> Iterator[Chunk]:
    root = Path(source.root)
    src_path = text_path(root, source.name, source.src_lang)
    tgt_path = text_path(root, source.name, source.tgt_lang)
    for path in (src_path, tgt_path):
        if not path.is_file():
            raise _missing_corpus_file(path, root)
    src_chunks, tgt_chunks = line_chunks(src_path, chunk), line_chunks(tgt_path, chunk)
    done = 0
    for src in src_chunks:
        tgt = next(tgt_chunks, [])
        if len(tgt) != len(src):
            n_src = done + len(src) + _count_rest(src_chunks)
            n_tgt = done + len(tgt) + _count_rest(tgt_chunks)
            raise _length_mismatch(src_path, n_src, tgt_path, n_tgt)
        done += len(src)
        yield src, tgt
    rest = _count_rest(tgt_chunks)
    if rest:
        raise _length_mismatch(src_path, done, tgt_path, done + rest)


def _length_mismatch(src_path: Path, n_src: int, tgt_path: Path, n_tgt: int) -> MtError:
    return MtError(
        f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}; "
        "a parallel corpus needs one target line per source line"
    )


def _tsv_chunks(source: Source, chunk: int) -> Iterator[Chunk]:
    path = Path(source.root) / source.name
    if not path.is_file():
        raise _missing_corpus_file(path, Path(source.root))
    done = 0
    for lines in line_chunks(path, chunk):
        src, tgt = [], []
        for i, line in enumerate(lines, done + 1):
            cols = line.split("\t")
            if len(cols) != 2:
                raise MtError(f"{path}:{i}: expected 2 tab-separated columns, found {len(cols)}")
            src.append(cols[0])
            tgt.append(cols[1])
        done += len(lines)
        yield src, tgt


def _pair(record: object, source: Source, where: str) -> tuple[str, str]:
    if isinstance(record, dict) and isinstance(record.get("translation"), dict):
        record = record["translation"]
    s, t = source.src_lang, source.tgt_lang
    if not isinstance(record, dict):
        raise MtError(f"{where}: expected an object with '{s}' and '{t}'")
    try:
        src, tgt = record[s], record[t]
    except KeyError as err:
        raise MtError(f"{where}: missing language {err}") from None
    if not isinstance(src, str) or not isinstance(tgt, str):
        raise MtError(f"{where}: '{s}' and '{t}' must be strings")
    return src, tgt


def _jsonl_chunks(source: Source, chunk: int) -> Iterator[Chunk]:
    path = Path(source.root) / source.name
    if not path.is_file():
        raise _missing_corpus_file(path, Path(source.root))
    done = 0
    for lines in line_chunks(path, chunk):
        src, tgt = [], []
        for i, line in enumerate(lines, done + 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise MtError(f"{path}:{i}: invalid JSON ({err.msg})") from None
            s, t = _pair(record, source, f"{path}:{i}")
            src.append(s)
            tgt.append(t)
        done += len(lines)
        yield src, tgt


def _hf_chunks(source: Source, chunk: int) -> Iterator[Chunk]:
    import datasets

    datasets.disable_progress_bars()
    where = source.where
    try:
        if Path(source.root).exists():
            loaded = datasets.load_from_disk(source.root)
            ds = loaded[source.name] if isinstance(loaded, datasets.DatasetDict) else loaded
        else:
            ds = datasets.load_dataset(source.root, source.hf_subset or None, split=source.name)
    except KeyError:
        raise MtError(f"{where}: no split named '{source.name}'") from None
    except Exception as err:  # datasets raises many types; the user needs the first line
        first = (str(err).splitlines() or [type(err).__name__])[0]
        raise MtError(f"{where}: cannot load dataset ({first})") from None
    done = 0
    for rows in ds.iter(batch_size=chunk):  # Arrow record batches: no per-row Python objects kept
        records = [dict(zip(rows, values)) for values in zip(*rows.values())]
        src, tgt = [], []
        for i, record in enumerate(records, done):
            s, t = _pair(record, source, f"{where} row {i}")
            src.append(s)
            tgt.append(t)
        done += len(records)
        yield src, tgt


def _cat_chunks(source: Source, chunk: int) -> Iterator[Chunk]:
    """TMX or XLIFF (mt.cat), streamed: a memory of millions of units in bounded memory."""
    from mt.cat.tmx import tmx_pairs
    from mt.cat.xliff import xliff_pairs

    path = Path(source.root) / source.name
    if not path.is_file():
        raise _missing_corpus_file(path, Path(source.root))
    read = tmx_pairs if source.format == "tmx" else xliff_pairs
    pairs = read(path, source.src_lang, source.tgt_lang)
    while block := list(itertools.islice(pairs, chunk)):
        yield [s for s, _ in block], [t for _, t in block]


_READERS = {
    "text": _text_chunks,
    "tsv": _tsv_chunks,
    "jsonl": _jsonl_chunks,
    "hf": _hf_chunks,
    "tmx": _cat_chunks,
    "xliff": _cat_chunks,
}


def pair_chunks(source: Source, chunk: int = CHUNK, limit: int = 0) -> Iterator[Chunk]:
    """Sentence pairs of `source`, `chunk` at a time; `limit` > 0 stops after that many.

    An empty corpus is an error: it is always a wrong path or split, never an intended input.
    """
    seen = 0
    for src, tgt in _READERS[source.format](source, chunk):
        if limit and seen + len(src) >= limit:
            src, tgt = src[: limit - seen], tgt[: limit - seen]
        seen += len(src)
        if src:
            yield src, tgt
        if limit and seen >= limit:
            break
    if not seen:
        raise MtError(f"{source.where}: empty corpus")


def read_parallel(cfg: DataConfig, name: str, limit: int = 0) -> tuple[list[str], list[str]]:
    """All raw sentence pairs of split `name` (validation and test sets: small by nature)."""
    return read_pairs(split_source(cfg, name), limit)


def read_pairs(source: Source, limit: int = 0) -> tuple[list[str], list[str]]:
    """All raw sentence pairs of one small source (a dev or test set in one direction)."""
    src: list[str] = []
    tgt: list[str] = []
    for s, t in pair_chunks(source, limit=limit):
        src += s
        tgt += t
    return src, tgt


def chunk_offsets(path: Path, chunk_lines: int) -> tuple[list[int], int]:
    """The byte offset of lines 0, `chunk_lines`, 2 * `chunk_lines`, ... of an uncompressed
    text file, and its number of lines: one pass, memory for the offsets only."""
    offsets: list[int] = []
    n = pos = 0
    with _open(path) as f:
        for raw in f:
            if n % chunk_lines == 0:
                offsets.append(pos)
            pos += len(raw)
            n += 1
    return offsets, n


def line_range(path: Path, offset: int, count: int, first: int) -> list[str]:
    """`count` lines of `path` from byte `offset` (line number `first`, 0-based), without
    their newlines."""
    with _open(path) as f:
        f.seek(offset)
        return _decode(list(itertools.islice(f, count)), path, first)

"""Read parallel corpora and cache their token ids.

Sources: plain text (one sentence per line, `.gz` accepted), TSV (source<TAB>target), JSONL
(`{"de": ..., "en": ...}` or `{"translation": {...}}`) and `datasets` sources (a folder written by
`save_to_disk`, or a hub name for users with internet). Text readers are our own so that a broken
file is reported with its name and line; `datasets` sources go through the `datasets` library.
Tokenized corpora are cached as Arrow datasets keyed by the data files and the tokenizer, so a
second run skips tokenization.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from mt.config import DataConfig
from mt.errors import MtError
from mt.tokenizer import Tokenizer


@dataclass
class Corpus:
    """Token ids of one split; `src` ends with EOS, `tgt` has neither BOS nor EOS."""

    src: list[list[int]]
    tgt: list[list[int]]

    def __len__(self) -> int:
        return len(self.src)


def _open_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise MtError(f"{path}: file not found")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError) as err:
        raise MtError(f"{path}: cannot read ({err})") from None


def decode_utf8(data: bytes, path: Path | str) -> str:
    """Decode, naming the 1-based line of the first invalid byte on failure."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise MtError(f"{path}:{line}: invalid UTF-8") from None


def read_lines(path: Path) -> list[str]:
    """Lines of a text file without their newline; a final newline adds no empty line."""
    text = decode_utf8(_open_bytes(path), path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def text_path(root: Path, name: str, lang: str) -> Path:
    plain = root / f"{name}.{lang}"
    gz = root / f"{name}.{lang}.gz"
    return gz if not plain.exists() and gz.exists() else plain


def _read_text(cfg: DataConfig, name: str) -> tuple[list[str], list[str], str]:
    root = Path(cfg.root)
    src_path = text_path(root, name, cfg.src_lang)
    tgt_path = text_path(root, name, cfg.tgt_lang)
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise MtError(
            f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; "
            "a parallel corpus needs one target line per source line"
        )
    return src, tgt, f"{src_path}, {tgt_path}"


def _read_tsv(cfg: DataConfig, name: str) -> tuple[list[str], list[str], str]:
    path = Path(cfg.root) / name
    src, tgt = [], []
    for i, line in enumerate(read_lines(path), 1):
        cols = line.split("\t")
        if len(cols) != 2:
            raise MtError(f"{path}:{i}: expected 2 tab-separated columns, found {len(cols)}")
        src.append(cols[0])
        tgt.append(cols[1])
    return src, tgt, str(path)


def _pair(record: object, cfg: DataConfig, where: str) -> tuple[str, str]:
    if isinstance(record, dict) and isinstance(record.get("translation"), dict):
        record = record["translation"]
    if not isinstance(record, dict):
        raise MtError(f"{where}: expected an object with '{cfg.src_lang}' and '{cfg.tgt_lang}'")
    try:
        src, tgt = record[cfg.src_lang], record[cfg.tgt_lang]
    except KeyError as err:
        raise MtError(f"{where}: missing key {err}") from None
    if not isinstance(src, str) or not isinstance(tgt, str):
        raise MtError(f"{where}: '{cfg.src_lang}' and '{cfg.tgt_lang}' must be strings")
    return src, tgt


def _read_jsonl(cfg: DataConfig, name: str) -> tuple[list[str], list[str], str]:
    path = Path(cfg.root) / name
    src, tgt = [], []
    for i, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise MtError(f"{path}:{i}: invalid JSON ({err.msg})") from None
        s, t = _pair(record, cfg, f"{path}:{i}")
        src.append(s)
        tgt.append(t)
    return src, tgt, str(path)


def _read_hf(cfg: DataConfig, name: str) -> tuple[list[str], list[str], str]:
    import datasets

    where = f"{cfg.root} [{name}]"
    try:
        if Path(cfg.root).exists():
            loaded = datasets.load_from_disk(cfg.root)
            ds = loaded[name] if isinstance(loaded, datasets.DatasetDict) else loaded
        else:
            ds = datasets.load_dataset(cfg.root, split=name)
    except KeyError:
        raise MtError(f"{where}: no split named '{name}'") from None
    except Exception as err:  # datasets raises many types; the user needs the first line
        first = (str(err).splitlines() or [type(err).__name__])[0]
        raise MtError(f"{where}: cannot load dataset ({first})") from None
    src, tgt = [], []
    for i, record in enumerate(ds):
        s, t = _pair(record, cfg, f"{where} row {i}")
        src.append(s)
        tgt.append(t)
    return src, tgt, where


_READERS = {"text": _read_text, "tsv": _read_tsv, "jsonl": _read_jsonl, "hf": _read_hf}


def read_parallel(cfg: DataConfig, name: str) -> tuple[list[str], list[str]]:
    """Raw sentence pairs of split `name`; an empty corpus is an error."""
    src, tgt, where = _READERS[cfg.format](cfg, name)
    if not src:
        raise MtError(f"{where}: empty corpus")
    return src, tgt


def _source_identity(cfg: DataConfig, name: str) -> str:
    """What the cache key must change with: the files (path, size, mtime) or the dataset name."""
    root = Path(cfg.root)
    if cfg.format == "text":
        paths = [text_path(root, name, cfg.src_lang), text_path(root, name, cfg.tgt_lang)]
    elif cfg.format in ("tsv", "jsonl"):
        paths = [root / name]
    else:
        paths = [root] if root.exists() else []
    parts = [cfg.format, cfg.root, name, cfg.src_lang, cfg.tgt_lang]
    for p in paths:
        st = p.stat() if p.exists() else None
        parts.append(f"{p.resolve()}:{st.st_size if st else -1}:{st.st_mtime_ns if st else -1}")
    return "|".join(parts)


def keep_pair(src: list[int], tgt: list[int], max_len: int, max_ratio: float) -> bool:
    """The length and ratio filter applied to training pairs (lengths include EOS)."""
    ls, lt = len(src), len(tgt) + 1
    return ls <= max_len and lt <= max_len and max(ls, lt) <= max_ratio * min(ls, lt)


def _quiet_datasets() -> None:
    """Cache reads and writes are quick; `datasets`' own progress bars would only add noise."""
    import datasets

    datasets.disable_progress_bars()


def load_corpus(
    cfg: DataConfig,
    name: str,
    tokenizer: Tokenizer,
    cache_root: Path,
    filter_lengths: bool,
    limit: int = 0,
) -> Corpus:
    """Token ids of a split, from the Arrow cache when the same data and tokenizer were seen."""
    import datasets

    _quiet_datasets()
    key_text = "|".join(
        [
            _source_identity(cfg, name),
            tokenizer.fingerprint(),
            f"filter={filter_lengths}:{cfg.max_len}:{cfg.max_len_ratio}:limit={limit}",
        ]
    )
    key = hashlib.sha256(key_text.encode()).hexdigest()[:20]
    folder = cache_root / f"{name}-{key}"
    if folder.is_dir():
        try:
            cols = datasets.load_from_disk(str(folder)).to_dict()  # lists, not lazy Columns
            return Corpus(cols["src"], cols["tgt"])
        except Exception:  # a damaged cache is rebuilt, never trusted
            shutil.rmtree(folder, ignore_errors=True)
    src_text, tgt_text = read_parallel(cfg, name)
    if limit:
        src_text, tgt_text = src_text[:limit], tgt_text[:limit]
    src = tokenizer.encode_src(src_text)
    tgt = tokenizer.encode_tgt(tgt_text)
    if filter_lengths:
        kept = [(s, t) for s, t in zip(src, tgt) if keep_pair(s, t, cfg.max_len, cfg.max_len_ratio)]
        if not kept:
            raise MtError(f"{cfg.root} [{name}]: no pair passes data.max_len/max_len_ratio")
        src, tgt = [s for s, _ in kept], [t for _, t in kept]
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = cache_root / f".{folder.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    datasets.Dataset.from_dict({"src": src, "tgt": tgt}).save_to_disk(str(tmp))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return Corpus(src, tgt)

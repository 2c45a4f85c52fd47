"""What the span ban has learned of a vocabulary, kept on disk between processes, so that a fresh
`mt translate` finds the answers earlier runs of the same model found (`mt.spans.index`).

The index's tables are a function of the piece texts and the span patterns alone: the tries of
the pieces for each set of patterns, the walks, each open text's completing pieces, and the
answers shared by open texts that read alike. Reading them back costs a fraction of finding
them again (the tries sort the vocabulary once per set of patterns; each first answer walks
it and checks its candidates with `find_spans`).

One file per vocabulary and version of the span ban's code (`version`), in the span cache
folder: env `MT_SPAN_CACHE` (`off` keeps nothing), else `$XDG_CACHE_HOME/mt/spans`, else
`~/.cache/mt/spans`. It is written atomically (`mt.atomic`) and read with an unpickler that
builds built-in values only (no class, no function: a file from elsewhere cannot run code),
and one that cannot be read is ignored and written anew. The cache is an optimisation:
failing to read or write it never fails a translation.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
from functools import cache
from pathlib import Path

from mt.atomic import write_bytes
from mt.errors import MtError
from mt.spans.open import GROWING

FORMAT = 1  # bump when the index's tables change shape or meaning


def folder() -> Path | None:
    """The span cache folder (module docstring); None when it is turned off."""
    env = os.environ.get("MT_SPAN_CACHE", "")
    if env == "off":
        return None
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mt" / "spans"


def path_for(fingerprint: str) -> Path | None:
    """The file of the vocabulary whose tokenizer fingerprint is `fingerprint`, for this code
    of the span ban (`version`)."""
    where = folder()
    if where is None:
        return None
    return where / f"{fingerprint}-{version()}.pkl"


@cache
def version() -> str:
    """A hash of the format, the span patterns and the code of this package: the tables hold
    the automaton's own numbering of its states, so any change to the code that made them
    makes them another cache's."""
    h = hashlib.sha256(repr((FORMAT, GROWING)).encode())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        h.update(source.read_bytes())
    return h.hexdigest()[:12]


def load(path: Path | None) -> dict | None:
    """The tables kept at `path`, or None where there are none that can be read."""
    if path is None or not path.is_file():
        return None
    try:
        tables = _Builtins(io.BytesIO(path.read_bytes())).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError):
        return None
    if not isinstance(tables, dict) or tables.get("format") != FORMAT:
        return None
    return tables


def save(path: Path | None, tables: dict) -> bool:
    """Write `tables` to `path` atomically; False where it cannot be written (then the next
    process finds its answers again)."""
    if path is None:
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = pickle.dumps({"format": FORMAT, **tables}, protocol=pickle.HIGHEST_PROTOCOL)
        write_bytes(path, data, "span cache")
    except (OSError, MtError):
        return False
    return True


class _Builtins(pickle.Unpickler):
    """An unpickler of built-in values only: dicts, lists, tuples, strings, numbers, booleans,
    None and (frozen) sets need no global, and every global is refused."""

    def find_class(self, module: str, name: str):  # noqa: ANN201 - the base class's signature
        raise pickle.UnpicklingError(f"{module}.{name} is not kept in a span cache")

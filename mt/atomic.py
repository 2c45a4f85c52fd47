"""One way to write a file so that readers see the old file or the new one, never half of one.

Every file a user keeps (checkpoints, the tokenizer, the resolved config, translations written
with -o, token stores) goes through here: written to a hidden temp name in the same folder (a
rename is atomic only within one file system), flushed to disk, then renamed over the target.
A failure removes the temp and becomes one MtError line naming the file and what it was.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from mt.errors import MtError


def temp_path(path: Path) -> Path:
    """The hidden temp name beside `path` (one style for files and folders)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def _reason(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


@contextlib.contextmanager
def atomic_open(path: Path, what: str, mode: str = "wb") -> Iterator[IO]:
    """A file object to write `path` through; renamed into place when the block ends cleanly.

    `what` names the file in the error ("checkpoint" -> "x.pt: cannot write checkpoint (No
    space left on device)"). torch.save reports a full disk as RuntimeError, so that counts as
    a write failure too; any other exception (a bug, Ctrl-C) removes the temp and propagates.
    """
    path = Path(path)
    tmp = temp_path(path)
    encoding = None if "b" in mode else "utf-8"
    try:
        f = open(tmp, mode, encoding=encoding)
    except OSError as err:
        raise MtError(f"{path}: cannot write {what} ({_reason(err)})") from None
    try:
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:
        tmp.unlink(missing_ok=True)
        raise MtError(f"{path}: cannot write {what} ({_reason(err)})") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(path: Path, data: bytes, what: str) -> None:
    with atomic_open(path, what) as f:
        f.write(data)


def write_text(path: Path, text: str, what: str) -> None:
    with atomic_open(path, what, "w") as f:
        f.write(text)


def write_with(path: Path, what: str, write: Callable[[IO], object], mode: str = "wb") -> None:
    """Call `write(f)` on the temp file, then rename: for writers that take a file object."""
    with atomic_open(path, what, mode) as f:
        write(f)

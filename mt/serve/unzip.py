"""Zip-based uploads (.docx) read within limits, so a zip bomb is refused before it is inflated.

A .docx is a zip; a small one can inflate to gigabytes (one member of repeated bytes deflates
about 1,000 to 1), and python-docx inflates each member it needs whole. `unpack` reads the
zip's central directory first and refuses, naming the limit, a zip that declares too many
members, too many bytes in one member or in all, or a ratio no document has (Apache POI's
ZipSecureFile checks the same ratio). The directory is what the zip says, not what it holds,
so each member is then inflated by a bounded reader, a chunk at a time, and stops at the size
it declared; what the parser gets is a new zip of the bytes actually read (stored, not
compressed), so a lying header cannot make it hold more than the limit either.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from dataclasses import dataclass

from mt.errors import MtError

CHUNK = 64 << 10  # bytes inflated per read: what a bomb can cost before it is caught
RATIO_GRACE = 100 << 10  # members this small may have any ratio (POI: GRACE_ENTRY_SIZE)


class OverLimit(MtError):
    """An upload over one of the server's limits: the server answers 413 naming `limit`."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (str(self), self.limit))


@dataclass(frozen=True)
class ZipLimits:
    """What a zip upload may unpack to; the names are the limits a refusal names."""

    max_unzipped_bytes: int = 32 << 20  # all members together, and so any one of them
    max_zip_members: int = 1000  # a .docx has a few dozen
    max_zip_ratio: int = 100  # uncompressed / compressed bytes of a member over RATIO_GRACE


def unpack(data: bytes, limits: ZipLimits) -> bytes:
    """`data` (a zip) as a zip of stored members holding what `data`'s members inflate to, or
    OverLimit; MtError when it is not a zip this can read."""
    try:
        source = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError) as err:
        raise MtError(str(err)) from None
    with source:
        members = source.infolist()
        check_directory(members, limits)
        last = {info.filename: info for info in members if not info.is_dir()}  # as zipfile reads
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
            for info in last.values():
                _copy(source, info, target)
    return out.getvalue()


def check_directory(members: list[zipfile.ZipInfo], limits: ZipLimits) -> None:
    """The central directory's claims against the limits, before anything is inflated."""
    if len(members) > limits.max_zip_members:
        raise OverLimit(
            f"the zip has {len(members):,} members; the limit is {limits.max_zip_members:,}",
            "max_zip_members",
        )
    total = 0
    for info in members:
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            # bzip2 and lzma inflate a whole read at once (zipfile gives them no output bound)
            raise MtError(f"{info.filename}: compression method {info.compress_type} (a .docx "
                          "member is stored or deflated)")  # fmt: skip
        if info.flag_bits & 0x1:
            raise MtError(f"{info.filename}: encrypted")
        total += info.file_size
        limit = limits.max_unzipped_bytes
        if info.file_size > limit:
            raise OverLimit(
                f"{info.filename} unzips to {info.file_size:,} bytes; the limit is {limit:,}",
                "max_unzipped_bytes",
            )
        if total > limit:
            raise OverLimit(
                f"the zip's members unzip to {total:,} bytes or more; the limit is {limit:,}",
                "max_unzipped_bytes",
            )
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > RATIO_GRACE and ratio > limits.max_zip_ratio:
            raise OverLimit(
                f"{info.filename} unzips {ratio:,.0f} times larger than it is stored; the "
                f"limit is {limits.max_zip_ratio}",
                "max_zip_ratio",
            )


def _copy(source: zipfile.ZipFile, info: zipfile.ZipInfo, target: zipfile.ZipFile) -> None:
    """The member inflated CHUNK at a time into `target`, stored: zipfile stops a member at
    its declared size (and checks its CRC there), so this holds no more than the directory
    said, which `check_directory` bounded. (A whole `read()` would inflate every compressed
    byte of the member before cutting it to that size.)"""
    stored = zipfile.ZipInfo(info.filename)  # the default date: any the source has may not do
    n = 0
    try:
        with source.open(info) as member, target.open(stored, "w", force_zip64=True) as out:
            while chunk := member.read(CHUNK):
                n += len(chunk)
                if n > info.file_size:  # zipfile's own bound, kept should it ever change
                    raise MtError(f"{info.filename} holds more than its header declares")
                out.write(chunk)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, RuntimeError, zlib.error) as err:
        # a lying header shows here as a bad CRC (the member cut at the size it declared)
        raise MtError(f"{info.filename}: {err}") from None

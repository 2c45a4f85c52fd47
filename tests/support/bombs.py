"""Zip bombs for the tests and benchmarks of zip uploads (mt.serve.unzip): small .docx files
whose `word/document.xml` inflates to many megabytes, honest or lying about it.

Shared by tests/ and scripts/bench (run from the repository root).
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

CHUNK = 1 << 20


def zip_bomb(inflated: int, declare: int | None = None, member: str = "word/document.xml") -> bytes:
    """A zip whose `member` inflates to `inflated` zero bytes (deflated about 1,000 to 1),
    built a megabyte at a time. With `declare`, its headers lie: they say the member holds
    `declare` bytes, with the CRC of that many zeros, so a reader that trusts them and checks
    the CRC at the declared end finds nothing wrong (the hardest lie to see)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        with z.open(member, "w", force_zip64=inflated >= zipfile.ZIP64_LIMIT) as f:
            left, zeros = inflated, bytes(CHUNK)
            while left > 0:
                f.write(zeros[: min(left, CHUNK)])
                left -= CHUNK
    data = bytearray(out.getvalue())
    if declare is not None:
        if inflated >= zipfile.ZIP64_LIMIT:
            raise ValueError("a lying bomb is built below 4 GiB (its sizes in the plain fields)")
        _lie(data, member.encode(), declare, zlib.crc32(bytes(declare)))
    return bytes(data)


def _lie(data: bytearray, name: bytes, size: int, crc: int) -> None:
    """Set the CRC and uncompressed size of `name` in its local header and its central
    directory entry."""
    fields = ((b"PK\x03\x04", 14, 22, 26, 30), (b"PK\x01\x02", 16, 24, 28, 46))
    for signature, crc_at, size_at, length_at, name_at in fields:
        at = 0
        while (at := data.find(signature, at)) >= 0:
            (length,) = struct.unpack_from("<H", data, at + length_at)
            if length == len(name) and data[at + name_at : at + name_at + length] == name:
                struct.pack_into("<I", data, at + crc_at, crc)
                struct.pack_into("<I", data, at + size_at, size)
            at += 4

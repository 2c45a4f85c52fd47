"""Zip uploads unpacked within limits (mt.serve.unzip): real zip bombs, honest and lying, are
refused while the reader holds a few hundred kilobytes, where zipfile's own `read` (what
python-docx calls) holds the whole inflated member."""

from __future__ import annotations

import io
import os
import tracemalloc
import zipfile

import pytest
from support.bombs import zip_bomb

from mt.errors import MtError
from mt.serve.documents import read_document
from mt.serve.unzip import CHUNK, OverLimit, ZipLimits, unpack

MIB = 1 << 20


def peak_bytes(call) -> tuple[object, int]:  # noqa: ANN001
    """`call()`'s result (or the exception it raised) and the most Python memory it held."""
    tracemalloc.start()
    try:
        try:
            out: object = call()
        except Exception as err:  # noqa: BLE001 - returned for the test to look at
            out = err
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def lying_bomb() -> bytes:
    """80 MiB of zeros in 80 KB, its headers saying 1,000 bytes (with their CRC)."""
    return zip_bomb(80 * MIB, declare=1000)


def test_an_honest_bomb_is_refused_from_its_directory_before_any_inflating():
    pytest.importorskip("docx")  # imported before memory is counted
    bomb = zip_bomb(100 * MIB)
    assert len(bomb) < 150_000
    err, peak = peak_bytes(lambda: read_document(bomb, ".docx"))
    assert isinstance(err, OverLimit) and err.limit == "max_unzipped_bytes"
    assert str(err) == ("word/document.xml unzips to 104,857,600 bytes; the limit is 33,554,432")
    assert peak < 2 * len(bomb) + MIB  # the upload and its directory, nothing inflated
    # Under the size limit, the ratio gives it away.
    err, _ = peak_bytes(lambda: unpack(zip_bomb(8 * MIB), ZipLimits()))
    assert isinstance(err, OverLimit) and err.limit == "max_zip_ratio"
    assert "word/document.xml unzips 1,0" in str(err) and "the limit is 100" in str(err)


def test_a_lying_bomb_is_read_no_further_than_it_declares(lying_bomb):
    # What a trusting reader costs: zipfile's read() inflates every byte before cutting.
    with zipfile.ZipFile(io.BytesIO(lying_bomb)) as z:
        data, peak = peak_bytes(lambda: z.read("word/document.xml"))
    assert data == bytes(1000) and peak > 80 * MIB  # the CRC of the declared bytes holds
    # The bounded reader holds a chunk at a time and gives the parser the declared bytes.
    out, peak = peak_bytes(lambda: unpack(lying_bomb, ZipLimits()))
    assert peak < 4 * CHUNK + 2 * len(lying_bomb)
    with zipfile.ZipFile(io.BytesIO(out)) as z:
        member = z.getinfo("word/document.xml")
        assert member.compress_type == zipfile.ZIP_STORED and z.read(member) == bytes(1000)
    err, peak = peak_bytes(lambda: read_document(lying_bomb, ".docx"))
    assert isinstance(err, MtError) and str(err).startswith("not a .docx file")
    assert peak < 4 * MIB


def test_a_lie_the_crc_catches_is_one_line():
    bomb = bytearray(zip_bomb(4 * MIB, declare=1000))
    bomb[bomb.rfind(b"PK\x01\x02") + 16] ^= 0xFF  # the member's CRC in the directory, wrong
    with pytest.raises(MtError, match=r"^word/document.xml: Bad CRC-32"):
        unpack(bytes(bomb), ZipLimits())


def zip_of(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()


def test_member_count_total_size_and_methods():
    many = zip_of({f"m{i}.xml": b"<x/>" for i in range(11)})
    with pytest.raises(OverLimit, match="the zip has 11 members; the limit is 10") as err:
        unpack(many, ZipLimits(max_zip_members=10))
    assert err.value.limit == "max_zip_members"
    noise = {"a.bin": os.urandom(600_000), "b.bin": os.urandom(600_000)}  # incompressible
    with pytest.raises(OverLimit, match="members unzip to 1,200,000 bytes or more") as err:
        unpack(zip_of(noise), ZipLimits(max_unzipped_bytes=MIB))
    assert err.value.limit == "max_unzipped_bytes"
    with pytest.raises(MtError, match="compression method 12"):
        unpack(zip_of({"a.xml": b"<x/>"}, zipfile.ZIP_BZIP2), ZipLimits())
    with pytest.raises(MtError, match="^File is not a zip file$"):
        unpack(b"PK no zip", ZipLimits())


def test_a_real_docx_unpacks_to_the_same_members():
    docx = pytest.importorskip("docx")
    doc = docx.Document()
    doc.add_paragraph("Ein Hund rennt.")
    buf = io.BytesIO()
    doc.save(buf)
    out = unpack(buf.getvalue(), ZipLimits())
    with zipfile.ZipFile(buf) as a, zipfile.ZipFile(io.BytesIO(out)) as b:
        assert [i.filename for i in a.infolist()] == [i.filename for i in b.infolist()]
        assert all(a.read(n) == b.read(n) for n in a.namelist())
    assert read_document(buf.getvalue(), ".docx").plain == ["Ein Hund rennt."]

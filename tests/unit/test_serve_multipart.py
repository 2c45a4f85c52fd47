"""LibreTranslate's multipart uploads read by hand (mt.serve.libre): fields and files as an
HTTP client writes them, a broken body one 400 line, and memory of about one copy."""

from __future__ import annotations

import tracemalloc

import httpx
import pytest

from mt.serve.forms import fields as _fields
from mt.serve.limits import ApiError


def body(data: dict, files: dict) -> tuple[bytes, str]:
    built = httpx.Request("POST", "http://x/translate_file", data=data, files=files)
    return built.read(), built.headers["content-type"]


def test_fields_and_files_as_httpx_writes_them():
    raw, kind = body({"source": "de", "target": "en"}, {"file": ("a b.txt", b"Ein Hund.\r\n\r\nx")})
    assert _fields(raw, kind) == {
        "source": "de", "target": "en", "file": ("a b.txt", b"Ein Hund.\r\n\r\nx"),
    }  # fmt: skip
    boundary = kind.split("boundary=")[1]
    head = 'Content-Disposition: form-data; name="file"; filename="x.txt"'
    b64 = f"--{boundary}\r\n{head}\r\nContent-Transfer-Encoding: base64\r\n\r\nSmEu\r\n"
    b64 = (b64 + f"--{boundary}--\r\n").encode()
    assert _fields(b64, kind) == {"file": ("x.txt", b"Ja.")}


@pytest.mark.parametrize("cut", [10, 60, -12])
def test_a_broken_body_is_one_400_line(cut):
    raw, kind = body({"source": "de"}, {"file": ("a.txt", b"Ein Hund.")})
    with pytest.raises(ApiError) as err:
        _fields(raw[:cut], kind)
    assert err.value.status == 400 and "multipart" in err.value.message
    with pytest.raises(ApiError, match="no boundary"):
        _fields(raw, "multipart/form-data")


def test_an_upload_costs_about_one_copy():
    upload = bytes(range(256)) * (4 << 12)  # 4 MiB
    raw, kind = body({"source": "de"}, {"file": ("a.docx", upload)})
    tracemalloc.start()
    try:
        out = _fields(raw, kind)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out["file"] == ("a.docx", upload)
    assert peak < 1.5 * len(upload)

"""The fields of a LibreTranslate request: a JSON object, an url-encoded form or a
multipart/form-data body (its files as (filename, bytes)), which its clients send alike."""

from __future__ import annotations

import base64
from email.message import Message
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any
from urllib.parse import parse_qs

from mt.serve import bodies
from mt.serve.limits import ApiError


def fields(raw: bytes, content_type: str) -> dict[str, Any]:
    """JSON, url-encoded or multipart form fields (files as (filename, bytes))."""
    if content_type.startswith("application/json"):
        obj = bodies.parse_json(raw)
        if not isinstance(obj, dict):
            raise ApiError(400, "the body must be a JSON object")
        return obj
    if content_type.startswith("multipart/form-data"):
        return _multipart(raw, content_type)
    form = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v if k == "q" and len(v) > 1 else v[0] for k, v in form.items()}


def _multipart(raw: bytes, content_type: str) -> dict[str, Any]:
    """The fields of a multipart/form-data body (files as (filename, bytes)). Split on the
    boundary by hand, each part's few header lines read by the email parser: parsing the whole
    body with it costs some ten times an upload's size in memory, this one copy of each part."""
    kind = Message()
    kind["content-type"] = content_type
    boundary = kind.get_param("boundary")
    if not isinstance(boundary, str) or not boundary:
        raise ApiError(400, "the body is not multipart/form-data (no boundary)")
    delimiter = b"--" + boundary.encode("latin-1")
    pos = raw.find(delimiter)
    if pos < 0:
        raise ApiError(400, "the body is not multipart/form-data (no boundary in it)")
    out: dict[str, Any] = {}
    while not raw.startswith(b"--", pos := pos + len(delimiter)):  # `--`: the last boundary
        head_end = raw.find(b"\r\n\r\n", pos)
        end = raw.find(b"\r\n" + delimiter, head_end)
        if head_end < 0 or end < 0:
            raise ApiError(400, "the multipart/form-data body is cut short")
        head = BytesParser(policy=HTTP).parsebytes(raw[pos:head_end].lstrip() + b"\r\n\r\n")
        payload = raw[head_end + 4 : end]
        if head.get("content-transfer-encoding", "").lower() == "base64":
            payload = base64.b64decode(payload)
        name, filename = head.get_param("name", header="content-disposition"), head.get_filename()
        if filename is not None:
            out[str(name)] = (filename, payload)
        else:
            out[str(name)] = payload.decode("utf-8", "replace")
        pos = end + 2
    return out

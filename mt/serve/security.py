"""Who may use the server: API keys, read from a file and compared in constant time.

A server on 127.0.0.1 is reachable only from this machine, so it needs no key; one bound to any
other address must have keys (the command refuses to start without --api-key-file).
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any

from mt.errors import MtError
from mt.serve.limits import ApiError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def read_keys(path: Path) -> list[bytes]:
    """One key per line; blank lines and lines starting with # are skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MtError(f"{path}: API key file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise MtError(f"{path}: cannot read the API key file ({err})") from None
    keys = [k.strip() for k in text.splitlines()]
    keys = [k.encode("utf-8") for k in keys if k and not k.startswith("#")]
    if not keys:
        raise MtError(f"{path}: no API key in the file")
    if any(len(k) < 16 for k in keys):
        raise MtError(f"{path}: every API key must have at least 16 characters")
    return keys


def key_of(headers: dict[str, str] | object, body_key: str | None = None) -> str | None:
    """The key a request carries: `Authorization: Bearer K`, `X-API-Key: K`, or (the
    LibreTranslate way) `api_key` in the body."""
    get = headers.get  # type: ignore[attr-defined]
    auth = get("authorization") or ""
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return get("x-api-key") or body_key


def check_key(keys: list[bytes] | None, given: str | None) -> None:
    """401 unless `given` is one of `keys` (no keys: every request is let in). Every key is
    compared, whatever matched, so the time taken says nothing about any key."""
    if keys is None:
        return
    candidate = (given or "").encode("utf-8")
    match = False
    for key in keys:
        match |= hmac.compare_digest(candidate, key)
    if not match:
        raise ApiError(401, "a valid API key is needed (Authorization: Bearer KEY)", "api_key")


def client_of(request: Any, key: str | None) -> str:
    """Whose request it is, for the worker's fair queue (mt.serve.jobs): its API key, or
    its address."""
    if key:
        return "key:" + key
    return "address:" + (request.client.host if request.client else "")

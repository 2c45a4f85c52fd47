"""What the JSON bodies of the API may hold, read by hand so every mistake gets one line.

Items follow `mt translate --input-format jsonl` (one rule set: mt.translation.requests); options
are the decode settings a request may choose (mt.translation.options.OFFERED["request"], each of its
DecodeConfig field's type), plus `alignment`. Settings that spend the server's memory or threads
(batch size, int8, dtype, buffering) belong to whoever runs the server, so a request naming them
is refused rather than silently ignored.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from mt.errors import MtError
from mt.plan import OFFERED as PLAN_OFFERED
from mt.plan import PlanOptions
from mt.schema import Key, object_schema
from mt.serve.limits import ApiError, Limits, check_count, check_text
from mt.translation.options import HELP, OFFERED, TYPE_NAMES, DecodeOptions, accepts, value_type
from mt.translation.requests import ITEM_SCHEMA, Request, request_from_object

SERVER_SETTINGS = ("int8", "dtype", "max_tokens", "buffer_lines")
CLIENT_OPTIONS = {name: value_type(name) for name in OFFERED["request"]}


@dataclass
class TranslateBody:
    requests: list[Request]
    options: DecodeOptions
    alignment: bool
    model: str | None
    split: bool = True  # sentence by sentence (off with alignment: positions are per sentence)
    glossary: Any = None  # terms or an uploaded glossary's id (mt.serve.glossaries)
    to: str | None = None  # the body's target language (items may name their own)
    frm: str | None = None
    adapter: str | None = None  # one of the model's adapters (mt serve --adapter)


@dataclass
class ScoreBody:
    src: list[str]
    tgt: list[str]
    model: str | None
    to: str | None = None  # target language of a multilingual model
    adapter: str | None = None


@dataclass
class AttentionBody:
    src: str
    options: DecodeOptions
    model: str | None
    to: str | None = None  # target language of a multilingual model
    adapter: str | None = None


def parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise ApiError(400, "the body is not UTF-8") from None
    except json.JSONDecodeError as err:
        raise ApiError(400, f"the body is not JSON: {err.msg} at character {err.pos}") from None


def _object(obj: Any, keys: tuple[str, ...], where: str = "the body") -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ApiError(422, f"{where} must be a JSON object, got {_kind(obj)}")
    unknown = sorted(set(obj) - set(keys))
    if unknown:
        raise ApiError(422, f"unknown key {unknown[0]!r} in {where} (known: {', '.join(keys)})")
    return obj


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )


def _model(obj: dict[str, Any], key: str = "model") -> str | None:
    """The body's `model` (or `adapter`): a name, or None for the default."""
    model = obj.get(key)
    if model is not None and not isinstance(model, str):
        raise ApiError(422, f"'{key}' must be a string, got {_kind(model)}")
    return model


def _items(obj: dict[str, Any], limits: Limits) -> list[Any]:
    items = obj.get("items")
    if not isinstance(items, list):
        raise ApiError(422, f"'items' must be a list, got {_kind(items)}")
    check_count(len(items), limits)
    return items


def parse_options(raw: Any, allowed: tuple[str, ...] | None = None) -> tuple[DecodeOptions, bool]:
    """`options` -> (DecodeOptions, alignment), each value of its field's type."""
    if raw is None:
        return DecodeOptions(), False
    if not isinstance(raw, dict):
        raise ApiError(422, f"'options' must be an object, got {_kind(raw)}")
    known = (*CLIENT_OPTIONS, "alignment") if allowed is None else allowed
    given: dict[str, Any] = {}
    alignment = False
    for key, value in raw.items():
        if key not in known:
            if key in SERVER_SETTINGS:
                raise ApiError(422, f"options.{key} is a setting of the server, not of a request")
            raise ApiError(422, f"unknown option 'options.{key}' (known: {', '.join(known)})")
        want = bool if key == "alignment" else value_type(key)
        ok = accepts(want, value)
        if not ok:
            raise ApiError(422, f"options.{key} must be {TYPE_NAMES[want]}, got {_kind(value)}")
        if key == "alignment":
            alignment = value
        else:
            given[key] = float(value) if want is float else value
    return DecodeOptions(**given), alignment


def _lang(obj: dict[str, Any], key: str) -> str | None:
    """A language code field (a multilingual model's target), or None."""
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise ApiError(422, f"'{key}' must be a language code, got {_kind(value)}")
    return value


def parse_translate(obj: Any, limits: Limits) -> TranslateBody:
    obj = _object(obj, tuple(k.name for k in TRANSLATE_KEYS))
    items = _items(obj, limits)
    split = _value(obj, "split_sentences")
    defaults = {k: obj[k] for k in ("to", "from") if obj.get(k) is not None}
    requests = []
    for i, item in enumerate(items):
        try:  # the body's "to"/"from" hold for every item that names none
            item = {**defaults, **item} if isinstance(item, dict) else item
            request = request_from_object(item, f"items[{i}]")
        except MtError as err:
            raise ApiError(422, str(err)) from None
        if split:  # the item's own newlines and paragraphs come back as sent
            request = dataclasses.replace(request, src=item["src"])
        check_text(request.src, f"items[{i}].src", limits)
        check_text(request.prefix, f"items[{i}].prefix", limits)
        check_text(" ".join(request.constraints), f"items[{i}].constraints", limits)
        requests.append(request)
    options, alignment = parse_options(obj.get("options"))
    glossary = _value(obj, "glossary")
    return TranslateBody(
        requests,
        options,
        alignment,
        _value(obj, "model"),
        split and not alignment,
        glossary,
        _value(obj, "to"),
        _value(obj, "from"),
        _value(obj, "adapter"),
    )


def _value(obj: dict[str, Any], name: str) -> Any:
    """The value of the /v1/translate body's key `name` (TRANSLATE_KEYS), checked."""
    key = next(k for k in TRANSLATE_KEYS if k.name == name)
    value = key.value(obj)
    if not key.fits(value):
        raise ApiError(422, f"'{name}' must be {key.must}, got {_kind(value)}")
    return value


def parse_score(obj: Any, limits: Limits) -> ScoreBody:
    obj = _object(obj, ("items", "model", "adapter", "to"))
    src, tgt = [], []
    for i, item in enumerate(_items(obj, limits)):
        item = _object(item, ("src", "tgt"), f"items[{i}]")
        for key, out in (("src", src), ("tgt", tgt)):
            value = item.get(key)
            if not isinstance(value, str):
                raise ApiError(422, f"items[{i}].{key} must be a string, got {_kind(value)}")
            check_text(value, f"items[{i}].{key}", limits)
            out.append(value.replace("\n", " "))
    return ScoreBody(src, tgt, _model(obj), _lang(obj, "to"), _model(obj, "adapter"))


def parse_attention(obj: Any, limits: Limits) -> AttentionBody:
    obj = _object(obj, ("src", "options", "model", "adapter", "to"))
    src = obj.get("src")
    if not isinstance(src, str):
        raise ApiError(422, f"'src' must be a string, got {_kind(src)}")
    if not src.strip():
        raise ApiError(422, "'src' is empty")
    check_text(src, "src", limits)
    options, _ = parse_options(obj.get("options"), allowed=OFFERED["attention"])
    src = src.replace("\n", " ")
    return AttentionBody(src, options, _model(obj), _lang(obj, "to"), _model(obj, "adapter"))


# -- JSON schemas for the OpenAPI page (the parsers above are what is enforced) -----------------

JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}
ADAPTER_HELP = "one of the model's adapters (mt serve --adapter; /v1/models lists them)"

_OPTIONS_SCHEMA = {
    "type": "object",
    "description": "Decoding settings; any left out keep the checkpoint's (as mt translate).",
    "properties": {
        **{
            name: {
                "type": JSON_TYPES[t],
                "description": HELP[name],
            }
            for name, t in CLIENT_OPTIONS.items()
        },
        "alignment": {"type": "boolean"},
    },
    "additionalProperties": False,
}
# The keys of a /v1/translate body, defined once: `parse_translate` reads them (and the items by
# mt.translation.requests.ITEM_KEYS), TRANSLATE_SCHEMA shows them; the steps around search a request
# chooses itself are the plan options' `request` keys (mt.plan).
TRANSLATE_KEYS = (
    Key("items", {"type": "array", "items": ITEM_SCHEMA}, "a list", required=True),
    Key("options", _OPTIONS_SCHEMA, "an object"),
    Key("model", {"type": "string"}, "a string"),
    Key("adapter", {"type": "string", "description": ADAPTER_HELP}, "a string"),
    Key(
        "to",
        {"type": "string", "description": "target language of items that name none"},
        "a language code",
    ),
    Key("from", {"type": "string"}, "a language code"),
    *(
        f.metadata["request"]
        for f in dataclasses.fields(PlanOptions)
        if f.name in PLAN_OFFERED["request"]
    ),
)
TRANSLATE_SCHEMA = object_schema(
    TRANSLATE_KEYS,
    example={"items": [{"src": "Ein Hund rennt im Park."}], "options": {"beam": 5}},
)
SCORE_SCHEMA = {
    "type": "object",
    "required": ["items"],
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["src", "tgt"],
                "properties": {"src": {"type": "string"}, "tgt": {"type": "string"}},
            },
        },
        "model": {"type": "string"},
        "adapter": {"type": "string", "description": ADAPTER_HELP},
    },
}
ATTENTION_SCHEMA = {
    "type": "object",
    "required": ["src"],
    "properties": {
        "src": {"type": "string"},
        "options": {
            "type": "object",
            "properties": {n: {"type": JSON_TYPES[value_type(n)]} for n in OFFERED["attention"]},
        },
        "model": {"type": "string"},
        "adapter": {"type": "string", "description": ADAPTER_HELP},
    },
}


def body_doc(schema: dict[str, Any]) -> dict[str, Any]:
    """`openapi_extra` for a route that reads its JSON body itself."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


async def read_body(request: Any, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes `limit` bytes (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(
            413, f"the body has {declared} bytes; the limit is {limit}", "max_body_bytes"
        )
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > limit:
            raise ApiError(413, f"the body is over the limit of {limit} bytes", "max_body_bytes")
        chunks.append(chunk)
    return b"".join(chunks)

"""A JSON request's keys are defined once (mt.schema.Key): the `--input-format jsonl` reader,
the server's item and body parsers and the JSON schema of the API's page are made from them.
The messages below are the readers' exact words, so a key's check and its error stay one."""

from __future__ import annotations

import pytest

from mt.errors import MtError
from mt.schema import Key, fits, object_schema
from mt.translation.requests import ITEM_KEYS, ITEM_SCHEMA, Request, request_from_object


def test_a_value_fits_the_json_type_its_schema_names() -> None:
    assert fits({"type": "string"}, "a") and not fits({"type": "string"}, 1)
    assert fits({"type": "integer"}, 3) and not fits(
        {"type": "integer"}, True
    )  # a bool is no number
    assert fits({"type": "number"}, 3) and fits({"type": "number"}, 0.5)
    assert not fits({"type": "number"}, "3") and not fits({"type": "boolean"}, 1)
    strings = {"type": "array", "items": {"type": "string"}}
    assert fits(strings, []) and fits(strings, ["a", "b"]) and not fits(strings, ["a", 1])
    objects = {"type": "array", "items": {"type": "object"}}
    assert fits(objects, [1, "x"])  # a list's objects are read by their reader, which names them
    either = {"oneOf": [{"type": "string"}, strings]}
    assert fits(either, "a") and fits(either, ["a"]) and not fits(either, {"a": 1})
    assert fits({"description": "anything"}, None)


def test_a_key_left_out_is_its_default_and_null_only_where_that_is() -> None:
    optional = Key("to", {"type": "string"}, "a string")
    assert optional.value({}) is None and optional.fits(None)
    text = Key("prefix", {"type": "string"}, "a string", default="")
    assert text.value({}) == "" and not text.fits(None)
    required = Key("src", {"type": "string"}, "a string", required=True)
    assert not required.fits(None) and required.fits("x")
    schema = object_schema([required, text], example={"src": "x"})
    assert schema == {
        "type": "object",
        "required": ["src"],
        "properties": {"src": {"type": "string"}, "prefix": {"type": "string"}},
        "example": {"src": "x"},
    }


def test_the_item_schema_is_the_keys_the_reader_takes() -> None:
    names = [k.name for k in ITEM_KEYS]
    assert names == ["src", "prefix", "constraints", "format", "to", "from"]
    assert list(ITEM_SCHEMA["properties"]) == names and ITEM_SCHEMA["required"] == ["src"]
    r = request_from_object(
        {"src": "a\nb", "prefix": " A ", "constraints": [" x "], "format": "c-format",
         "to": "en", "from": "de"},
        "f:1",
    )  # fmt: skip
    assert r == Request("a b", "A", ["x"], ("c-format",), to="en", frm="de", where="f:1")
    assert request_from_object({"src": "a", "to": None}, "f:1") == Request("a", where="f:1")


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([1], "f:1: expected a JSON object, got list"),
        (
            {"src": "a", "text": 1},
            "f:1: unknown key 'text' (known: src, prefix, constraints, format, to, from)",
        ),
        ({}, "f:1: 'src' must be a string"),
        ({"src": None}, "f:1: 'src' must be a string"),
        ({"src": "a", "prefix": None}, "f:1: 'prefix' must be a string"),
        ({"src": "a", "constraints": "x"}, "f:1: 'constraints' must be a list of strings"),
        ({"src": "a", "constraints": ["x", 2]}, "f:1: 'constraints' must be a list of strings"),
        ({"src": "a", "constraints": ["x", " "]}, "f:1: a constraint is empty"),
        (
            {"src": "a", "constraints": [" "], "format": 3},
            "f:1: a constraint is empty",  # checked in the keys' order
        ),
        (
            {"src": "a", "format": [1]},
            "f:1: 'format' must be a gettext flag (\"c-format\") or a list of them",
        ),
        ({"src": "a", "to": 5}, "f:1: 'to' must be a language code string"),
        ({"src": "a", "from": ["de"]}, "f:1: 'from' must be a language code string"),
    ],
)
def test_a_bad_item_is_one_line_naming_its_key(obj, message) -> None:
    with pytest.raises(MtError) as err:
        request_from_object(obj, "f:1")
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "the body must be a JSON object, got a list"),
        (
            {"items": [], "split": True},
            "unknown key 'split' in the body (known: items, options, model, adapter, to, from, "
            "split_sentences, glossary)",
        ),
        ({}, "'items' must be a list, got null"),
        ({"items": [{"src": "a"}], "options": 3}, "'options' must be an object, got a number"),
        ({"items": [{"src": "a"}], "model": 3}, "'model' must be a string, got a number"),
        ({"items": [{"src": "a"}], "adapter": True}, "'adapter' must be a string, got a boolean"),
        (
            {"items": [{"src": "a", "from": "de"}], "from": []},  # the item's own "from" wins
            "'from' must be a language code, got a list",
        ),
        ({"items": [{"src": "a"}], "from": []}, "items[0]: 'from' must be a language code string"),
        ({"items": [{"src": "a"}], "to": 5}, "items[0]: 'to' must be a language code string"),
        ({"items": [{"src": 1}]}, "items[0]: 'src' must be a string"),
        (
            {"items": [{"src": "a"}], "split_sentences": None},
            "'split_sentences' must be true or false, got null",
        ),
        (
            {"items": [{"src": 1}], "split_sentences": 1},
            "'split_sentences' must be true or false, got a number",  # before the items
        ),
        (
            {"items": [{"src": "a"}], "glossary": 1, "model": 1},
            "'glossary' must be an object of terms or an id, got a number",
        ),
    ],
)
def test_a_bad_translate_body_is_one_line(body, message) -> None:
    from mt.serve.bodies import parse_translate
    from mt.serve.limits import ApiError, Limits

    with pytest.raises(ApiError) as err:
        parse_translate(body, Limits())
    assert err.value.status == 422 and err.value.message == message


def test_the_translate_schema_is_the_keys_the_parser_takes() -> None:
    from mt.serve.bodies import TRANSLATE_KEYS, TRANSLATE_SCHEMA, parse_translate
    from mt.serve.limits import Limits

    names = [k.name for k in TRANSLATE_KEYS]
    assert list(TRANSLATE_SCHEMA["properties"]) == names and TRANSLATE_SCHEMA["required"] == [
        "items"
    ]
    assert TRANSLATE_SCHEMA["properties"]["items"]["items"] is ITEM_SCHEMA
    body = parse_translate(
        {"items": [{"src": "x"}], "model": "m", "adapter": "a", "to": "en", "from": "de",
         "split_sentences": False, "glossary": "id", "options": {"beam": 2, "alignment": True}},
        Limits(),
    )  # fmt: skip
    assert (body.model, body.adapter, body.to, body.frm, body.glossary) == (
        "m",
        "a",
        "en",
        "de",
        "id",
    )
    assert body.options.given() == {"beam": 2} and body.alignment and not body.split
    assert body.requests[0].to == "en" and body.requests[0].frm == "de"  # the body's, for items

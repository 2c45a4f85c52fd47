"""The keys of a JSON object a user sends (a line of `--input-format jsonl`, a body of the HTTP
API), each defined once as a `Key`: its JSON schema, which the API's page shows, and the check
its value passes, made from that schema, with the words an error says the value must be. So a
key the parser reads is a key the page documents, of the type the page says.

Only the part of JSON Schema these keys use is read: `type`, `items` and `oneOf`. An object's
entries, and a list's objects, are read by the code that uses them, whose errors name the entry.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "boolean": bool,
    "integer": int,
    "number": (int, float),
    "object": dict,
    "array": list,
}
PLAIN = ("string", "boolean", "integer", "number")


@dataclass(frozen=True)
class Key:
    """One key of a JSON object: its name, schema, what its value must be (for the error)."""

    name: str
    schema: dict[str, Any]  # {"type": "string", "description": ...}
    must: str  # "a string", "true or false": the end of "'name' must be ..."
    default: Any = None  # its value when left out; a key whose default is None may be null
    required: bool = False

    def value(self, obj: dict[str, Any]) -> Any:
        """The key's value in `obj`, its default when left out."""
        return obj.get(self.name, self.default)

    def fits(self, value: Any) -> bool:
        """Whether `value` is one this key takes (null where its default is)."""
        if value is None and self.default is None and not self.required:
            return True
        return fits(self.schema, value)


def fits(schema: dict[str, Any], value: Any) -> bool:
    """Whether `value` has the JSON type `schema` names (one of its `oneOf`), and a list's items
    the plain type its `items` names."""
    if "oneOf" in schema:
        return any(fits(s, value) for s in schema["oneOf"])
    kind = schema.get("type")
    if kind is None:
        return True
    if not isinstance(value, JSON_TYPES[kind]):
        return False
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    items = schema.get("items", {})
    if kind == "array" and items.get("type") in PLAIN:
        return all(fits(items, v) for v in value)
    return True


def object_schema(keys: Iterable[Key], **extra: Any) -> dict[str, Any]:
    """The JSON schema of an object of `keys` (and `extra` entries: a description, an
    example)."""
    keys = list(keys)
    schema: dict[str, Any] = {"type": "object"}
    required = [k.name for k in keys if k.required]
    if required:
        schema["required"] = required
    schema["properties"] = {k.name: k.schema for k in keys}
    return schema | extra

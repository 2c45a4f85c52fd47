"""Glossaries on the server: given inline with a request, uploaded once and named by id, or the
server's own (`mt serve --glossary FILE`).

A request's `"glossary"` is an object of terms (`{"Hund": "hound"}`) or the id of an uploaded
glossary; without one, the server's glossary applies to the requests of its direction. Uploads
(`POST /v1/glossaries`) hold entries as an object or as the text of a TSV, CSV, TBX or TMX file
(mt.glossary.files: the same rules, the same one-line errors, as 422), at most
`max_glossary_entries` entries and MAX_PER_KEY glossaries per API key. A glossary is its
key's own: another key neither lists, uses nor deletes it. Uploads live in memory, for the
server's lifetime: a restarted server has none (clients upload again, as DeepL's glossaries
are re-created per account).

Terms are stemmed in the languages of the direction they are used for (the request's `from`
and `to`, else the model's), once per glossary and direction.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from mt.decode_rules import can_constrain
from mt.errors import MtError
from mt.glossary import Entry, Glossary
from mt.glossary.files import FORMATS, parse_glossary
from mt.glossary.words import base_language
from mt.serve.limits import ApiError, Limits, check_text
from mt.translation.options import DecodeOptions
from mt.translation.session import Session

MAX_PER_KEY = 100  # uploaded glossaries one API key may hold (409 beyond)


@dataclass
class Stored:
    """A glossary's entries and the languages it names (None: the model's)."""

    name: str
    entries: list[Entry]
    src_lang: str | None = None
    tgt_lang: str | None = None
    id: str = ""
    owner: bytes | None = None
    _built: dict[tuple[str | None, str | None], Glossary] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "from": self.src_lang,
            "to": self.tgt_lang,
            "entries": len(self.entries),
        }

    def fits(self, src: str | None, tgt: str | None) -> bool:
        """Whether it translates the direction `src` -> `tgt` (a language it does not name
        fits any)."""
        return all(
            own is None or asked is None or base_language(own) == base_language(asked)
            for own, asked in ((self.src_lang, src), (self.tgt_lang, tgt))
        )

    def glossary(self, src: str | None, tgt: str | None) -> Glossary:
        """The glossary for direction `src` -> `tgt`, built once."""
        key = (self.src_lang or src, self.tgt_lang or tgt)
        if key not in self._built:
            self._built[key] = Glossary(self.entries, key[0], key[1], self.name)
        return self._built[key]


def inline(value: Any, where: str, limits: Limits) -> Stored:
    """A request's `{"term": "target", ...}`, checked."""
    if not isinstance(value, dict) or not value:
        raise ApiError(422, f'{where} must be an object of terms, e.g. {{"Hund": "hound"}}')
    _check_size(len(value), where, limits)
    entries = []
    for src, tgt in value.items():
        if not isinstance(tgt, str):
            raise ApiError(422, f"{where}[{src!r}] must be a string")
        check_text(src, f"{where} term", limits)
        check_text(tgt, f"{where}[{src!r}]", limits)
        entries.append(Entry(src.strip(), tgt.strip(), f"{where}[{src!r}]"))
    stored = Stored(where, entries)
    try:
        stored.glossary(None, None)  # checks the entries: empty terms, one term twice
    except MtError as err:
        raise ApiError(422, str(err)) from None
    return stored


def _check_size(n: int, where: str, limits: Limits) -> None:
    if n > limits.max_glossary_entries:
        raise ApiError(
            413,
            f"{where} has {n} entries; the limit is {limits.max_glossary_entries}",
            "max_glossary_entries",
        )


class Glossaries:
    """The uploaded glossaries, by id, and the server's own."""

    def __init__(self, limits: Limits, default: Stored | None = None) -> None:
        self.limits = limits
        self.default = default
        self._stored: OrderedDict[str, Stored] = OrderedDict()
        self._lock = threading.Lock()

    def upload(self, obj: Any, owner: bytes | None) -> Stored:
        """`{"name", "from", "to", and "entries": {...} or "content" with "format"}`."""
        if not isinstance(obj, dict):
            raise ApiError(422, "the body must be a JSON object")
        known = ("name", "from", "to", "entries", "content", "format")
        unknown = sorted(set(obj) - set(known))
        if unknown:
            raise ApiError(422, f"unknown key {unknown[0]!r} (known: {', '.join(known)})")
        name = obj.get("name", "glossary")
        src, tgt = obj.get("from"), obj.get("to")
        for key, value in (("name", name), ("from", src), ("to", tgt)):
            if value is not None and not isinstance(value, str):
                raise ApiError(422, f"'{key}' must be a string")
        if ("entries" in obj) == ("content" in obj):
            raise ApiError(422, "give the terms as 'entries' (an object) or as 'content'")
        if "entries" in obj:
            stored = inline(obj["entries"], "entries", self.limits)
            stored.name, stored.src_lang, stored.tgt_lang = name, src, tgt
        else:
            content, fmt = obj.get("content"), obj.get("format", "tsv")
            if not isinstance(content, str) or fmt not in FORMATS:
                raise ApiError(
                    422, f"'content' must be a string and 'format' one of {', '.join(FORMATS)}"
                )
            try:
                g = parse_glossary(content.encode("utf-8"), name, src, tgt, fmt)
            except MtError as err:
                raise ApiError(422, str(err)) from None
            _check_size(len(g), name, self.limits)
            stored = Stored(name, g.entries, g.src_lang, g.tgt_lang)
        stored.id, stored.owner = uuid.uuid4().hex, owner
        with self._lock:
            if sum(s.owner == owner for s in self._stored.values()) >= MAX_PER_KEY:
                raise ApiError(
                    409, f"this key holds {MAX_PER_KEY} glossaries, the most it may: delete one"
                )
            self._stored[stored.id] = stored
        return stored

    def listed(self, owner: bytes | None) -> list[dict[str, Any]]:
        with self._lock:
            return [s.info() for s in self._stored.values() if s.owner == owner]

    def get(self, gid: str, owner: bytes | None) -> Stored:
        with self._lock:
            stored = self._stored.get(gid)
        if stored is None or stored.owner != owner:
            raise ApiError(404, f"no glossary {gid!r}")
        return stored

    def delete(self, gid: str, owner: bytes | None) -> None:
        self.get(gid, owner)
        with self._lock:
            self._stored.pop(gid, None)

    def for_request(
        self, value: Any, owner: bytes | None, src: str | None, tgt: str | None
    ) -> Glossary | None:
        """The glossary a request's `"glossary"` names (an object, an id, or none: the
        server's, where it fits the direction) for direction `src` -> `tgt`."""
        if value is None:
            if self.default is None or not self.default.fits(src, tgt):
                return None
            return self.default.glossary(src, tgt)
        stored = (
            self.get(value, owner)
            if isinstance(value, str)
            else inline(value, "'glossary'", self.limits)
        )
        if not stored.fits(src, tgt):
            raise ApiError(
                422,
                f"glossary {stored.name!r} is {stored.src_lang}-{stored.tgt_lang}, but this "
                f"request translates {src}-{tgt}",
            )
        return stored.glossary(src, tgt)


def owner_of(keys: list[bytes] | None, given: str | None) -> bytes | None:
    """Whose glossaries a request sees: its API key's (a digest of it), or everyone's on a
    server without keys."""
    if keys is None:
        return None
    return hashlib.sha256((given or "").encode("utf-8")).digest()


def direction(session: Session, frm: str | None, to: str | None) -> tuple[str, str | None]:
    """The languages a request translates between: its own, else the model's."""
    tgt = to or (session.cfg.data.tgt_lang if session.languages is None else None)
    return frm or session.source_language(), tgt


def check_beam(session: Session, options: DecodeOptions, alignment: bool) -> None:
    """422 unless the request's search can take a glossary's constraints."""
    cfg = session.decode_config(options)
    if not can_constrain(cfg, alignment):
        raise ApiError(
            422,
            "a glossary needs the constrained beam search: no options.greedy, sample, "
            "alignment, stop_early or no_repeat_ngram",
        )

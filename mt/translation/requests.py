"""What one input line asks of `mt translate`, read from plain text or from a JSON object.

`--input-format jsonl` lets each line carry more than the source sentence (a target prefix to
continue, terminology that must appear) while keeping translate's contract: one input line,
one output line, streamed. A malformed line is an error naming its line number, not a
skipped or guessed line, because a skipped line would shift every later output line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from mt.errors import MtError
from mt.plan import PlanOptions
from mt.schema import Key, object_schema
from mt.search.steps import Hypothesis

if TYPE_CHECKING:
    from mt.glossary import Glossary

# The keys of one JSON request (a line of `--input-format jsonl`, an item of the server's
# /v1/translate), defined once: `request_from_object` reads them, the server's page shows them.
ITEM_KEYS = (
    Key("src", {"type": "string"}, "a string", required=True),
    Key(
        "prefix",
        {"type": "string", "description": "target text the translation must start with"},
        "a string",
        default="",
    ),
    Key(
        "constraints",
        {
            "type": "array",
            "items": {"type": "string"},
            "description": "target phrases it must contain",
        },
        "a list of strings",
        default=[],
    ),
    Key(
        "format",
        {
            "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
            "description": "gettext format flags of the source (c-format): its placeholders",
        },
        'a gettext flag ("c-format") or a list of them',
        default=[],
    ),
    Key("to", {"type": "string", "description": "target language"}, "a language code string"),
    Key(
        "from",
        {"type": "string", "description": "source language (checked)"},
        "a language code string",
    ),
)
ITEM_SCHEMA = object_schema(ITEM_KEYS)


@dataclass(frozen=True)
class Plan:
    """The steps around search a request takes (mt.translation.stages): a caller's choices
    (mt.plan.PlanOptions, whose fields of the same names these are) made into one request's
    by `of`; the defaults are the CLI's. A plan names no translator: each step works on
    requests and translations only."""

    protect: bool = True  # spans (placeholders, tags, URLs) kept as written: mt.translation.protect
    recase: bool = True  # ALL-CAPS and Title Case lines in their usual case: mt.translation.casing
    keep_numbers: bool = True  # a line that lost a number again, numbers masked: .numbers
    html: bool = False  # the source is an HTML fragment: mt.translation.html_input
    pivot: str | None = None  # through this language (a multilingual model): mt.translation.pivot
    split: str | None = None  # sentence by sentence, the source in this language: .sentences
    glossary_hard: bool = False  # a glossary's terms constrained at once: mt.translation.terms
    glossary_soft: bool = False  # terms only written into the source (a data.terms model): same

    @classmethod
    def of(cls, options: PlanOptions, language: str | None = None, html: bool = False) -> Plan:
        """The plan of a request under a caller's `options` (mt.plan: each step this plan
        shares a name with is the option's), cut into sentences of `language` when the
        options say so, `html` when its source is an HTML fragment."""
        steps = {f.name: getattr(options, f.name) for f in fields(cls) if hasattr(options, f.name)}
        return cls(**steps, html=html, split=language if options.split_sentences else None)

    def unsplit(self) -> Plan:
        """This plan but whole lines: the steps a split request's sentences take. Requests
        whose plans differ only in `split` go through one run (`Translator.translate`), so the
        sentences of split lines and the lines left whole share batches."""
        return self if self.split is None else replace(self, split=None)


@dataclass
class Request:
    src: str
    prefix: str = ""  # target text the translation must start with
    constraints: list[str] = field(default_factory=list)  # target phrases it must contain
    formats: tuple[str, ...] = ()  # gettext format flags of the source (`c-format`): mt.spans
    keep: tuple[str, ...] = ()  # spans of the source search may write (mt.translation.protect)
    to: str | None = None  # target language (a multilingual model; None: the translator's)
    frm: str | None = None  # source language, checked against the model's ("from" in JSON)
    where: str = ""  # `file:line` (or `items[i]`) of a JSON request: its language errors name it
    plan: Plan = Plan()  # the steps around search (mt.translation.stages)
    glossary: Glossary | None = None  # terms its translation must use (mt.translation.terms)
    favour: list[str] = field(default_factory=list)  # target terms search raises: .terms
    # target terms: of its beam's outputs, search puts first the best that writes them all
    prefer: list[str] = field(default_factory=list)  # (mt.translation.terms.preferred)


@dataclass
class Translation:
    text: str
    hypotheses: list[Hypothesis]  # best first; empty for an empty input line
    texts: list[str]  # detokenized text of each hypothesis
    pieces: list[str] = field(default_factory=list)  # target pieces of the best hypothesis
    error: str = ""  # why this line could not be translated (its output is then empty)
    confidence: float | None = None  # log-probability per token (mt.translation.doubt)
    flags: list[str] = field(default_factory=list)  # doubts: copy, loop, short, long
    sentences: int = 1  # how many pieces search translated the line as (mt.translation.sentences)


def isolated(translate: Callable[[list], list[Translation]], items: list) -> list[Translation]:
    """`translate(items)`; when it fails for a reason no check foresaw (a bug), each item is
    tried alone, so one bad line costs its own output only: it comes back empty with its
    `error`, and every other line is translated. A user's error (MtError) still ends the run."""
    try:
        return translate(items)
    except MtError:
        raise
    except Exception as err:  # noqa: BLE001 - kept with the line that caused it
        if len(items) == 1:
            return [Translation("", [], [], error=f"{type(err).__name__}: {err}")]
    return [t for item in items for t in isolated(translate, [item])]


def parse_jsonl_line(line: str, where: str) -> Request:
    """`{"src": ..., "prefix": ..., "constraints": [...]}` -> Request; `where` is `file:line`."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise MtError(f"{where}: not a JSON object ({err.msg})") from None
    return request_from_object(obj, where)


def request_from_object(obj: Any, where: str) -> Request:
    """A decoded JSON value -> Request, by the rules of `--input-format jsonl` (the server's
    items follow them too, so a line and an item mean one thing)."""
    if not isinstance(obj, dict):
        raise MtError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    known = [k.name for k in ITEM_KEYS]
    unknown = sorted(set(obj) - set(known))
    if unknown:
        raise MtError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(known)})")
    values = {}
    for key in ITEM_KEYS:
        values[key.name] = key.value(obj)
        if not key.fits(values[key.name]):
            raise MtError(f"{where}: '{key.name}' must be {key.must}")
        if key.name == "constraints":  # each phrase checked as soon as the list is
            values[key.name] = [c.strip() for c in values[key.name]]
            if any(not c for c in values[key.name]):
                raise MtError(f"{where}: a constraint is empty")
    fmt = values["format"]
    return Request(
        values["src"].replace("\n", " "),
        values["prefix"].strip(),
        values["constraints"],
        tuple([fmt] if isinstance(fmt, str) else fmt),
        to=values["to"],
        frm=values["from"],
        where=where,
    )


def read_requests(
    lines: Iterable[str],
    fmt: str,
    name: str,
    first: int = 0,
    plan: Plan | None = None,
    glossary: Glossary | None = None,
) -> Iterator[Request]:
    """Requests from text lines (`fmt` text: each line is the source; html: each line is a
    fragment), JSON lines, or the messages of a gettext catalogue (`po`: each msgid, with its
    format flags), each with `plan` (default: the CLI's) and `glossary`; `first` is the
    0-based number of the first line, for error messages."""
    plan = plan or Plan()
    if fmt == "po":
        for r in po_requests("".join(lines), name):
            yield replace(r, plan=plan, glossary=glossary)
        return
    for i, line in enumerate(lines, first + 1):
        if fmt == "jsonl":
            stripped = line.strip()
            r = parse_jsonl_line(stripped, f"{name}:{i}") if stripped else Request("")
            yield replace(r, plan=plan, glossary=glossary)
        elif fmt == "html":
            yield Request(line.rstrip("\r\n"), where=f"{name}:{i}", plan=plan, glossary=glossary)
        else:
            yield Request(line.rstrip("\r\n"), plan=plan, glossary=glossary)


def po_requests(text: str, name: str) -> Iterator[Request]:
    """One request per message of a .po file (the header aside; a plural message is its
    msgid), its flags saying which placeholder syntax it holds. Needs polib (`mt[strings]`)."""
    try:
        import polib
    except ImportError:
        raise MtError("--input-format po needs polib: pip install 'mt[strings]'") from None
    try:
        catalogue = polib.pofile(text)
    except (OSError, ValueError) as err:
        raise MtError(f"{name}: not a gettext catalogue ({err})") from None
    for e in catalogue:
        if e.msgid and not e.obsolete:
            yield Request(" ".join(e.msgid.split()), formats=tuple(e.flags))


def translation_record(t: Any, alignment: bool) -> dict[str, Any]:
    """The JSON object written for one translation (`--output-format jsonl`).

    `score` is the best hypothesis' (length-normalised for beam search, a log-probability sum
    for greedy search and sampling); `nbest` lists every returned hypothesis best first;
    `tokens` are the best hypothesis' target pieces and `alignment` (with --alignment) the
    most-attended source position of each; `confidence` and `flags` say how far to trust it
    (mt.translation.doubt).
    """
    record: dict[str, Any] = {"translation": t.text}
    if t.hypotheses:
        best = t.hypotheses[0]
        record["score"] = _finite(best.score)
        record["tokens"] = t.pieces
        if alignment:
            record["alignment"] = best.alignment
        record["nbest"] = [
            {"translation": text, "score": _finite(h.score)}
            for text, h in zip(t.texts, t.hypotheses)
        ]
    else:  # an empty line: the empty output, probability 1
        record.update(score=0.0, tokens=[], nbest=[{"translation": "", "score": 0.0}])
        if alignment:
            record["alignment"] = []
    record["confidence"] = getattr(t, "confidence", None)
    record["flags"] = list(getattr(t, "flags", []))
    if t.error:  # a line that failed is written empty, with the reason
        record["error"] = t.error
    return record


def _finite(x: float) -> float | None:
    """Scores as strict JSON: NaN (not computed) and infinities become null."""
    return round(x, 6) if x == x and abs(x) != float("inf") else None

"""LibreTranslate's API, so the applications that speak it work unchanged.

`/translate` (JSON or form: `q` a string or a list, `source` or `auto`, `target`, `format`
text or html, `alternatives` N, `api_key`, and mt's `adapter`, in the body or the query),
`/translate_file` (a multipart upload of .txt,
.html, .srt, .docx, .xlf/.xliff or .tmx, answered with `translatedFileUrl`), `/download_file/NAME`,
`/languages`, `/detect` and `/frontend/settings`. An extension: `glossary` on `/translate`,
an object of terms (in a form, its JSON text) or an uploaded glossary's id, as `/v1/translate`
takes it (mt.serve.glossaries; text format only). Text is translated sentence by sentence with
its newlines kept (mt.translation.sentences); html goes through `mt translate --input-format html`'s
path, one fragment per line; files through mt.serve.documents. Translated files are kept in
memory (the last KEPT_FILES), under a random name, for their download.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import OrderedDict
from pathlib import PurePath
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from mt.errors import MtError
from mt.glossary import Glossary
from mt.serve import bodies, served_languages
from mt.serve.documents import CAT_SUFFIXES, SUFFIXES, Document, Texts, read_document
from mt.serve.forms import fields
from mt.serve.glossaries import Glossaries, check_beam, owner_of
from mt.serve.limits import ApiError, Limits, check_count, check_text
from mt.serve.security import check_key, client_of, key_of
from mt.serve.unzip import OverLimit
from mt.serve.worker import ModelWorker
from mt.translation.requests import Request as Item
from mt.translation.session import DecodeOptions, Session

KEPT_FILES = 32
MAX_ALTERNATIVES = 8
MEDIA = {
    ".txt": "text/plain; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".srt": "application/x-subrip; charset=utf-8",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".xlf": "application/xliff+xml",
    ".xliff": "application/xliff+xml",
    ".tmx": "application/xml",  # TMX has no media type of its own
}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _glossary_field(value: Any) -> Any:
    """`glossary` as sent: an object, an id, or (a form's field) an object's JSON text."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError as err:
            raise ApiError(400, f"'glossary' is not a JSON object ({err.msg})") from None
    if value is not None and not isinstance(value, (dict, str)):
        raise ApiError(400, "'glossary' must be an object of terms or a glossary id")
    return value


def _alternatives(value: Any) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ApiError(400, f"'alternatives' must be a whole number, got {value!r}") from None
    if not 0 <= n <= MAX_ALTERNATIVES:
        raise ApiError(400, f"'alternatives' must be between 0 and {MAX_ALTERNATIVES}")
    return n


def read_upload(
    data: bytes,
    suffix: str,
    filename: str,
    limits: Limits,
    languages: tuple[str, str] = ("auto", ""),
) -> Document:
    """An uploaded file read into its texts within the server's limits (413 naming the one
    it is over, 400 for a file that cannot be read), a CAT file for `languages`."""
    try:
        return read_document(data, suffix, limits.document(), languages, filename)
    except OverLimit as err:
        raise ApiError(413, f"{filename}: {err}", err.limit) from None
    except MtError as err:  # a CAT file's errors name it (and its line) already
        said = str(err)
        raise ApiError(400, said if said.startswith(filename) else f"{filename}: {said}") from None


def add_routes(
    app: FastAPI,
    workers: dict[str, ModelWorker],
    api_keys: list[bytes] | None,
    limits: Limits,
    answer,  # noqa: ANN001 - the app's `answer(request, work)`: cancelled when the client goes
    glossaries: Glossaries | None = None,
) -> None:
    """LibreTranslate's routes on `app`, served by `workers`."""
    libre = _Libre(workers, api_keys, limits, answer, glossaries)
    _add_translate_route(app, libre)
    _add_file_routes(app, libre)
    _add_language_routes(app, libre)


class _Libre:
    """What LibreTranslate's routes share: the workers, which model serves which languages,
    how a request's fields are read, and the files translated for download."""

    def __init__(
        self,
        workers: dict[str, ModelWorker],
        api_keys: list[bytes] | None,
        limits: Limits,
        answer,  # noqa: ANN001
        glossaries: Glossaries | None,
    ) -> None:
        self.workers, self.api_keys, self.limits = workers, api_keys, limits
        self.answer, self.glossaries = answer, glossaries
        self.files: OrderedDict[str, tuple[str, bytes]] = OrderedDict()

    def served(self) -> list[Session]:
        return [w.session for w in self.workers.values() if w.session is not None]

    def sources(self) -> list[str]:
        return sorted({c for s in self.served() for c in served_languages.directions(s)})

    def pick(self, source: str, target: str, text: str) -> tuple[ModelWorker, str]:
        """The model that translates `source` (or, for `auto`, the language identified in
        `text`) into `target`, and that source language."""
        if source == "auto":
            source = served_languages.detect(text, self.sources())[0]["language"]
        for worker in self.workers.values():
            if target in served_languages.directions(worker.loaded()).get(source, []):
                return worker, source
        known = sorted(
            set(self.sources())
            | {
                t
                for s in self.served()
                for ts in served_languages.directions(s).values()
                for t in ts
            }
        )
        raise ApiError(
            400,
            f"no model translates {source!r} into {target!r} (languages served: "
            f"{', '.join(known)}; see /languages)",
        )

    async def read(self, request: Request) -> tuple[dict[str, Any], str]:
        """The fields of the body, and whose request it is (its key, or its address)."""
        raw = await bodies.read_body(request, self.limits.max_body_bytes)
        obj = fields(raw, request.headers.get("content-type", ""))
        key = key_of(request.headers, _str(obj.get("api_key")))
        check_key(self.api_keys, key)
        return obj, client_of(request, key)

    def adapter_of(self, obj: dict[str, Any], request: Request, worker: ModelWorker) -> str | None:
        """The adapter a LibreTranslate request names (an `adapter` field of the body or the
        query: LibreTranslate's own clients send only the fields they know), checked."""
        name = obj.get("adapter", request.query_params.get("adapter"))
        if name is not None and not isinstance(name, str):
            raise ApiError(400, "'adapter' must be the name of one of the model's adapters")
        worker.check_adapter(name or None)
        return name or None

    async def glossary(
        self, obj: dict[str, Any], request: Request, src: str, tgt: str
    ) -> Glossary | None:
        """The glossary a `/translate` request names (mt.serve.glossaries), or None."""
        if self.glossaries is None:
            return None
        owner = owner_of(self.api_keys, key_of(request.headers, _str(obj.get("api_key"))))
        value = _glossary_field(obj.get("glossary"))
        return await asyncio.to_thread(self.glossaries.for_request, value, owner, src, tgt)

    async def translate_html(
        self,
        request: Request,
        texts: list[str],
        worker: ModelWorker,
        adapter: str | None,
        src: str,
        tgt: str,
        flow: str,
    ) -> list[str]:
        """HTML texts, one fragment per line (the HTML path; a line without tags as text)."""
        gathered = Texts()
        parts = [[gathered.fragment(line) for line in x.split("\n")] for x in texts]
        plain = [Item(x, to=tgt, frm=src) for x in gathered.plain]
        frags = [Item(x, to=tgt, frm=src, where=f"q:{i}") for i, x in enumerate(gathered.html, 1)]
        both = asyncio.gather(
            worker.translate(plain, DecodeOptions(), False, True, flow, adapter=adapter),
            worker.translate(
                frags, DecodeOptions(), False, False, flow, html=True, adapter=adapter
            ),
        )
        done_plain, done_html = await self.answer(request, both)
        gathered.fill([t.text for t in done_plain], [t.text for t in done_html])
        return ["\n".join(part() for part in each) for each in parts]


def _languages_of(obj: dict[str, Any]) -> tuple[str, str]:
    source, target = obj.get("source", "auto"), obj.get("target")
    if not isinstance(target, str) or not isinstance(source, str):
        raise ApiError(400, "'source' and 'target' must be language codes, e.g. de and en")
    return source, target


def _texts(obj: dict[str, Any], limits: Limits) -> list[str]:
    """`q`, a string or a list of them, within the limits."""
    q = obj.get("q")
    texts = [q] if isinstance(q, str) else q
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ApiError(400, "'q' must be a string or a list of strings")
    check_count(len(texts), limits)
    for i, text in enumerate(texts):
        check_text(text, f"q[{i}]", limits)
    return texts


def _add_translate_route(app: FastAPI, libre: _Libre) -> None:
    @app.post("/translate")
    async def libre_translate(request: Request) -> dict[str, Any]:
        """LibreTranslate's `/translate`: answers `translatedText` (and `alternatives`,
        `detectedLanguage` when asked for)."""
        obj, flow = await libre.read(request)
        q = obj.get("q")
        source, target = _languages_of(obj)
        fmt = obj.get("format", "text")
        if fmt not in ("text", "html"):
            raise ApiError(400, f"'format' must be text or html, got {fmt!r}")
        n_alt = _alternatives(obj.get("alternatives", 0))
        texts = _texts(obj, libre.limits)
        worker, detected = await asyncio.to_thread(libre.pick, source, target, " ".join(texts))
        adapter = libre.adapter_of(obj, request, worker)
        options = DecodeOptions()
        if n_alt:
            beam = max(worker.loaded(adapter).cfg.decode.beam, n_alt + 1)
            options = DecodeOptions(beam=beam, nbest=n_alt + 1, greedy=False)
        glossary = await libre.glossary(obj, request, detected, target)
        if glossary is not None:
            if fmt == "html":
                raise ApiError(400, "a glossary applies to format text only")
            check_beam(worker.loaded(adapter), options, False)
        alts: list[list[str]] = [[] for _ in texts]
        if fmt == "html":
            outs = await libre.translate_html(
                request, texts, worker, adapter, detected, target, flow
            )
        else:
            # newlines kept: split
            items = [Item(t, to=target, frm=detected, glossary=glossary) for t in texts]
            work = worker.translate(items, options, False, True, flow, adapter=adapter)
            done = await libre.answer(request, work)
            outs = [t.text for t in done]
            alts = [t.texts[1 : n_alt + 1] for t in done]
        out: dict[str, Any] = {"translatedText": outs[0] if isinstance(q, str) else outs}
        if n_alt:
            out["alternatives"] = alts[0] if isinstance(q, str) else alts
        if source == "auto":
            out["detectedLanguage"] = {"language": detected, "confidence": 100.0}
        return out


def _add_file_routes(app: FastAPI, libre: _Libre) -> None:
    files, limits = libre.files, libre.limits

    @app.post("/translate_file")
    async def translate_file(request: Request) -> dict[str, Any]:
        """LibreTranslate's `/translate_file`: a multipart `file` (.txt, .html, .srt, .docx,
        .xlf/.xliff, .tmx) with `source` and `target`; answers `translatedFileUrl`, the file
        kept as it was written but in `target` (a CAT file: its targets filled)."""
        obj, _ = await libre.read(request)
        upload = obj.get("file")
        if not isinstance(upload, tuple):
            raise ApiError(400, "'file' must be an uploaded file (multipart/form-data)")
        filename, data = upload
        suffix = PurePath(filename).suffix.lower()
        if suffix not in SUFFIXES:
            raise ApiError(400, f"cannot translate {suffix or 'this'} files: {', '.join(SUFFIXES)}")
        source, target = _languages_of(obj)
        # Read off the event loop (a .docx is unzipped and parsed), counted before any work;
        # a CAT file first, as it says its own source language.
        if suffix in CAT_SUFFIXES:
            doc = await asyncio.to_thread(
                read_upload, data, suffix, filename, limits, (source, target)
            )
            worker, detected = await asyncio.to_thread(libre.pick, doc.source, target, "")
        else:
            sample = data[:2000].decode("utf-8", "replace") if suffix != ".docx" else ""
            worker, detected = await asyncio.to_thread(libre.pick, source, target, sample or "text")
        adapter = libre.adapter_of(obj, request, worker)
        if suffix not in CAT_SUFFIXES:
            doc = await asyncio.to_thread(read_upload, data, suffix, filename, limits)
        try:
            texts = [Item(x, to=target, frm=detected) for x in doc.plain]
            frags = [Item(x, to=target, frm=detected, where=f"{filename}:{i}")
                     for i, x in enumerate(doc.html, 1)]  # fmt: skip
            units = [Item(x, to=target, frm=detected, where=filename) for x in doc.units]
            work = worker.translate_document(PurePath(filename).name, texts, frags, adapter, units)
            done_texts, done_frags, done_units = await libre.answer(request, work)
            translated = await asyncio.to_thread(
                doc.write,
                [t.text for t in done_texts],
                [t.text for t in done_frags],
                [t.text for t in done_units],
            )
        finally:  # a client gone, a full queue: what the read holds goes now, not at a collection
            doc.close()
        name = f"{secrets.token_urlsafe(12)}{suffix}"
        files[name] = (PurePath(filename).name, translated)
        while len(files) > KEPT_FILES:
            files.popitem(last=False)
        return {"translatedFileUrl": f"{str(request.base_url).rstrip('/')}/download_file/{name}"}

    @app.get("/download_file/{name}")
    async def download_file(name: str) -> Response:
        """A file `/translate_file` translated (the last KEPT_FILES are kept)."""
        if name not in files:
            raise ApiError(404, f"no translated file {name!r} (kept: the last {KEPT_FILES})")
        original, data = files[name]
        suffix = PurePath(original).suffix.lower()
        return Response(
            data,
            media_type=MEDIA[suffix],
            headers={"Content-Disposition": f'attachment; filename="{original}"'},
        )


def _add_language_routes(app: FastAPI, libre: _Libre) -> None:
    limits, api_keys, served, sources = libre.limits, libre.api_keys, libre.served, libre.sources

    @app.get("/languages")
    async def languages_() -> list[dict[str, Any]]:
        """LibreTranslate's `/languages`: each source language and the targets it has."""
        return served_languages.listing(served())

    @app.get("/frontend/settings")
    async def frontend_settings() -> dict[str, Any]:
        """LibreTranslate's `/frontend/settings`: what its web and app clients ask first."""
        listing = served_languages.listing(served())
        first = listing[0] if listing else {"code": "auto", "name": "", "targets": []}
        target = (first.get("targets") or [first["code"]])[0]
        return {
            "charLimit": limits.max_chars,
            "frontendTimeout": 500,
            "apiKeys": api_keys is not None,
            "keyRequired": api_keys is not None,
            "suggestions": False,
            "filesTranslation": True,
            "supportedFilesFormat": list(SUFFIXES),
            "language": {
                "source": {"code": first["code"], "name": first.get("name", first["code"])},
                "target": {"code": target, "name": served_languages.NAMES.get(target, target)},
            },
        }

    @app.post("/detect")
    async def detect(request: Request) -> list[dict[str, Any]]:
        """LibreTranslate's `/detect`: field `q`; the languages served, most likely first,
        with a confidence in percent."""
        obj, _ = await libre.read(request)
        q = obj.get("q")
        if not isinstance(q, str) or not q.strip():
            raise ApiError(400, "'q' must be a non-empty string")
        check_text(q, "q", limits)
        return await asyncio.to_thread(served_languages.detect, q, sources())

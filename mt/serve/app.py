"""The HTTP routes: read and check a request, hand its work to a model's worker, answer.

No route runs the model: translation, scoring and attention are awaited from the model's worker
thread (mt.serve.worker). Everything a client can get wrong is an ApiError, answered as
`{"error": "one line", "limit": NAME}` with its status (4xx, 503 when the queue is full).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from mt.errors import MtError
from mt.serve import bodies, libre
from mt.serve.config import ServeConfig
from mt.serve.glossaries import Glossaries, check_beam, direction, owner_of
from mt.serve.limits import ApiError
from mt.serve.prometheus import Metrics
from mt.serve.security import check_key, client_of, key_of
from mt.serve.worker import ModelWorker
from mt.translation.requests import translation_record
from mt.translation.session import Session
from mt.views.score import TargetTooLong

# The page may load what this server serves and nothing else.
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
STATIC = {  # file -> (package, content type)
    "page.js": ("mt.serve.static", "text/javascript"),
    "page.css": ("mt.serve.static", "text/css"),
    "viewer.js": ("mt.viewer", "text/javascript"),
    "viewer.css": ("mt.viewer", "text/css"),
}


def _static(name: str) -> bytes:
    package, _ = STATIC[name]
    return resources.files(package).joinpath(name).read_bytes()


def create_app(config: ServeConfig) -> FastAPI:
    """The ASGI app; its workers load their models in the background once it starts."""
    config.limits.check()
    served = Served(config)
    app = FastAPI(
        title="mt",
        summary="Translate with a trained mt model.",
        version="1",
        lifespan=served.lifespan,
    )
    # Called on SIGTERM (see mt.serve.run): queued requests stop waiting for company.
    app.state.hurry = lambda: [w.hurry() for w in served.workers.values()]
    app.add_middleware(_Measure, metrics=served.metrics)
    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=config.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "X-API-Key", "Content-Type"],
        )

    @app.exception_handler(ApiError)
    async def api_error(_: Request, err: ApiError) -> JSONResponse:
        headers = {"Retry-After": "1"} if err.status == 503 else None
        return JSONResponse(err.body(), status_code=err.status, headers=headers)

    _add_decoding_routes(app, served)
    _add_status_routes(app, served)
    _add_glossary_routes(app, served)
    libre.add_routes(
        app, served.workers, config.api_keys, config.limits, served.answer, served.glossaries
    )
    _add_page_routes(app)
    return app


class Served:
    """What the routes share: the models' workers (the first is the default), the metrics, the
    glossaries, and the steps every route takes (its key checked, its model found, its body
    read, its work awaited unless the client leaves)."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.limits = config.limits
        self.metrics = Metrics()
        self.workers = {name: ModelWorker(name, config, self.metrics) for name in config.models}
        self.glossaries = Glossaries(config.limits, config.own_glossary)
        self.default = next(iter(self.workers))

    @contextlib.asynccontextmanager
    async def lifespan(self, _: FastAPI):
        for worker in self.workers.values():
            worker.start()
        yield
        # In-flight requests have been answered by now (uvicorn waits for them); the workers
        # answer anything still queued before they end.
        await asyncio.gather(*(asyncio.to_thread(w.stop) for w in self.workers.values()))

    def key(self, request: Request) -> str | None:
        """The request's API key, checked (401 without a good one on a server with keys)."""
        key = key_of(request.headers)
        check_key(self.config.api_keys, key)
        return key

    def owner(self, key: str | None) -> bytes | None:
        """Whose glossaries a request with `key` sees (mt.serve.glossaries.owner_of)."""
        return owner_of(self.config.api_keys, key)

    def worker_for(self, name: str | None) -> ModelWorker:
        if name is None:
            return self.workers[self.default]
        if name not in self.workers:
            raise ApiError(404, f"unknown model {name!r} (served: {', '.join(self.workers)})")
        return self.workers[name]

    async def read_json(self, request: Request) -> Any:
        return bodies.parse_json(await bodies.read_body(request, self.limits.max_body_bytes))

    async def answer(self, request: Request, work) -> Any:  # noqa: ANN001
        """The result of awaiting `work`, unless the client leaves first: then the work is
        cancelled (the worker drops it if it has not started) and nothing is answered."""
        task = asyncio.ensure_future(work)
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            done, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if task not in done:
            task.cancel()
            raise ApiError(499, "the client closed the connection")
        return task.result()


def _add_decoding_routes(app: FastAPI, served: Served) -> None:
    """/v1/translate, /v1/score and /v1/attention: work each model's worker does."""

    @app.post("/v1/translate", openapi_extra=bodies.body_doc(bodies.TRANSLATE_SCHEMA))
    async def translate(request: Request) -> dict[str, Any]:
        """Translate items (as `mt translate --input-format jsonl` reads them); each answer
        has the fields of `--output-format jsonl`, in input order."""
        key = served.key(request)
        body = bodies.parse_translate(await served.read_json(request), served.limits)
        worker = served.worker_for(body.model)
        worker.check_adapter(body.adapter)
        worker.check_options(body.options, body.adapter)
        session = worker.loaded(body.adapter)
        src, tgt = direction(session, body.frm, body.to)
        # off the loop: stemming a glossary of thousands of entries takes a while
        glossary = await asyncio.to_thread(
            served.glossaries.for_request, body.glossary, served.owner(key), src, tgt
        )
        requests = body.requests
        if glossary is not None:
            check_beam(session, body.options, body.alignment)
            requests = [dataclasses.replace(r, glossary=glossary) for r in requests]
        flow = client_of(request, key)
        work = worker.translate(
            requests, body.options, body.alignment, body.split, flow, adapter=body.adapter
        )
        done = await served.answer(request, work)
        return {"items": [translation_record(t, body.alignment) for t in done]}

    @app.post("/v1/score", openapi_extra=bodies.body_doc(bodies.SCORE_SCHEMA))
    async def score(request: Request) -> dict[str, Any]:
        """Score given translations (forced decoding), as `mt score --json`."""
        key = served.key(request)
        body = bodies.parse_score(await served.read_json(request), served.limits)
        worker = served.worker_for(body.model)
        worker.check_adapter(body.adapter)

        def run(session: Session) -> list[dict[str, Any]]:
            try:
                scores = session.scorer(to=body.to).score_lines(body.src, body.tgt)
            except TargetTooLong as err:
                raise ApiError(422, f"items[{err.index}].tgt: {err}") from None
            except MtError as err:
                raise ApiError(422, str(err)) from None
            return [
                {"score": s.score, "logprob": s.logprob, "tokens": s.tokens,
                 "token_logprobs": s.token_logprobs}
                for s in scores
            ]  # fmt: skip

        work = worker.run(run, client_of(request, key), body.adapter)
        return {"items": await served.answer(request, work)}

    @app.post("/v1/attention", openapi_extra=bodies.body_doc(bodies.ATTENTION_SCHEMA))
    async def attention(request: Request) -> dict[str, Any]:
        """The translation of `src` and every attention weight behind it: the data
        `MtViewer.render` draws (format documented in mt/viewer/viewer.js)."""
        from mt.views.attention import attention_json

        key = served.key(request)
        body = bodies.parse_attention(await served.read_json(request), served.limits)
        worker = served.worker_for(body.model)
        worker.check_adapter(body.adapter)
        worker.check_options(body.options, body.adapter)

        def run(session: Session) -> dict[str, Any]:
            try:
                return attention_json(session.attention(body.src, body.options, body.to))
            except MtError as err:
                raise ApiError(422, str(err)) from None

        work = worker.run(run, client_of(request, key), body.adapter)
        return await served.answer(request, work)


def _add_status_routes(app: FastAPI, served: Served) -> None:
    """/v1/models, /health and /metrics: what is served and how it goes."""

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        """Every model served: name, languages, size, settings, adapters (loading ones say
        so)."""
        served.key(request)
        out = []
        for name, worker in served.workers.items():
            entry: dict[str, Any] = {"name": name, "default": name == served.default}
            if worker.session is not None:
                entry.update(status="ready", **worker.session.describe())
            else:
                entry.update(status="failed" if worker.error else "loading")
            entry["adapters"] = [
                {"name": n, "checkpoint": str(p), **_adapter_entry(worker.views.get(n))}
                for n, p in worker.adapter_paths.items()
            ]
            out.append(entry)
        return {"models": out}

    @app.get("/health")
    async def health() -> JSONResponse:
        """200 `ready` once every model is loaded; 503 `loading` (or `failed`) before."""
        if any(w.error for w in served.workers.values()):
            return JSONResponse({"status": "failed"}, status_code=503)
        ready = all(w.ready for w in served.workers.values())
        return JSONResponse(
            {"status": "ready" if ready else "loading"}, status_code=200 if ready else 503
        )

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prometheus(request: Request) -> PlainTextResponse:
        """Requests, errors, latency, batch sizes and queue depth (Prometheus text format)."""
        served.key(request)
        return PlainTextResponse(
            served.metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )


def _add_glossary_routes(app: FastAPI, served: Served) -> None:
    """/v1/glossaries: glossaries uploaded once and named by id in later requests."""
    glossaries = served.glossaries

    @app.post("/v1/glossaries", status_code=201)
    async def upload_glossary(request: Request) -> dict[str, Any]:
        """Keep a glossary (`entries` as an object of terms, or a file's `content` in
        `format` tsv, csv, tbx or tmx; `name`, `from`, `to`) for later requests to name by
        the `id` answered: the key's own."""
        key = served.key(request)
        obj = await served.read_json(request)
        stored = await asyncio.to_thread(glossaries.upload, obj, served.owner(key))
        return stored.info()

    @app.get("/v1/glossaries")
    async def list_glossaries(request: Request) -> dict[str, Any]:
        """The glossaries this key uploaded."""
        return {"glossaries": glossaries.listed(served.owner(served.key(request)))}

    @app.get("/v1/glossaries/{gid}")
    async def get_glossary(gid: str, request: Request) -> dict[str, Any]:
        stored = glossaries.get(gid, served.owner(served.key(request)))
        return {**stored.info(), "terms": {e.src: e.tgt for e in stored.entries}}

    @app.delete("/v1/glossaries/{gid}")
    async def delete_glossary(gid: str, request: Request) -> dict[str, Any]:
        glossaries.delete(gid, served.owner(served.key(request)))
        return {"deleted": gid}


def _add_page_routes(app: FastAPI) -> None:
    """The page at / and its static files."""

    @app.get("/", include_in_schema=False)
    async def index() -> Response:
        return Response(
            resources.files("mt.serve.static").joinpath("index.html").read_bytes(),
            media_type="text/html; charset=utf-8",
            headers={"Content-Security-Policy": PAGE_CSP},
        )

    @app.get("/static/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        if name not in STATIC:  # a fixed list: no request names a path
            raise ApiError(404, f"no static file {name!r}")
        return Response(_static(name), media_type=STATIC[name][1] + "; charset=utf-8")


def _adapter_entry(session: Session | None) -> dict[str, Any]:
    """What /v1/models says of a loaded adapter: its shape and decode settings."""
    if session is None or session.adapter is None:
        return {}
    return {**session.adapter.spec.to_dict(), "decode": dataclasses.asdict(session.cfg.decode)}


async def _disconnected(request: Request) -> None:
    """Returns when the client disconnects (the body has been read; the next ASGI message
    is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class _Measure:
    """ASGI middleware: each HTTP request's route, status and latency into the metrics."""

    def __init__(self, app, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500

        async def send_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", "other")
            self.metrics.request(path, status, time.perf_counter() - start)

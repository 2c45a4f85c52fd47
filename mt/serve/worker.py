"""One worker thread per model: it owns the model, pools the sentences of concurrent requests
for a few milliseconds, and translates each pool as `mt translate` translates a buffer.

The event loop never runs the model. A request hands its sentences to the worker (`translate`)
and awaits a future; the worker wakes, waits until the oldest pending request is
`batch_window_ms` old (so requests arriving together share a pass), takes everything pending,
groups it by adapter and decoding options (different adapters or options cannot share a
search: a batch never mixes adapters), and gives each group to one `Translator.translate`
call, which sorts the sentences by length into token batches as the CLI does. Each answer
goes back to its own request's future.

Adapters (`mt serve --adapter NAME=PATH`, mt.adapt) are held on the one base in memory, each a
session over the base's weights with its own small tensors (`Session.with_adapter`); a request
names one (`adapter`) or decodes with the base.

Requests wait in a fair queue (mt.serve.jobs): clients in turn, and a document's texts in
slices after them, each slice sized to cost about what the recent interactive passes cost
(mt.serve.pacing, which also times the pooling). So a request that arrives while a document is
translated waits one slice at most.

A request whose client has gone is marked cancelled and dropped before its turn; `stop` lets
the worker finish what is queued, so a server told to stop still answers what it accepted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from mt.errors import MtError
from mt.serve.config import ServeConfig
from mt.serve.jobs import FairQueue, Job, Slice
from mt.serve.limits import ApiError
from mt.serve.pacing import Pace
from mt.serve.prometheus import Metrics
from mt.serve.translators import Translators
from mt.translation.requests import Plan, Request, Translation
from mt.translation.session import DecodeOptions, Session

ROUND_SENTENCES = 512  # at most this many sentences per pass: later requests wait less


def option_name(key: str) -> str:
    """`decode.beam` -> `options.beam`: how the API names a decoding setting in errors (the
    target language is a field of the body or the item: 'to')."""
    if key == "data.to":
        return "'to'"
    return "options." + key.split(".")[-1]


class ModelWorker:
    """The thread that loads one model (or ensemble) and runs every piece of work on it."""

    def __init__(self, name: str, config: ServeConfig, metrics: Metrics) -> None:
        self.name = name
        self.config = config  # the device, dtype, limits and plan every request of it meets
        self.adapter_paths = dict(config.adapters.get(name, {}))  # name -> adapter file
        self.views: dict[str, Session] = {}  # name -> the session with that adapter
        self.paths = list(config.models[name])
        self.limits = config.limits
        self.metrics = metrics
        metrics.queue(name, 0)  # each model's queue gauge from the start: 0, not absent
        self.session: Session | None = None
        self.error: str | None = None  # why loading failed
        self._queue = FairQueue()
        self._cond = threading.Condition()
        self._stopping = False
        self._hurry = False  # shutting down: no more pooling (see hurry)
        self._pace = Pace()  # the pooling waits and the document slices' sizes
        self._documents = itertools.count(1)
        self._translators = Translators()  # kept: building one can cost a model copy
        self._thread = threading.Thread(target=self._run, name=f"mt-worker-{name}", daemon=True)

    # -- the event loop's side ----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def ready(self) -> bool:
        return self.session is not None

    def check_adapter(self, adapter: str | None) -> None:
        """An adapter name this model serves (or None, the base); else a 400."""
        if adapter is not None and adapter not in self.adapter_paths:
            served = ", ".join(self.adapter_paths) or "none"
            raise ApiError(
                400, f"unknown adapter {adapter!r} of model {self.name!r} (its adapters: {served})"
            )

    def loaded(self, adapter: str | None = None) -> Session:
        """The session (with `adapter`, that adapter's), or a 503 while the model is still
        loading."""
        if self.session is None:
            if self.error is not None:
                raise ApiError(503, f"model {self.name!r} failed to load: {self.error}")
            raise ApiError(503, f"model {self.name!r} is still loading", "loading")
        self.check_adapter(adapter)
        return self.session if adapter is None else self.views[adapter]

    def check_options(self, options: DecodeOptions, adapter: str | None = None) -> None:
        """The option set against the checkpoint's (or the adapter's) decode rules (no model
        work: on the loop)."""
        try:
            self.loaded(adapter).decode_config(options)
        except MtError as err:
            raise ApiError(422, str(err)) from None

    def submit(self, job: Job) -> None:
        """Queue an interactive job, or refuse it with 503 when the queue is full. Documents
        waiting do not count here: they never make a person's request wait or be refused."""
        self.loaded()
        with self._cond:
            if self._stopping:
                raise ApiError(503, "the server is shutting down", "shutting_down")
            if self._queue.interactive + job.size() > self.limits.max_queue:
                raise ApiError(
                    503,
                    f"{self._queue.interactive} sentences are queued for model {self.name!r}; "
                    f"the limit is {self.limits.max_queue}: try again shortly",
                    "max_queue",
                )
            self._queue.push(job.flow, job)
            self.metrics.queue(self.name, self._queue.items)
            self._cond.notify()

    def submit_document(self, jobs: list[Job], name: str) -> None:
        """Queue a document's bulk jobs together, or refuse them with 503 when their texts
        and everything waiting are over max_queue."""
        self.loaded()
        n = sum(job.left() for job in jobs)
        with self._cond:
            if self._stopping:
                raise ApiError(503, "the server is shutting down", "shutting_down")
            if self._queue.items + n > self.limits.max_queue:
                raise ApiError(
                    503,
                    f"{self._queue.items} sentences are queued for model {self.name!r}; with "
                    f"this document's {n} the limit of {self.limits.max_queue} is passed: try "
                    "again shortly",
                    "max_queue",
                )
            for job in jobs:
                self._queue.push_bulk(job.flow, job)
            self.metrics.document(self.name, jobs[0].flow, name, n)
            self.metrics.queue(self.name, self._queue.items)
            self._cond.notify()

    async def translate(
        self,
        requests: list[Request],
        options: DecodeOptions,
        alignment: bool,
        split: bool = False,
        flow: str = "",
        html: bool = False,
        adapter: str | None = None,
    ) -> list[Translation]:
        """`requests` translated (`split`: sentence by sentence; `html`: as HTML fragments),
        queued in `flow` (the client's)."""
        if not requests:
            return []
        loop = asyncio.get_running_loop()
        job = Job(loop.create_future(), loop, requests, options, alignment, split, html, flow)
        job.adapter = adapter
        return await self._wait(job)

    async def run(
        self, call: Callable[[Session], Any], flow: str = "", adapter: str | None = None
    ) -> Any:
        """`call(session)` in the worker's thread, in turn with the translations; `adapter`:
        the session is that adapter's."""
        loop = asyncio.get_running_loop()
        job = Job(loop.create_future(), loop, flow=flow, call=call, adapter=adapter)
        return await self._wait(job)

    async def translate_document(
        self,
        name: str,
        texts: list[Request],
        fragments: list[Request],
        adapter: str | None = None,
        units: list[Request] | None = None,
    ) -> tuple[list[Translation], list[Translation], list[Translation]]:
        """A document's texts (sentence by sentence), HTML fragments and units (a CAT file's
        segments, whole) translated a slice at a time, between other requests (see
        mt.serve.jobs); `name` is what /metrics calls it; `adapter`: the model's adapter they
        are translated with."""
        loop = asyncio.get_running_loop()
        flow = f"document-{next(self._documents)}"
        kinds = (("text", texts), ("html", fragments), ("units", units or []))
        jobs = {
            kind: Job(loop.create_future(), loop, reqs, DecodeOptions(), False,
                      split=kind == "text", html=kind == "html", flow=flow, bulk=True,
                      adapter=adapter)
            for kind, reqs in kinds if reqs
        }  # fmt: skip
        if not jobs:
            return [], [], []
        self.submit_document(list(jobs.values()), name)
        try:
            await asyncio.gather(*(job.future for job in jobs.values()))
        except BaseException:  # the client went away, or one part failed: the rest is dropped
            for job in jobs.values():
                job.cancelled = True
            raise
        finally:
            self.metrics.document_end(self.name, flow)
        done = {kind: job.future.result() for kind, job in jobs.items()}
        return done.get("text", []), done.get("html", []), done.get("units", [])

    async def _wait(self, job: Job) -> Any:
        self.submit(job)
        try:
            return await job.future
        except asyncio.CancelledError:  # the client went away: its sentences cost nothing more
            job.cancelled = True
            raise

    def hurry(self) -> None:
        """The server is shutting down: no client will come back, so what is queued goes at
        once instead of waiting out the pooling window (it is still answered)."""
        with self._cond:
            self._hurry = True
            self._cond.notify()

    def stop(self, timeout: float = 60.0) -> None:
        """Answer everything queued, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # -- the worker thread --------------------------------------------------------------------

    def _run(self) -> None:
        try:
            session = Session(self.paths, self.config.device, option_name, self.config.dtype)
            self.views = {n: session.with_adapter(p) for n, p in self.adapter_paths.items()}
            self.session = session  # ready: the adapters are loaded too
        except Exception as err:  # noqa: BLE001 - reported by /health and every request
            self.error = str(err).splitlines()[0] if str(err) else type(err).__name__
            return
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                jobs = []
                if self._queue.interactive:
                    self._pool()
                    jobs = self._queue.take(ROUND_SENTENCES)
                    self.metrics.queue(self.name, self._queue.items)
            if jobs:
                start = time.monotonic()
                self._work(jobs)
                self._pace.interactive(start, time.monotonic())
            with self._cond:
                piece, dropped = self._queue.take_slice(self._pace.fits)
                self.metrics.queue(self.name, self._queue.items)
            if dropped:
                self.metrics.drop(dropped)
            if piece is not None:
                self._slice(piece)
            with self._cond:
                expect = self._queue.interactive + sum(job.size() for job in jobs)
                self._pace.round_ended(expect, time.monotonic())

    def _pool(self) -> None:
        """Wait (holding the condition) for more requests as long as the pace says a pass
        should (mt.serve.pacing); not once the server is stopping or in a hurry."""
        window = self.limits.batch_window_ms / 1000
        while not (self._stopping or self._hurry):
            left = self._pace.pooling(self._queue, time.monotonic(), window)
            if left <= 0:
                return
            self._cond.wait(left)

    def _slice(self, piece: Slice) -> None:
        """Translate a slice of a document, then let the pace size the next one by what this
        one cost."""
        if piece.job.dead:
            self.metrics.drop(piece.end - piece.start)
            return
        target = self._pace.slice_target(time.monotonic())
        start = time.monotonic()
        self._translate([(piece.job, piece.requests)])
        chars = sum(len(r.src) for r in piece.requests)
        self._pace.sliced(chars, time.monotonic() - start, target)

    def _work(self, jobs: list[Job]) -> None:
        groups: dict[tuple, list[Job]] = {}
        for job in jobs:
            if job.call is not None:
                self._call(job)
            else:
                groups.setdefault(job.key, []).append(job)
        for group in groups.values():
            # Checked just before the model runs: a client may leave while other groups run.
            live = [job for job in group if not self._dropped(job)]
            if live:
                self._translate([(job, job.requests) for job in live])

    def _dropped(self, job: Job) -> bool:
        if job.cancelled:
            self.metrics.drop(len(job.requests))
        return job.cancelled

    def _call(self, job: Job) -> None:
        if self._dropped(job):
            return
        try:
            job.answer(job.call(self.loaded(job.adapter)))
        except Exception as err:  # noqa: BLE001 - goes back to the request that caused it
            job.answer(error=err)

    def _translate(self, group: list[tuple[Job, list[Request]]]) -> None:
        """One translator call for the group's requests (a job's, or a slice of a bulk
        job's), each with the plan its job asks for: a splitting job's says so, and the
        translator's split stage (mt.translation.sentences) cuts them into sentences and joins them
        back, so their sentences share batches with everything else. The group shares its
        adapter and options."""
        first = group[0][0]
        session = self.loaded(first.adapter)
        # capitals, numbers, glossary, protection, flags: the server's plan (mt serve's flags);
        # sentences in the model's source language, unless a request names its own (`frm`).
        plan, source = self.config.plan, session.source_language()
        plans = {
            "whole": Plan.of(dataclasses.replace(plan, split_sentences=False), source),
            "split": Plan.of(dataclasses.replace(plan, split_sentences=True), source),
            "html": Plan(html=True),
        }
        requests = [
            dataclasses.replace(r, plan=plans["html" if job.html else "split" if job.split
                                              else "whole"])
            for job, reqs in group
            for r in reqs
        ]  # fmt: skip
        try:
            translator = self._translators.get(
                session, first.options, first.alignment, first.adapter
            )
            translations = translator.translate(requests)
        except MtError as err:
            if len(group) > 1:  # one request's bad input must not fail the others
                for entry in group:
                    self._translate([entry])
                return
            first.answer(error=ApiError(422, str(err)))
            return
        except Exception as err:  # noqa: BLE001
            for job, _ in group:
                job.answer(error=err)
            return
        self.metrics.batch(sum(t.sentences for t in translations))
        start = 0
        for job, reqs in group:
            done = translations[start : start + len(reqs)]
            start += len(reqs)
            self.metrics.doubts([t.flags for t in done])
            if not job.bulk:
                job.answer(done)
                continue
            job.done += done
            # counted before the answer, so a client that sees the document done sees it here
            self.metrics.document_done(self.name, job.flow, len(done))
            if len(job.done) == len(job.requests):
                job.answer(job.done)

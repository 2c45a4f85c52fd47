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

A request whose client has gone is marked cancelled and dropped before its turn; `stop` lets
the worker finish what is queued, so a server told to stop still answers what it accepted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mt.decode.requests import Plan, Request, Translation
from mt.decode.session import DecodeOptions, Session
from mt.decode.translator import Translator
from mt.errors import MtError
from mt.serve.limits import ApiError, Limits
from mt.serve.metrics import Metrics

ROUND_SENTENCES = 512  # at most this many sentences per pass: later requests wait less
CACHED_TRANSLATORS = 16
POOL_STRETCH = 50  # see ModelWorker._pool
GAP = 20


def option_name(key: str) -> str:
    """`decode.beam` -> `options.beam`: how the API names a decoding setting in errors (the
    target language is a field of the body or the item: 'to')."""
    if key == "data.to":
        return "'to'"
    return "options." + key.split(".")[-1]


@dataclass
class Job:
    """One request's work: sentences to translate with one option set, or a call on the
    session (score, attention) that runs in the worker's thread."""

    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    requests: list[Request] = field(default_factory=list)
    options: DecodeOptions | None = None
    alignment: bool = False
    split: bool = False  # each item sentence by sentence (the translator's split stage)
    call: Callable[[Session], Any] | None = None
    adapter: str | None = None  # the model's adapter it decodes with; None: the base
    arrived: float = field(default_factory=time.monotonic)
    cancelled: bool = False

    @property
    def key(self) -> tuple:
        return (self.adapter, dataclasses.astuple(self.options or DecodeOptions()), self.alignment)

    def size(self) -> int:
        return max(1, len(self.requests))

    def answer(self, value: Any = None, error: BaseException | None = None) -> None:
        def settle() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(value)

        try:
            self.loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the loop has closed: nobody is waiting any more
            pass


class ModelWorker:
    """The thread that loads one model (or ensemble) and runs every piece of work on it."""

    def __init__(
        self,
        name: str,
        paths: Sequence[Path],
        device: str,
        limits: Limits,
        metrics: Metrics,
        dtype: str | None = None,
        keep_numbers: bool = True,
        glossary_hard: bool = False,
        adapters: Mapping[str, Path] | None = None,
    ) -> None:
        self.name = name
        self.adapter_paths = dict(adapters or {})  # name -> adapter file
        self.views: dict[str, Session] = {}  # name -> the session with that adapter
        self.keep_numbers = keep_numbers  # the number guard (mt.decode.numbers)
        self.glossary_hard = glossary_hard  # a request's glossary constrained at once
        self.paths = list(paths)
        self.device = device
        self.dtype = dtype
        self.limits = limits
        self.metrics = metrics
        self.session: Session | None = None
        self.error: str | None = None  # why loading failed
        self._pending: deque[Job] = deque()
        self._queued = 0  # sentences in _pending
        self._cond = threading.Condition()
        self._stopping = False
        self._hurry = False  # shutting down: no more pooling (see hurry)
        self._expect = 1  # sentences the next pass may wait for (see _pool)
        self._pass_end = 0.0
        self._translators: OrderedDict[tuple, Translator] = OrderedDict()
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
        """Queue a job, or refuse it with 503 when the queue is full."""
        self.loaded()
        with self._cond:
            if self._stopping:
                raise ApiError(503, "the server is shutting down", "shutting_down")
            if self._queued + job.size() > self.limits.max_queue:
                raise ApiError(
                    503,
                    f"{self._queued} sentences are queued for model {self.name!r}; the limit "
                    f"is {self.limits.max_queue}: try again shortly",
                    "max_queue",
                )
            self._pending.append(job)
            self._queued += job.size()
            self.metrics.queue(self.name, self._queued)
            self._cond.notify()

    async def translate(
        self,
        requests: list[Request],
        options: DecodeOptions,
        alignment: bool,
        split: bool = False,
        adapter: str | None = None,
    ) -> list[Translation]:
        loop = asyncio.get_running_loop()
        job = Job(loop.create_future(), loop, requests, options, alignment, split, adapter=adapter)
        return await self._wait(job)

    async def run(self, call: Callable[[Session], Any], adapter: str | None = None) -> Any:
        """`call(session)` in the worker's thread, in turn with the translations; `adapter`:
        the session is that adapter's."""
        loop = asyncio.get_running_loop()
        return await self._wait(Job(loop.create_future(), loop, call=call, adapter=adapter))

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
            session = Session(self.paths, self.device, option_name, self.dtype)
            self.views = {n: session.with_adapter(p) for n, p in self.adapter_paths.items()}
            self.session = session  # ready: the adapters are loaded too
        except Exception as err:  # noqa: BLE001 - reported by /health and every request
            self.error = str(err).splitlines()[0] if str(err) else type(err).__name__
            return
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if not self._pending:
                    return
                self._pool()
            jobs = self._take()
            self._work(jobs)
            with self._cond:
                self._expect = self._queued + sum(job.size() for job in jobs)
                self._pass_end = time.monotonic()

    def _pool(self) -> None:
        """Wait (holding the condition) until the oldest pending request is a window old.

        Under steady load, wait on for the clients the last pass answered: they come back
        one by one within a round trip, and a pass that left without them would split the
        clients into two cohorts that alternate for good, each pass half as big (and the
        throughput with it). So while fewer sentences are pending than the last pass took
        plus those that queued during it, keep pooling as long as requests keep arriving
        (one within GAP windows), up to POOL_STRETCH windows after the pass ended.
        """
        window = self.limits.batch_window_ms / 1000
        oldest = self._pending[0].arrived
        while not (self._stopping or self._hurry):
            now = time.monotonic()
            if self._queued >= self._expect:
                if self._queued > 1 or now >= oldest + window:
                    return
                left = oldest + window - now
            else:
                recent = max(self._pending[-1].arrived, self._pass_end)
                until = min(recent + GAP * window, self._pass_end + POOL_STRETCH * window)
                left = max(until, oldest + window) - now
                if left <= 0:
                    return
            self._cond.wait(left)

    def _take(self) -> list[Job]:
        with self._cond:
            jobs, n = [], 0
            while self._pending and (not jobs or n + self._pending[0].size() <= ROUND_SENTENCES):
                job = self._pending.popleft()
                n += job.size()
                jobs.append(job)
            self._queued -= n
            self.metrics.queue(self.name, self._queued)
        return jobs

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
                self._translate(live)

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

    def _translate(self, group: list[Job]) -> None:
        """One translator call for the group's requests, a splitting job's with a plan that
        says so: the translator's split stage (mt.decode.sentences) cuts them into sentences
        and joins them back, so their sentences share batches with everything else."""
        first = group[0]  # the group shares its adapter and options
        session = self.loaded(first.adapter)
        # capitals, numbers, glossary, protection, flags
        whole = Plan(keep_numbers=self.keep_numbers, glossary_hard=self.glossary_hard)
        # Sentences in the model's source language, unless a request names its own (`frm`).
        split = dataclasses.replace(whole, split=session.source_language())
        requests = [
            dataclasses.replace(r, plan=split if job.split else whole)
            for job in group
            for r in job.requests
        ]
        try:
            translator = self._translator(first.options, first.alignment, first.adapter)
            translations = translator.translate(requests)
        except MtError as err:
            if len(group) > 1:  # one request's bad input must not fail the others
                for job in group:
                    self._translate([job])
                return
            first.answer(error=ApiError(422, str(err)))
            return
        except Exception as err:  # noqa: BLE001
            for job in group:
                job.answer(error=err)
            return
        self.metrics.batch(sum(t.sentences for t in translations))
        start = 0
        for job in group:
            done = translations[start : start + len(job.requests)]
            start += len(job.requests)
            self.metrics.doubts([t.flags for t in done])
            job.answer(done)

    def _translator(
        self, options: DecodeOptions | None, alignment: bool, adapter: str | None = None
    ) -> Translator:
        """A Translator per adapter and option set, kept: building one can cost a model copy
        (int8). Sampling gets a fresh one each time, so its seed means the same on every
        request."""
        session = self.loaded(adapter)
        if options is not None and options.sample:
            return session.translator(options, alignment, with_scores=True)
        key = (adapter, dataclasses.astuple(options or DecodeOptions()), alignment)
        if key in self._translators:
            self._translators.move_to_end(key)
            return self._translators[key]
        translator = session.translator(options, alignment, with_scores=True)
        self._translators[key] = translator
        if len(self._translators) > CACHED_TRANSLATORS:
            self._translators.popitem(last=False)
        return translator

"""A model worker's jobs and its queue: fair between clients, no document ahead of a person.

Two kinds of work wait here. An interactive job (a request of /v1/translate, /translate,
/v1/score, /v1/attention) waits in its client's flow (the client's API key or address), and a
pass takes the flows in turn, one job each per round, until it is full: a client that sends
fifty requests at once shares every pass with one that sends one. A document's texts wait as
bulk jobs in a flow of the document's own, and a pass takes one slice of one document
(documents in turn) after its interactive jobs, as long as the worker says (mt.serve.pacing
sizes slices to cost about what an interactive pass costs). So a request that arrives while a
document is translated waits for one slice at most, however large the document.

The queue is not thread-safe by itself: the worker calls it holding its condition.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mt.translation.requests import Request, Translation
from mt.translation.session import DecodeOptions, Session


@dataclass
class Job:
    """One request's work: sentences to translate with one option set, or a call on the
    session (score, attention) that runs in the worker's thread. A bulk job (a document's
    texts) is translated a slice at a time; `done` gathers its translations."""

    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    requests: list[Request] = field(default_factory=list)
    options: DecodeOptions | None = None
    alignment: bool = False
    split: bool = False  # each item sentence by sentence (the translator's split stage)
    html: bool = False  # each item an HTML fragment (the translator's HTML stage)
    flow: str = ""  # whose it is: a client, or a document (a bulk job)
    bulk: bool = False  # a document's texts, translated a slice at a time
    call: Callable[[Session], Any] | None = None
    adapter: str | None = None  # the model's adapter it decodes with; None: the base
    arrived: float = field(default_factory=time.monotonic)
    cancelled: bool = False  # the client went away
    failed: bool = False  # answered with an error: nothing more to do
    taken: int = 0  # a bulk job's items already given to a pass
    done: list[Translation] = field(default_factory=list)  # a bulk job's translations so far

    @property
    def key(self) -> tuple:
        return (self.adapter, dataclasses.astuple(self.options or DecodeOptions()), self.alignment)

    def size(self) -> int:
        return max(1, len(self.requests))

    def left(self) -> int:
        """A bulk job's items not yet given to a pass."""
        return len(self.requests) - self.taken

    @property
    def dead(self) -> bool:
        return self.cancelled or self.failed

    def answer(self, value: Any = None, error: BaseException | None = None) -> None:
        if error is not None:
            self.failed = True

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


@dataclass
class Slice:
    """Items `start:end` of a bulk job: what one pass translates of a document."""

    job: Job
    start: int
    end: int

    @property
    def requests(self) -> list[Request]:
        return self.job.requests[self.start : self.end]


class FairQueue:
    """Interactive jobs by client flow, bulk jobs by document flow."""

    def __init__(self) -> None:
        self._interactive: OrderedDict[str, deque[Job]] = OrderedDict()
        self._bulk: OrderedDict[str, deque[Job]] = OrderedDict()
        self.interactive = 0  # items of the interactive jobs waiting
        self.bulk = 0  # items of the bulk jobs not yet given to a pass

    def __bool__(self) -> bool:
        return bool(self._interactive or self._bulk)

    @property
    def items(self) -> int:
        return self.interactive + self.bulk

    def push(self, flow: str, job: Job) -> None:
        self._interactive.setdefault(flow, deque()).append(job)
        self.interactive += job.size()

    def push_bulk(self, flow: str, job: Job) -> None:
        self._bulk.setdefault(flow, deque()).append(job)
        self.bulk += job.left()

    def arrivals(self) -> tuple[float, float] | None:
        """When the oldest and the newest interactive job waiting arrived (None: none)."""
        times = [job.arrived for jobs in self._interactive.values() for job in jobs]
        return (min(times), max(times)) if times else None

    def take(self, most: int) -> list[Job]:
        """Interactive jobs, one per flow per round, until `most` items (at least one job)."""
        out: list[Job] = []
        n = 0
        while self._interactive:
            flow, jobs = next(iter(self._interactive.items()))
            size = jobs[0].size()
            if out and n + size > most:
                break
            out.append(jobs.popleft())
            n += size
            if jobs:
                self._interactive.move_to_end(flow)  # the next round starts with the others
            else:
                del self._interactive[flow]
        self.interactive -= n
        return out

    def take_slice(self, fits: Callable[[Job], int]) -> tuple[Slice | None, int]:
        """One slice of the first document's first job, `fits(job)` items long (at least
        one), and how many items of dead bulk jobs were dropped on the way."""
        dropped = 0
        while self._bulk:
            flow, jobs = next(iter(self._bulk.items()))
            job = jobs[0]
            if job.dead or not job.left():
                jobs.popleft()
                dropped += job.left()
                self.bulk -= job.left()
                job.taken = len(job.requests)
                if not jobs:
                    del self._bulk[flow]
                continue
            n = max(1, min(job.left(), fits(job)))
            piece = Slice(job, job.taken, job.taken + n)
            job.taken += n
            self.bulk -= n
            if not job.left():
                jobs.popleft()
            if jobs:
                self._bulk.move_to_end(flow)  # documents in turn
            else:
                del self._bulk[flow]
            return piece, dropped
        return None, dropped

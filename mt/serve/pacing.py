"""When a model worker's passes go, and how much of a document each slice takes.

Two choices are made from what the worker measured of its own passes, and none of them needs
the model: how long an interactive pass waits for more requests (pooling), and how many of a
document's texts the next slice takes (mt.serve.jobs queues both kinds of work; this module
only times them).

Pooling: a pass waits until the oldest pending request is `batch_window_ms` old, so requests
arriving together share it. Under steady load it waits on for the clients the last pass
answered: they come back one by one within a round trip, and a pass that left without them
would split the clients into two cohorts that alternate for good, each pass half as big (and
the throughput with it). So while fewer sentences are pending than the last pass took plus
those that queued during it, pooling goes on as long as requests keep arriving (one within GAP
windows), up to POOL_STRETCH windows after the pass ended; not while a document waits (the
worker would idle in front of it).

Slices: each is sized to cost about what the recent interactive passes cost (the pass's cost
measured, the slice's characters scaled to it). So a request that arrives while a document is
translated waits one slice at most: its latency stays within about twice its idle latency.
With no request for RECENT_S, a slice may cost IDLE_SLICE_S, so a document alone goes at nearly
the speed of big batches.
"""

from __future__ import annotations

import itertools

from mt.serve.jobs import FairQueue, Job

POOL_STRETCH = 50  # such pooling ends at most this many windows after the last pass ended
GAP = 20  # ... and this many windows after the newest arrival
RECENT_S = 2.0  # interactive work this recent: a document's slice costs what its passes cost
IDLE_SLICE_S = 0.25  # what a slice may cost when no request has come for RECENT_S
FIRST_PASS_S = 0.05  # an interactive pass's cost before one is measured
FIRST_SLICE_CHARS = 500


class Pace:
    """What one worker measured of its passes, and the waits and slice sizes chosen from it.
    Used by the worker's thread alone."""

    def __init__(self) -> None:
        self.expect = 1  # sentences the next pass may wait for (see pooling)
        self.pass_end = 0.0  # when the worker's last round ended
        self.pass_s = FIRST_PASS_S  # what an interactive pass costs lately (a moving mean)
        self.last_pass = -RECENT_S  # when the last interactive pass ended
        self.slice_chars = FIRST_SLICE_CHARS  # a document slice's characters (see sliced)

    def pooling(self, queue: FairQueue, now: float, window: float) -> float:
        """Seconds an interactive pass should still wait for more requests (0: go now), with a
        pooling window of `window` seconds (see the module's docstring)."""
        arrivals = queue.arrivals()
        if arrivals is None:
            return 0.0
        oldest, newest = arrivals
        queued = queue.interactive
        if queued >= self.expect or queue.bulk:
            if queued > 1 or now >= oldest + window:
                return 0.0
            return oldest + window - now
        recent = max(newest, self.pass_end)
        until = min(recent + GAP * window, self.pass_end + POOL_STRETCH * window)
        return max(max(until, oldest + window) - now, 0.0)

    def interactive(self, start: float, end: float) -> None:
        """An interactive pass ran from `start` to `end`: its cost joins the moving mean."""
        self.pass_s += 0.2 * (end - start - self.pass_s)
        self.last_pass = end

    def round_ended(self, expect: int, now: float) -> None:
        """The worker's round ended at `now`; the next pass may wait for `expect` sentences (the
        last pass's and those that queued during it)."""
        self.expect = expect
        self.pass_end = now

    def fits(self, job: Job) -> int:
        """How many of a bulk job's next texts make a slice of about `slice_chars`."""
        n, chars = 0, 0
        for request in itertools.islice(job.requests, job.taken, None):
            chars += len(request.src)
            if n and chars > self.slice_chars:
                break
            n += 1
        return n

    def slice_target(self, now: float) -> float:
        """What a slice may cost now: an interactive pass's cost while requests come, else
        IDLE_SLICE_S."""
        if now - self.last_pass < RECENT_S:
            return self.pass_s
        return IDLE_SLICE_S

    def sliced(self, chars: int, took: float, target: float) -> None:
        """A slice of `chars` characters took `took` seconds: the next one's characters are
        these scaled by how far that was from `target` (at most 4x either way)."""
        took = max(took, 1e-4)
        self.slice_chars = max(1, int(chars * min(max(target / took, 0.25), 4.0)))

"""Decoding spread over processes of one thread each (`decode.workers`), as CTranslate2's
`inter_threads` spreads it over replicas.

A decoding step is hundreds of small ops. torch splits each op over its intra-op threads, but
an op on a few hundred rows is too small to split (it runs on one core while the others wait)
and the threads meet at the end of every op; a process that decodes its own batches on one
thread pays neither. So processes of one thread decode faster than one process with as many
threads, and CTranslate2 gains more than mt from the same change
(docs/studies/bf16-and-threads.md, "Workers, and CTranslate2's replicas").

The pool forks its workers once, from the process that holds the loaded translator, so they
share its weights copy-on-write and need nothing pickled but requests and translations.
Each buffer is cut into batches by length (`shares`), the largest given out first and each
free worker the next, across buffers; the translations go back in input order, and every
request goes through the same stages and search it would take in one process. Forking is why
it is CPU-only (a GPU run decodes in one process), and why a worker runs one thread: the
parent's OpenMP threads do not exist in a forked child, and a process that never opens a
parallel region needs none.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Protocol

import torch

from mt.batching import token_batches
from mt.config import DecodeConfig
from mt.errors import MtError
from mt.tokenizer import Tokenizer
from mt.translation.requests import Request, Translation, isolated


class RequestTranslator(Protocol):
    """What the pool reads of `mt.translation.translator.Translator` (which imports this module, so
    it is named by what it offers)."""

    cfg: DecodeConfig
    device: torch.device
    tokenizer: Tokenizer
    truncated: int  # lines cut to the model's longest input so far

    def translate(self, requests: list[Request]) -> list[Translation]: ...


SHARES_PER_WORKER = 4  # batches a buffer is cut into per worker, at least: evens out the ends
MIN_SHARE_TOKENS = 1024  # below this a batch's fixed cost per step weighs more than the tail


def shares(translator: RequestTranslator, requests: list[Request], count: int) -> list[list[int]]:
    """Indices of `requests` cut into batches by source length, as one process cuts them but
    small enough that each of `count` workers gets several (`SHARES_PER_WORKER`; at most
    `decode.max_tokens` and at least `MIN_SHARE_TOKENS` each), the largest first: with a few
    large batches for two workers, one waits a batch's time for the other at the end, which
    smaller shares spare."""
    ids = translator.tokenizer.encode_src([r.src.strip() for r in requests])
    sizes = [max(len(x), 1) for x in ids]
    even = sum(sizes) // (SHARES_PER_WORKER * count)
    budget = min(translator.cfg.max_tokens, max(MIN_SHARE_TOKENS, even))
    batches = [[int(i) for i in b] for b in token_batches(sizes, budget)]
    return sorted(batches, key=lambda b: -sum(sizes[i] for i in b))


@dataclass
class _Buffer:
    """One buffer of requests in flight: its translations so far and its shares not yet given."""

    requests: list[Request]
    out: list[Translation | None]
    todo: list[list[int]]  # popped from the end: the smallest last
    left: int  # requests not yet translated


def _serve(translator: RequestTranslator, conn: Connection) -> None:
    """A worker's loop: a share in, its translations out (with the lines it cut to the model's
    longest input), until None or the pipe closes. A user's error (MtError) goes back, for
    the parent to raise."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    torch.set_num_threads(1)
    while True:
        try:
            share = conn.recv()
        except EOFError:
            return
        if share is None:
            return
        before = translator.truncated
        try:
            done = isolated(translator.translate, share)
        except MtError as err:
            conn.send(("error", err))
            continue
        conn.send(("ok", done, translator.truncated - before))


def _read_ahead(buffers: Iterable[list[Request]], out: Connection) -> None:
    """Send each buffer of `buffers` down `out`, then ("end", None); a user's error reading
    them (a malformed line) as ("end", the error), in its place in the order. Stops when the
    pool closes its end."""
    try:
        for requests in buffers:
            out.send(("buffer", requests))
        out.send(("end", None))
    except MtError as err:
        with contextlib.suppress(OSError):
            out.send(("end", err))
    except OSError:  # the pool stopped listening
        pass
    finally:
        out.close()


class WorkerPool:
    """`count` forked processes that each translate whole shares of a buffer with `translator`.

    Offers what `translate_stream` reads of a translator (`translate`, `cfg`), so a caller
    passes the pool where it passed the translator. Close it (or use it as a context manager)
    to end the workers."""

    def __init__(self, translator: RequestTranslator, count: int) -> None:
        if translator.device.type != "cpu":
            raise MtError("decode.workers > 1 runs on a CPU only (its workers are forked)")
        self.translator = translator
        self.cfg = translator.cfg
        self.count = count
        ctx = multiprocessing.get_context("fork")
        self._conns: list[Connection] = []
        self._procs: list[BaseProcess] = []
        for _ in range(count):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(translator, child), daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)

    def translate(self, requests: list[Request]) -> list[Translation]:
        """Translations of `requests` in their order, their batches decoded side by side."""
        return next(iter(self.stream([requests])), []) if requests else []

    def stream(self, buffers: Iterable[list[Request]]) -> Iterator[list[Translation]]:
        """The translations of each buffer, in order, the workers kept busy across buffers: a
        worker done with the last batches of one starts on the next (at most two buffers are
        held), so no worker waits for the slowest batch of a buffer. A thread reads the input
        ahead (`_read_ahead`), so a buffer is yielded as soon as it is translated, whether or
        not the next has come in (a live pipe gets its answers as one process gives them); an
        error reading the input is raised after the buffers before it are yielded."""
        inbox, outbox = multiprocessing.Pipe(duplex=False)
        threading.Thread(target=_read_ahead, args=(buffers, outbox), daemon=True).start()
        held: deque[_Buffer] = deque()
        busy: dict[Connection, tuple[_Buffer, list[int]]] = {}
        ended, failure = False, None
        try:
            while True:
                self._hand_out(held, busy)
                while held and held[0].left == 0:
                    yield held.popleft().out  # type: ignore[misc]
                if ended and not held and not busy:
                    if failure is not None:
                        raise failure
                    return
                watch: list[Connection] = list(busy)
                if not ended and len(held) < 2 and not any(b.todo for b in held):
                    watch.append(inbox)  # room for the next buffer, and a worker to give it
                for conn in wait(watch):
                    assert isinstance(conn, Connection)
                    if conn is inbox:
                        try:
                            kind, payload = inbox.recv()
                        except EOFError:  # the reader failed: its traceback is above
                            raise MtError("the input could not be read") from None
                        if kind == "buffer":
                            held.append(self._buffer(payload))
                        else:
                            ended, failure = True, payload
                        continue
                    buf, share = busy.pop(conn)
                    for i, t in zip(share, self._receive(conn)):
                        buf.out[i] = t
                    buf.left -= len(share)
        finally:
            inbox.close()  # the reader's next send fails, and it stops

    def _hand_out(
        self, held: deque[_Buffer], busy: dict[Connection, tuple[_Buffer, list[int]]]
    ) -> None:
        """Give each free worker the next share of the oldest buffer that has one."""
        for conn in [c for c in self._conns if c not in busy]:
            buf = next((b for b in held if b.todo), None)
            if buf is None:
                return
            share = buf.todo.pop()
            try:
                conn.send([buf.requests[i] for i in share])
            except OSError:  # a broken pipe: the worker is gone
                raise MtError(f"a decoding worker stopped ({self._exits()})") from None
            busy[conn] = (buf, share)

    def _buffer(self, requests: list[Request]) -> _Buffer:
        todo = shares(self.translator, requests, self.count)[::-1] if requests else []
        return _Buffer(requests, [None] * len(requests), todo, len(requests))

    def _receive(self, conn: Connection) -> list[Translation]:
        """A worker's translations of the share it was given; its user error raised here."""
        try:
            answer = conn.recv()
        except EOFError:
            raise MtError(f"a decoding worker stopped ({self._exits()})") from None
        if answer[0] == "error":
            raise answer[1]
        _, done, cut = answer
        self.translator.truncated += cut  # what the caller reports, as in one process
        return done

    def _exits(self) -> str:
        for proc in self._procs:
            proc.join(timeout=1)  # a worker that closed its pipe is ending: read its exit code
        codes = [p.exitcode for p in self._procs if p.exitcode is not None]
        return "exit codes " + ", ".join(str(c) for c in codes) if codes else "no exit code"

    def close(self) -> None:
        """End the workers: each is asked to stop, then killed if it has not within 5 s."""
        for conn in self._conns:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            conn.close()
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self._conns, self._procs = [], []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def spread(
    translator: RequestTranslator, count: int | None = None
) -> Iterator[RequestTranslator | WorkerPool]:
    """What to translate with: a pool of `count` workers (default `decode.workers`) around
    `translator`, ended on leaving, or `translator` itself for one process, on a GPU (a
    checkpoint's setting from CPU decoding does not stop a GPU run) or where this system
    cannot fork."""
    count = translator.cfg.workers if count is None else count
    if count <= 1 or translator.device.type != "cpu" or not hasattr(os, "fork"):
        yield translator
        return
    with WorkerPool(translator, count) as pool:
        yield pool

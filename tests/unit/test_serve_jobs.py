"""The worker's fair queue (mt.serve.jobs): clients in turn, documents a slice at a time after
them, and what is counted against the queue at each step."""

from __future__ import annotations

import asyncio

from mt.serve.jobs import FairQueue, Job
from mt.translation.requests import Request


def job(flow: str, n: int, bulk: bool = False, name: str = "") -> Job:
    loop = asyncio.new_event_loop()
    reqs = [Request(f"{name or flow} {i}") for i in range(n)]
    out = Job(loop.create_future(), loop, reqs, flow=flow, bulk=bulk)
    loop.close()
    return out


def srcs(jobs: list[Job]) -> list[str]:
    return [j.requests[0].src for j in jobs]


def test_clients_take_turns_within_a_pass():
    q = FairQueue()
    for i in range(4):  # a busy client sends four requests first
        q.push("busy", job("busy", 2, name=f"busy{i}"))
    q.push("calm", job("calm", 1, name="calm0"))
    q.push("other", job("other", 3, name="other0"))
    assert q.interactive == 12 and q.items == 12
    first = q.take(6)
    # One job per client per round: the calm and other clients are not behind the busy one.
    assert srcs(first) == ["busy0 0", "calm0 0", "other0 0"]
    assert q.interactive == 6
    assert srcs(q.take(6)) == ["busy1 0", "busy2 0", "busy3 0"]
    assert not q and q.interactive == 0
    # A pass takes one job at least, however big.
    q.push("a", job("a", 9))
    assert len(q.take(4)) == 1 and q.interactive == 0


def test_documents_go_a_slice_at_a_time_in_turn():
    q = FairQueue()
    a, b = job("doc-a", 5, bulk=True), job("doc-b", 3, bulk=True)
    q.push_bulk("doc-a", a)
    q.push_bulk("doc-b", b)
    assert q.bulk == 8 and q.interactive == 0
    cuts = []
    while True:
        piece, dropped = q.take_slice(lambda j: 2)
        if piece is None:
            break
        assert dropped == 0
        cuts.append((piece.job.flow, piece.start, piece.end))
    assert cuts == [
        ("doc-a", 0, 2), ("doc-b", 0, 2), ("doc-a", 2, 4), ("doc-b", 2, 3), ("doc-a", 4, 5),
    ]  # fmt: skip
    assert q.bulk == 0 and not q
    assert a.taken == 5 and b.taken == 3


def test_a_slice_has_one_text_at_least_and_dead_documents_are_dropped():
    q = FairQueue()
    gone, alive = job("doc-a", 6, bulk=True), job("doc-b", 4, bulk=True)
    q.push_bulk("doc-a", gone)
    q.push_bulk("doc-b", alive)
    piece, _ = q.take_slice(lambda j: 0)
    assert (piece.job, piece.start, piece.end) == (gone, 0, 1)
    assert [r.src for r in piece.requests] == ["doc-a 0"]
    gone.cancelled = True  # its client left: its five other texts are never translated
    piece, dropped = q.take_slice(lambda j: 10)
    assert (piece.job, piece.start, piece.end, dropped) == (alive, 0, 4, 0)
    piece, dropped = q.take_slice(lambda j: 10)
    assert piece is None and dropped == 5 and q.bulk == 0 and not q


def test_interactive_arrivals_for_pooling():
    q = FairQueue()
    assert q.arrivals() is None
    early, late = job("a", 1), job("b", 1)
    early.arrived, late.arrived = 10.0, 12.5
    q.push("b", late)
    q.push("a", early)
    q.push_bulk("doc", job("doc", 3, bulk=True))  # documents are not pooled for
    assert q.arrivals() == (10.0, 12.5)

"""`mt serve BASE --adapter legal=A --adapter ui=B`: two adapters on one base in memory, over
real HTTP, checked against the CLI's `--adapter` output; and the worker's batching, which never
puts two adapters in one search."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from support.processes import start_server

from mt.serve.config import ServeConfig
from mt.serve.prometheus import Metrics
from mt.serve.worker import ModelWorker
from mt.translation.requests import Request
from mt.translation.session import DecodeOptions

ITEMS = [
    {"src": "Ein Mann fährt mit dem Fahrrad über die Brücke."},
    {"src": "Zwei Hunde spielen im Schnee."},
    {"src": "Eine Frau mit einem roten Hut sitzt auf einer Bank."},
]


@pytest.fixture(scope="module")
def server(tiny_run: Path, tiny_adapters: dict[str, Path], tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve_adapters")
    srv = start_server(
        f"tiny={tiny_run / 'best.pt'}",
        *("--adapter", f"legal={tiny_adapters['legal']}"),
        *("--adapter", f"tiny:ui={tiny_adapters['ui'] / 'best.pt'}"),
        *("--device", "cpu"),
        log=folder / "server.log",
    )
    yield srv
    assert srv.stop() == 0


def post(server, path: str, body: object, **kw) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60, **kw)


def cli(mt_cli, tiny_run: Path, tmp_path: Path, *flags: object) -> list[dict]:
    src = tmp_path / "items.jsonl"
    src.write_text("".join(json.dumps(i) + "\n" for i in ITEMS), encoding="utf-8")
    result = mt_cli(
        "translate", tiny_run / "best.pt", "--device", "cpu", "--input", src,
        "--input-format", "jsonl", "--output-format", "jsonl", *flags,
    )  # fmt: skip
    assert result.rc == 0, result.err
    return [json.loads(line) for line in result.out.splitlines()]


def test_each_adapter_translates_as_the_cli_does(server, tiny_run, tiny_adapters, mt_cli, tmp_path):
    base = cli(mt_cli, tiny_run, tmp_path)
    answers = {}
    for name in (None, "legal", "ui"):
        body = {"items": ITEMS, "split_sentences": False, **({"adapter": name} if name else {})}
        r = post(server, "/v1/translate", body)
        assert r.status_code == 200, r.text
        answers[name] = r.json()["items"]
    # without an adapter the base's output, byte for byte (adapters held beside it)
    same = [json.dumps(a, ensure_ascii=False) for a in answers[None]]
    assert same == [json.dumps(b, ensure_ascii=False) for b in base]
    for name in ("legal", "ui"):
        # the CLI folds the adapter in, the server keeps it beside the base: the same words,
        # scores equal to float rounding
        want = cli(mt_cli, tiny_run, tmp_path, "--adapter", tiny_adapters[name])
        assert [a["translation"] for a in answers[name]] == [w["translation"] for w in want]
        for a, w in zip(answers[name], want):
            assert a["score"] == pytest.approx(w["score"], abs=1e-4)
    assert answers["legal"] != answers[None] and answers["ui"] != answers["legal"]


def test_models_lists_the_adapters_and_an_unknown_one_is_a_400(server, tiny_adapters):
    (model,) = httpx.get(server.url + "/v1/models").json()["models"]
    names = [a["name"] for a in model["adapters"]]
    assert names == ["legal", "ui"]
    legal = model["adapters"][0]
    assert legal["kind"] == "lora" and legal["rank"] == 4 and "decode" in legal
    assert legal["checkpoint"] == str(tiny_adapters["legal"])
    bad = post(server, "/v1/translate", {"items": ITEMS[:1], "adapter": "medical"})
    assert bad.status_code == 400
    assert (
        bad.json()["error"] == "unknown adapter 'medical' of model 'tiny' (its adapters: legal, ui)"
    )
    wrong = post(server, "/v1/translate", {"items": ITEMS[:1], "adapter": 3})
    assert wrong.status_code == 422 and "'adapter' must be a string" in wrong.json()["error"]
    pair = {"src": "Ein Hund.", "tgt": "A dog."}
    assert post(server, "/v1/score", {"items": [pair], "adapter": "x"}).status_code == 400
    assert post(server, "/v1/attention", {"src": "Ein Hund.", "adapter": "x"}).status_code == 400


def test_score_attention_and_libretranslate_take_the_adapter(server):
    item = {"src": ITEMS[1]["src"], "tgt": "Two dogs play in the snow."}
    base = post(server, "/v1/score", {"items": [item]}).json()["items"][0]
    ui = post(server, "/v1/score", {"items": [item], "adapter": "ui"}).json()["items"][0]
    assert base["tokens"] == ui["tokens"] and base["logprob"] != pytest.approx(ui["logprob"])
    want = post(server, "/v1/translate", {"items": ITEMS[1:2], "adapter": "ui"}).json()
    text = want["items"][0]["translation"]
    att = post(server, "/v1/attention", {"src": ITEMS[1]["src"], "adapter": "ui"})
    assert att.status_code == 200, att.text
    libre = {"q": ITEMS[1]["src"], "source": "de", "target": "en"}
    query = httpx.post(server.url + "/translate?adapter=ui", json=libre, timeout=60)
    body = post(server, "/translate", {**libre, "adapter": "ui"})
    form = httpx.post(server.url + "/translate", data={**libre, "adapter": "ui"}, timeout=60)
    for r in (query, body, form):
        assert r.status_code == 200 and r.json() == {"translatedText": text}, r.text
    plain = post(server, "/translate", libre).json()["translatedText"]
    assert plain != text
    unknown = post(server, "/translate", {**libre, "adapter": "nope"})
    assert unknown.status_code == 400 and "unknown adapter 'nope'" in unknown.json()["error"]


def test_concurrent_requests_of_different_adapters_each_get_their_own(server):
    names = [None, "legal", "ui"] * 4
    alone = {}
    for name in (None, "legal", "ui"):
        body = {"items": ITEMS, **({"adapter": name} if name else {})}
        alone[name] = post(server, "/v1/translate", body).json()["items"]

    def one(name):
        body = {"items": ITEMS, **({"adapter": name} if name else {})}
        return name, post(server, "/v1/translate", body).json()["items"]

    with ThreadPoolExecutor(len(names)) as pool:
        for name, items in pool.map(one, names):
            # pooled with others the batch is padded otherwise: the same words, scores to
            # float rounding
            assert [i["translation"] for i in items] == [i["translation"] for i in alone[name]]
            for got, want in zip(items, alone[name]):
                assert got["score"] == pytest.approx(want["score"], abs=1e-4), name


def test_the_worker_never_puts_two_adapters_in_one_search(tiny_run, tiny_adapters):
    """Jobs of the base and of both adapters queued together: one translator call per adapter,
    each with that adapter's requests only, and each job answered as it would be alone."""
    adapters = {n: p / "best.pt" for n, p in tiny_adapters.items()}
    config = ServeConfig(models={"tiny": [tiny_run / "best.pt"]}, adapters={"tiny": adapters})
    worker = ModelWorker("tiny", config, Metrics())
    worker.start()
    deadline = time.monotonic() + 120
    while not worker.ready and worker.error is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker.session is not None, worker.error
    calls: list[list[str | None]] = []
    translate_group = worker._translate

    def spy(group):  # noqa: ANN001, ANN202
        calls.append([job.adapter for job, _ in group])
        translate_group(group)

    worker._translate = spy
    requests = [Request(i["src"]) for i in ITEMS]
    busy, queued = threading.Event(), threading.Event()

    async def main():
        def hold(session):  # noqa: ANN001, ANN202 - keeps the worker busy while jobs queue
            busy.set()
            queued.wait(60)

        first = asyncio.ensure_future(worker.run(hold))
        await asyncio.to_thread(busy.wait, 60)
        order = ["ui", None, "legal", "ui", None, "legal"]
        futures = [
            asyncio.ensure_future(
                worker.translate(requests, DecodeOptions(), False, False, adapter=a)
            )
            for a in order
        ]
        await asyncio.sleep(0)
        queued.set()
        await first
        return order, await asyncio.gather(*futures)

    try:
        order, answers = asyncio.run(main())
        calls_pooled = list(calls)
        alone = {
            a: asyncio.run(worker.translate(requests, DecodeOptions(), False, False, adapter=a))
            for a in (None, "legal", "ui")
        }
    finally:
        worker.stop()
    assert sorted(calls_pooled, key=lambda c: str(c[0])) == [[None] * 2, ["legal"] * 2, ["ui"] * 2]
    for adapter, got in zip(order, answers):
        assert [t.text for t in got] == [t.text for t in alone[adapter]], adapter
    assert [t.text for t in alone["ui"]] != [t.text for t in alone[None]]


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("legal", "give NAME=PATH"),
        ("other:legal=x.pt", "no model 'other'"),
        ("a b=x.pt", "a name is letters"),
        ("legal=missing.pt", "missing.pt: adapter not found"),
    ],
)
def test_bad_adapter_flags_are_one_line(tiny_run, mt_cli, flag, says):
    result = mt_cli("serve", tiny_run / "best.pt", "--adapter", flag, "--port", "0")
    assert result.rc == 2 and says in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1

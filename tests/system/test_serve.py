"""`mt serve` over real HTTP: one server process (a model and an ensemble of it, an API key,
small limits) for the module, checked against the CLI's own output."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from support.processes import Server, start_server

KEY = "k" * 20
AUTH = {"Authorization": f"Bearer {KEY}"}
LIMITS = ("--max-items", "8", "--max-chars", "300", "--max-queue", "6")


@pytest.fixture(scope="module")
def server(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("serve")
    keys = folder / "keys.txt"
    keys.write_text(f"# one key per line\n{KEY}\n", encoding="utf-8")
    ckpt = tiny_run / "best.pt"
    srv = start_server(
        f"tiny={ckpt}",
        f"pair={ckpt},{ckpt}",
        *("--device", "cpu", "--api-key-file", keys, *LIMITS),
        log=folder / "server.log",
    )
    yield srv
    assert srv.stop() == 0


def post(server: Server, path: str, body: object, **kw) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=AUTH, timeout=60, **kw)


def cli_jsonl(mt_cli, ckpt: Path, items: list[dict], tmp_path: Path, *flags: str) -> list[str]:
    src = tmp_path / "items.jsonl"
    src.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    result = mt_cli(
        "translate", ckpt, "--device", "cpu", "--input", src,
        "--input-format", "jsonl", "--output-format", "jsonl", *flags,
    )  # fmt: skip
    assert result.rc == 0, result.err
    return result.out.splitlines()


def same_as_cli(answers: list[dict], cli_lines: list[str]) -> None:
    """Byte for byte: each answer serialised as the CLI writes it is the CLI's line."""
    got = [json.dumps(a, ensure_ascii=False) for a in answers]
    assert got == cli_lines


def test_translate_is_byte_for_byte_the_cli(server, tiny_run, mt_cli, tmp_path):
    items = [
        {"src": "Ein Mann fährt Fahrrad."},
        {"src": ""},
        {"src": "Zwei Hunde spielen im Schnee.", "prefix": "Two"},
        {"src": "Eine Frau liest ein Buch."},
    ]
    r = post(server, "/v1/translate", {"items": items, "options": {"nbest": 2, "alignment": True}})
    assert r.status_code == 200, r.text
    answers = r.json()["items"]
    assert len(answers) == 4 and answers[1]["translation"] == ""
    assert answers[2]["translation"].startswith("Two")
    assert len(answers[0]["nbest"]) == 2 and "alignment" in answers[0]
    ckpt = tiny_run / "best.pt"
    same_as_cli(answers, cli_jsonl(mt_cli, ckpt, items, tmp_path, "--nbest", "2", "--alignment"))

    # Defaults are the CLI's defaults; constraints as --input-format jsonl takes them.
    items = [{"src": "Ein Hund rennt.", "constraints": ["park"]}, {"src": "Ein Kind lacht."}]
    r = post(server, "/v1/translate", {"items": items})
    assert r.status_code == 200, r.text
    assert "park" in r.json()["items"][0]["translation"]
    same_as_cli(r.json()["items"], cli_jsonl(mt_cli, ckpt, items, tmp_path))


def test_an_ensemble_by_name(server):
    body = {"items": [{"src": "Ein Hund rennt."}], "options": {"greedy": True}}
    one = post(server, "/v1/translate", body)
    two = post(server, "/v1/translate", {**body, "model": "pair"})
    assert one.status_code == two.status_code == 200
    # An ensemble of a model with itself averages identical distributions: the same output.
    assert two.json()["items"][0]["translation"] == one.json()["items"][0]["translation"]


def test_concurrent_requests_each_get_their_own_answer(server):
    sentences = [f"Ein Mann mit {n} Hunden." for n in ("zwei", "drei", "vier", "fünf", "sechs")]
    alone = {s: post(server, "/v1/translate", {"items": [{"src": s}]}).json() for s in sentences}
    results: dict[str, dict] = {}

    def ask(s: str) -> None:
        results[s] = post(server, "/v1/translate", {"items": [{"src": s}]}).json()

    # Five at once: within the module server's queue limit of 6 sentences.
    threads = [threading.Thread(target=ask, args=(s,)) for s in sentences]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for s in sentences:
        assert results[s]["items"][0]["translation"] == alone[s]["items"][0]["translation"]


def test_score_is_mt_score_json(server, tiny_run, mt_cli, tmp_path):
    pairs = [("Ein Hund rennt.", "A dog runs."), ("Zwei Männer.", "Two men.")]
    r = post(server, "/v1/score", {"items": [{"src": s, "tgt": t} for s, t in pairs]})
    assert r.status_code == 200, r.text
    (tmp_path / "s").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (tmp_path / "t").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    cli = mt_cli(
        "score", tiny_run / "best.pt", "--src", tmp_path / "s", "--tgt", tmp_path / "t",
        "--json", "--device", "cpu",
    )  # fmt: skip
    assert cli.rc == 0, cli.err
    assert r.json()["items"] == [json.loads(line) for line in cli.out.splitlines()]


def test_attention_is_the_viewers_data(server):
    r = post(server, "/v1/attention", {"src": "Ein Hund rennt im Park."})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["view"] == "attention" and [k["id"] for k in data["kinds"]] == [
        "encoder",
        "decoder",
        "cross",
    ]
    for kind in data["kinds"]:
        for layer in kind["weights"]:
            for head in layer:
                assert len(head) == len(kind["rows"])
                for row in head:
                    assert len(row) == len(kind["cols"])
                    assert abs(sum(row) - 1) < 1e-4
    # The translation shown is the one /v1/translate gives (same beam, one sentence).
    t = post(server, "/v1/translate", {"items": [{"src": "Ein Hund rennt im Park."}]})
    assert data["translation"] == t.json()["items"][0]["translation"]
    assert post(server, "/v1/attention", {"src": "x", "model": "pair"}).status_code == 422


def test_models_health_metrics(server):
    models = httpx.get(server.url + "/v1/models", headers=AUTH).json()["models"]
    assert [m["name"] for m in models] == ["tiny", "pair"]
    tiny, pair = models
    assert tiny["default"] and tiny["status"] == "ready" and tiny["ensemble"] == 1
    assert (tiny["source_language"], tiny["target_language"]) == ("de", "en")
    assert pair["ensemble"] == 2 and pair["parameters"] == 2 * tiny["parameters"]
    assert tiny["config"]["decode"]["beam"] >= 1
    assert httpx.get(server.url + "/health").json() == {"status": "ready"}
    post(server, "/v1/translate", {"items": [{"src": "Ein Hund."}, {"src": "Eine Katze."}]})
    text = httpx.get(server.url + "/metrics", headers=AUTH).text
    assert 'mt_requests_total{route="/v1/translate",status="200"}' in text
    assert 'mt_request_seconds_bucket{route="/v1/translate",le="+Inf"}' in text
    assert "mt_batch_sentences_count" in text and 'mt_queue_sentences{model="tiny"} 0' in text
    assert int(text.split("\nmt_sentences_total ")[1].split()[0]) >= 2
    schema = httpx.get(server.url + "/openapi.json").json()
    assert {"/v1/translate", "/v1/score", "/v1/attention", "/translate"} <= set(schema["paths"])
    assert httpx.get(server.url + "/docs").status_code == 200


def test_libretranslate_api(server):
    one = post(server, "/translate", {"q": "Ein Hund rennt.", "source": "de", "target": "en"})
    assert one.status_code == 200, one.text
    want = post(server, "/v1/translate", {"items": [{"src": "Ein Hund rennt."}]}).json()
    assert one.json() == {"translatedText": want["items"][0]["translation"]}
    many = httpx.post(
        server.url + "/translate",
        json={"q": ["Ein Hund rennt.", "Ein Hund."], "source": "auto", "target": "en",
              "api_key": KEY},
    )  # fmt: skip
    assert many.status_code == 200, many.text
    assert many.json()["translatedText"][0] == one.json()["translatedText"]
    assert many.json()["detectedLanguage"]["language"] == "de"
    form = httpx.post(
        server.url + "/translate",
        data={"q": "Ein Hund rennt.", "source": "de", "target": "en", "api_key": KEY},
    )
    assert form.status_code == 200 and form.json() == one.json()
    assert httpx.get(server.url + "/languages").json() == [
        {"code": "de", "name": "German", "targets": ["en"]}
    ]
    bad = post(server, "/translate", {"q": "x", "source": "de", "target": "fr"})
    assert bad.status_code == 400 and "no model translates 'de' into 'fr'" in bad.json()["error"]


def test_a_libretranslate_client_works_unchanged(server):
    """libretranslatepy, LibreTranslate's own Python client, as its users call it."""
    from libretranslatepy import LibreTranslateAPI

    lt = LibreTranslateAPI(server.url + "/", api_key=KEY)
    want = post(server, "/v1/translate", {"items": [{"src": "Ein Hund rennt."}]}).json()
    assert lt.translate("Ein Hund rennt.", "de", "en") == want["items"][0]["translation"]
    assert lt.languages() == [{"code": "de", "name": "German", "targets": ["en"]}]


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"items": "Ein Hund"}, 422, "'items' must be a list, got a string"),
        ({"items": []}, 422, "'items' is empty"),
        ({"items": [{"src": 3}]}, 422, "items[0]: 'src' must be a string"),
        ({"items": [{"src": "a", "tgt": "b"}]}, 422, "items[0]: unknown key 'tgt'"),
        ({"items": [{"src": "a"}], "extra": 1}, 422, "unknown key 'extra' in the body"),
        ({"items": [{"src": "a"}], "options": {"bem": 5}}, 422, "unknown option 'options.bem'"),
        ({"items": [{"src": "a"}], "options": {"beam": "5"}}, 422, "must be an integer"),
        ({"items": [{"src": "a"}], "options": {"beam": 0}}, 422, "options.beam"),
        ({"items": [{"src": "a"}], "options": {"nbest": 9, "beam": 2}}, 422, "options.nbest"),
        ({"items": [{"src": "a"}], "options": {"max_tokens": 9}}, 422, "setting of the server"),
        ({"items": [{"src": "a"}], "options": {"topk": 3}}, 422, "topk needs options.sample"),
        ({"items": [{"src": "a", "constraints": ["x"]}], "options": {"greedy": True}}, 422,
         "constraints need beam search"),
        ({"items": [{"src": "a"}], "model": "nope"}, 404, "unknown model 'nope'"),
        ({"items": [{"src": "a"}] * 9}, 413, "9 items in one request; the limit is 8"),
        ({"items": [{"src": "a" * 301}]}, 413, "items[0].src has 301 characters; the limit is 300"),
        ({"items": [{"src": "a"}] * 7}, 503, "the limit is 6"),
    ],
)  # fmt: skip
def test_bad_requests_get_one_clear_line(server, body, status, says):
    r = post(server, "/v1/translate", body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert says in error and "\n" not in error
    limit = {413: "max_items" if "items in" in says else "max_chars", 503: "max_queue"}
    assert r.json().get("limit") == limit.get(status)


def test_malformed_and_oversized_bodies(server):
    r = httpx.post(server.url + "/v1/translate", content=b'{"items": [', headers=AUTH)
    assert r.status_code == 400 and r.json()["error"].startswith("the body is not JSON")
    r = httpx.post(server.url + "/v1/translate", content=b"\xff\xfe", headers=AUTH)
    assert r.status_code == 400
    big = b'{"items": [{"src": "' + b"a" * (5 << 20) + b'"}]}'
    r = httpx.post(server.url + "/v1/translate", content=big, headers=AUTH)
    assert r.status_code == 413 and r.json()["limit"] == "max_body_bytes"
    r = post(server, "/v1/score", {"items": [{"src": "a"}]})
    assert r.status_code == 422 and r.json()["error"] == "items[0].tgt must be a string, got null"
    r = post(server, "/v1/attention", {"src": "a", "options": {"nbest": 2}})
    assert r.status_code == 422 and "unknown option 'options.nbest'" in r.json()["error"]
    # No request names a file: static files are a fixed list.
    for path in ("/static/..%2f..%2fetc%2fpasswd", "/static/index.py", "/static/../cli.py"):
        assert httpx.get(server.url + path).status_code == 404


def test_api_key(server):
    body = {"items": [{"src": "Ein Hund."}]}
    assert httpx.post(server.url + "/v1/translate", json=body).status_code == 401
    wrong = {"Authorization": "Bearer " + "x" * 20}
    r = httpx.post(server.url + "/v1/translate", json=body, headers=wrong)
    assert r.status_code == 401 and r.json()["limit"] == "api_key"
    assert httpx.post(
        server.url + "/v1/translate", json=body, headers={"X-API-Key": KEY}
    ).is_success
    assert httpx.get(server.url + "/metrics").status_code == 401
    libre = {"q": "Ein Hund.", "source": "de", "target": "en", "api_key": "nope"}
    assert httpx.post(server.url + "/translate", json=libre).status_code == 401
    # The page and health stay open; CORS is off unless asked for.
    r = httpx.get(server.url + "/", headers={"Origin": "http://example.com"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    assert "default-src 'none'" in r.headers["content-security-policy"]


@pytest.fixture(scope="module")
def plain(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory):
    """A server with the default limits, no key and a pooling window of a second, so that a
    request surely waits in the queue; the SIGTERM test stops it."""
    folder = tmp_path_factory.mktemp("serve-plain")
    srv = start_server(
        tiny_run / "best.pt", "--device", "cpu", "--batch-window-ms", "1000",
        "--cors-origin", "http://localhost:3000", log=folder / "server.log",
    )  # fmt: skip
    yield srv
    assert srv.stop() == 0
    assert "Traceback" not in srv.log.read_text()


def test_a_client_that_leaves_costs_no_model_work(plain):
    """A queued request whose client disconnects is dropped unread."""
    server = plain

    def metric(name: str) -> int:
        text = httpx.get(server.url + "/metrics").text
        return int(next(x for x in text.splitlines() if x.startswith(name)).split()[-1])

    def dropped() -> int:
        return metric("mt_dropped_sentences_total ")

    before, translated = dropped(), metric("mt_sentences_total ")
    body = json.dumps({"items": [{"src": "Ein Hund."}]}).encode()
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(
            b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        deadline = time.monotonic() + 10  # leave once the server has queued the sentence
        while metric("mt_queue_sentences{") != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert metric("mt_queue_sentences{") == 1
    deadline = time.monotonic() + 10
    while dropped() == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert dropped() == before + 1
    assert metric("mt_sentences_total ") == translated


def test_cors_only_for_the_origins_given(plain):
    asked = httpx.get(plain.url + "/health", headers={"Origin": "http://localhost:3000"})
    assert asked.headers.get("access-control-allow-origin") == "http://localhost:3000"
    other = httpx.get(plain.url + "/health", headers={"Origin": "http://elsewhere.example"})
    assert "access-control-allow-origin" not in other.headers
    preflight = httpx.options(
        plain.url + "/v1/translate",
        headers={"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 200


def test_sigterm_answers_the_request_in_flight_and_exits_0(plain):
    """SIGTERM while a request waits in the worker's queue: it is answered in full, after the
    signal and without waiting out its pooling window, and the server exits 0. A lone
    one-sentence request waits the window (a second here) before its pass, so it is surely
    queued when the signal comes."""
    srv = plain
    answers: list[tuple[httpx.Response, float]] = []

    def ask() -> None:
        body = {"items": [{"src": "Ein Mann geht durch den Park."}], "options": {"nbest": 3}}
        r = httpx.post(srv.url + "/v1/translate", json=body, timeout=120)
        answers.append((r, time.monotonic()))

    asking = threading.Thread(target=ask)
    sent = time.monotonic()
    asking.start()
    time.sleep(0.3)
    signalled = time.monotonic()
    assert signalled - sent < 0.9 and not answers  # still inside the window
    assert srv.stop() == 0
    asking.join(60)
    [(r, done)] = answers
    assert r.status_code == 200
    [item] = r.json()["items"]
    assert item["translation"] and len(item["nbest"]) == 3
    assert done > signalled  # it was in flight
    assert done < sent + 1.0  # the signal ended its pooling wait: no waiting for company
    with pytest.raises(httpx.ConnectError):  # and nothing new is taken
        httpx.get(srv.url + "/health")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ("--host", "0.0.0.0"),
            "--host 0.0.0.0 lets other machines in: give --api-key-file (or bind 127.0.0.1)",
        ),
        (("--api-key-file", "/nonexistent/keys"), "/nonexistent/keys: API key file not found"),
        (("--max-items", "0"), "--max-items must be >= 1"),
    ],
)
def test_bad_flags_are_one_line(tiny_run, mt_cli, args, says):
    result = mt_cli("serve", tiny_run / "best.pt", *args)
    assert result.rc == 2 and result.err == f"mt: error: {says}\n"


def test_missing_checkpoint_is_one_line(mt_cli, tmp_path):
    result = mt_cli("serve", tmp_path / "none.pt")
    assert (
        result.rc == 2
        and result.err == f"mt: error: {tmp_path / 'none.pt'}: checkpoint not found\n"
    )


def test_a_port_in_use_is_one_line_naming_it(tiny_run, mt_cli):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = mt_cli("serve", tiny_run / "best.pt", "--port", port)
    assert result.rc == 2
    assert result.err == (
        f"mt: error: port {port} on 127.0.0.1 is in use: choose another with --port\n"
    )


def test_the_start_line_says_the_threads_once_listening(server):
    said = [line for line in server.log.read_text().splitlines() if line.startswith("mt serve: ")]
    # start_server runs it with OMP_NUM_THREADS=1: a count the policy takes as asked for
    assert len(said) == 1 and said[0].startswith("mt serve: 1 thread (OMP_NUM_THREADS; "), said

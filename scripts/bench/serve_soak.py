"""`mt serve` bounded and fair: the three targets of its file route, measured on one server.

    python -m scripts.bench.serve_soak CHECKPOINT [--minutes 30] [--skip bombs,fair,soak]

1. Zip bombs: an honest one at the body limit (4 MiB; its directory says 4 GB), one that lies
   (says 1,000 bytes, with their CRC, and holds 2 GB in 2 MB) and the 0.6 MB / 600 MB one a
   client first sent, honest and lying: the answer and how far the server's peak RSS rose
   (target: 413 or 400, <= 50 MB).
2. Fairness: one interactive client (`/translate`, one sentence at a time, 50 ms apart) alone,
   then while the largest document the limits allow (max_file_segments lines of Multi30k's
   training set, under max_file_chars) is translated: p50/p99 latency, busy over idle
   (target: p99 <= 2x). The document alone too, and its lines checked against the CLI's.
3. Soak: `--minutes` of mixed load from 8 clients: text and html `/translate`, `/v1/translate`,
   files (.txt, .html, .srt, .docx) uploaded and downloaded, bad inputs (malformed JSON,
   unknown options, over-limit bodies and files, broken .docx, a bomb), connections dropped
   mid-request, requests without their API key. Every translation is compared with the one
   `mt translate` gives (the same Translator and plan, in this process); no answer may be a
   5xx; the server's RSS after the first tenth and at the end (target: <= 10% growth), and at
   each minute.

Prints a Markdown report with the machine's CPU and load.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import random
import socket
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import torch

from mt.translation.requests import Plan, Request
from mt.translation.session import Session
from scripts.common import describe_machine, multi30k_dir, read_lines, say
from tests.support.bombs import zip_bomb
from tests.support.processes import Server, start_server

KEY = "soak-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
MIB = 1 << 20


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def upload(url: str, name: str, data: bytes, timeout: float = 600) -> httpx.Response:
    return httpx.post(
        url + "/translate_file",
        data={"source": "de", "target": "en", "api_key": KEY},
        files={"file": (name, data)},
        timeout=timeout,
    )


# -- 1. zip bombs ----------------------------------------------------------------------------


def bombs(server: Server) -> list[tuple[str, int, int, str, float]]:
    pid = server.proc.pid
    upload(server.url, "warm.docx", b"PK not a zip")  # the route's imports, before measuring
    cases = [
        ("honest, at the body limit", lambda: zip_bomb(4_000 * MIB)),
        (
            "lying, 2 GB (the most plain zip fields hold)",
            lambda: zip_bomb(2_000 * MIB, declare=1000),
        ),
        ("0.6 MB -> 600 MB (as first reported)", lambda: zip_bomb(600 * MIB)),
        ("0.6 MB -> 600 MB, lying", lambda: zip_bomb(600 * MIB, declare=1000)),
    ]
    rows = []
    for what, build in cases:
        say(f"bomb: {what}: building")
        data = build()
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak from now on
        except OSError:
            pass
        before = status_kib(pid, "VmRSS")
        r = upload(server.url, "bomb.docx", data)
        grew = (status_kib(pid, "VmHWM") - before) / 1024
        error = r.json().get("error", "") if r.status_code >= 400 else ""
        rows.append((what, len(data), r.status_code, error, grew))
        say(f"bomb: {what}: {r.status_code} {error} (peak RSS +{grew:.1f} MiB)")
    return rows


# -- 2. fairness -----------------------------------------------------------------------------


def interactive(url: str, lines: list[str], stop: threading.Event, most: int) -> list[float]:
    """One client: a sentence at a time, 50 ms between answer and question."""
    out: list[float] = []
    with httpx.Client(timeout=600) as http:
        for i in range(most):
            if stop.is_set():
                break
            body = {"q": lines[i % len(lines)], "source": "de", "target": "en", "api_key": KEY}
            start = time.perf_counter()
            r = http.post(url + "/translate", json=body)
            out.append(time.perf_counter() - start)
            assert r.status_code == 200, r.text
            time.sleep(0.05)
    return out


def fairness(server: Server, dev: list[str], doc_lines: list[str], reference) -> dict:  # noqa: ANN001
    url = server.url
    interactive(url, dev, threading.Event(), 20)  # warm
    idle = interactive(url, dev, threading.Event(), 200)
    doc = ("\n".join(doc_lines) + "\n").encode()
    say(f"fair: the document alone ({len(doc_lines)} lines, {len(doc):,} bytes)")
    start = time.perf_counter()
    r = upload(url, "big.txt", doc)
    alone_s = time.perf_counter() - start
    assert r.status_code == 200, r.text
    got = httpx.get(r.json()["translatedFileUrl"], timeout=60).text.splitlines()
    same = sum(a == b for a, b in zip(got, reference(doc_lines)))
    say(f"fair: {alone_s:.1f} s alone, {same}/{len(doc_lines)} lines as the CLI's")
    stop, result = threading.Event(), {}

    def document() -> None:
        t0 = time.perf_counter()
        result["r"] = upload(url, "big.txt", doc)
        result["s"] = time.perf_counter() - t0
        stop.set()

    thread = threading.Thread(target=document)
    thread.start()
    time.sleep(0.5)  # uploaded, read and queued
    busy = interactive(url, dev, stop, 10**6)
    thread.join()
    assert result["r"].status_code == 200, result["r"].text
    return {
        "idle": idle,
        "busy": busy,
        "alone_s": alone_s,
        "with_s": result["s"],
        "same": same,
        "lines": len(doc_lines),
    }


# -- 3. soak ---------------------------------------------------------------------------------


def docx_of(lines: list[str]) -> bytes:
    import docx

    doc = docx.Document()
    for line in lines:
        doc.add_paragraph(line)
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


class Soak:
    """Clients that each pick an action at random, and what they saw."""

    def __init__(self, url: str, lines: list[str], want: dict[str, str], bomb: bytes) -> None:
        self.url, self.lines, self.want, self.bomb = url, lines, want, bomb
        self.rng = random.Random(0)
        self.seen: Counter[str] = Counter()
        self.wrong: list[str] = []
        self.errors_5xx: list[str] = []

    def check(self, what: str, r: httpx.Response, status: int = 200) -> bool:
        self.seen[f"{what} {r.status_code}"] += 1
        if r.status_code >= 500:
            self.errors_5xx.append(f"{what}: {r.status_code} {r.text[:200]}")
        elif r.status_code != status:
            self.wrong.append(f"{what}: {r.status_code}, not {status}: {r.text[:200]}")
        return r.status_code == status

    def same(self, what: str, got: list[str], sources: list[str]) -> None:
        for g, s in zip(got, sources):
            if g != self.want[s]:
                self.wrong.append(f"{what}: {s!r} -> {g!r}, the CLI: {self.want[s]!r}")

    async def one(self, http: httpx.AsyncClient) -> None:
        rng, url = self.rng, self.url
        some = rng.sample(self.lines, rng.randint(1, 4))
        action = rng.choice(
            [
                "text",
                "text",
                "json",
                "html",
                "txt",
                "srt",
                "html_file",
                "docx",
                "bad",
                "bad",
                "drop",
                "nokey",
            ]
        )
        if action == "text":
            r = await http.post(
                url + "/translate", json={"q": some, "source": "de", "target": "en", "api_key": KEY}
            )
            if self.check(action, r):
                self.same(action, r.json()["translatedText"], some)
        elif action == "json":
            r = await http.post(
                url + "/v1/translate", headers=AUTH, json={"items": [{"src": s} for s in some]}
            )
            if self.check(action, r):
                self.same(action, [x["translation"] for x in r.json()["items"]], some)
        elif action == "html":  # one line of <p> elements, the HTML path
            a = rng.randrange(0, len(self.lines), 4)
            q = "".join(f"<p>{s}</p>" for s in self.lines[a : a + rng.randint(1, 4)])
            r = await http.post(
                url + "/translate",
                json={"q": q, "source": "de", "target": "en", "format": "html", "api_key": KEY},
            )
            if self.check(action, r):
                self.same(action, [r.json()["translatedText"]], [q])
        elif action in ("txt", "srt", "html_file", "docx"):
            if action == "txt":
                name, data = "a.txt", ("\n".join(some) + "\n").encode()
            elif action == "srt":
                name = "a.srt"
                data = "".join(
                    f"{i + 1}\n00:00:0{i},000 --> 00:00:0{i},900\n{s}\n\n"
                    for i, s in enumerate(some)
                ).encode()
            elif action == "html_file":
                name, data = (
                    "a.html",
                    (
                        "<html><body>" + "".join(f"<p>{s}</p>" for s in some) + "</body></html>"
                    ).encode(),
                )
            else:
                name, data = "a.docx", docx_of(some)
            files = {"file": (name, data)}
            form = {"source": "de", "target": "en", "api_key": KEY}
            r = await http.post(url + "/translate_file", data=form, files=files)
            if self.check(action, r):
                out = await http.get(r.json()["translatedFileUrl"])
                if self.check(action + " download", out) and action == "txt":
                    self.same(action, out.text.splitlines(), some)
                elif action == "docx":
                    import docx

                    got = [p.text for p in docx.Document(io.BytesIO(out.content)).paragraphs]
                    self.same(action, got, some)
        elif action == "bad":
            kind = rng.choice(["json", "option", "items", "file", "docx", "bomb", "big"])
            if kind == "json":
                r = await http.post(url + "/v1/translate", headers=AUTH, content=b'{"items": [')
                self.check("bad json", r, 400)
            elif kind == "option":
                r = await http.post(
                    url + "/v1/translate",
                    headers=AUTH,
                    json={"items": [{"src": "a"}], "options": {"bem": 2}},
                )
                self.check("bad option", r, 422)
            elif kind == "items":
                r = await http.post(
                    url + "/v1/translate", headers=AUTH, json={"items": [{"src": "a"}] * 101}
                )
                self.check("too many items", r, 413)
            elif kind == "file":
                many = ("Ja.\n" * 1001).encode()
                r = await http.post(
                    url + "/translate_file",
                    files={"file": ("m.txt", many)},
                    data={"source": "de", "target": "en", "api_key": KEY},
                )
                self.check("too many lines", r, 413)
            elif kind == "docx":
                r = await http.post(
                    url + "/translate_file",
                    files={"file": ("b.docx", b"PK\3\4x")},
                    data={"source": "de", "target": "en", "api_key": KEY},
                )
                self.check("broken docx", r, 400)
            elif kind == "bomb":
                r = await http.post(
                    url + "/translate_file",
                    data={"source": "de", "target": "en", "api_key": KEY},
                    files={"file": ("z.docx", self.bomb)},
                )
                self.check("bomb", r, 413)
            else:
                r = await http.post(
                    url + "/v1/translate",
                    headers=AUTH,
                    content=b'{"items": [{"src": "' + b"a" * (5 * MIB) + b'"}]}',
                )
                self.check("body over the limit", r, 413)
        elif action == "nokey":
            r = await http.post(url + "/v1/translate", json={"items": [{"src": some[0]}]})
            self.check("no key", r, 401)
        else:  # a client that sends a request and goes
            await asyncio.to_thread(self.drop, some)
            self.seen["dropped connection"] += 1

    def drop(self, some: list[str]) -> None:
        host, port = self.url.removeprefix("http://").split(":")
        body = httpx.Request("POST", "/v1/translate", json={"items": [{"src": s} for s in some]})
        raw = body.read()
        head = (
            f"POST /v1/translate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
        )
        with socket.create_connection((host, int(port))) as s:
            s.sendall(head.encode() + raw)
            time.sleep(self.rng.random() * 0.05)


async def soak(server: Server, lines: list[str], want: dict[str, str], seconds: float) -> dict:
    pid = server.proc.pid
    state = Soak(server.url, lines, want, zip_bomb(100 * MIB))
    rss: list[tuple[float, float]] = []
    end = time.monotonic() + seconds
    start = time.monotonic()

    async def client() -> None:
        async with httpx.AsyncClient(timeout=600) as http:
            while time.monotonic() < end:
                try:
                    await state.one(http)
                except httpx.HTTPError as err:  # a lost answer
                    state.wrong.append(f"lost: {type(err).__name__}: {err}")

    async def sample() -> None:
        while time.monotonic() < end:
            rss.append((time.monotonic() - start, status_kib(pid, "VmRSS") / 1024))
            await asyncio.sleep(5)

    await asyncio.gather(sample(), *(client() for _ in range(8)))
    rss.append((time.monotonic() - start, status_kib(pid, "VmRSS") / 1024))
    warm = next((m for t, m in rss if t >= seconds / 10), rss[0][1])
    return {
        "seen": state.seen,
        "wrong": state.wrong,
        "5xx": state.errors_5xx,
        "rss_warm": warm,
        "rss_end": rss[-1][1],
        "rss_max": max(m for _, m in rss),
        "rss_minutes": [m for t, m in _each_minute(rss)],
    }


def _each_minute(rss: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The first sample of each minute, and the last: how RSS moved, not just where it ended."""
    out = [s for i, s in enumerate(rss) if i == 0 or int(s[0] // 60) > int(rss[i - 1][0] // 60)]
    return out if out[-1] is rss[-1] else [*out, rss[-1]]


# -- the report ------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--minutes", type=float, default=30, help="How long the soak runs.")
    parser.add_argument("--skip", default="", help="Parts to leave out: bombs,fair,soak.")
    parser.add_argument("--max-file-segments", type=int, default=1000)
    parser.add_argument("--max-file-chars", type=int, default=100_000)
    args = parser.parse_args()
    skip = set(args.skip.split(",")) - {""}
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "0")) or torch.get_num_threads())
    data = multi30k_dir()
    dev = [x.strip() for x in read_lines(data / "val.de.gz")]
    test = [x.strip() for x in read_lines(data / "test_2016_flickr.de.gz")]
    train = [x.strip() for x in read_lines(data / "train.de.gz")]
    doc_lines, chars = [], 0
    for line in train:  # the largest document the limits allow
        if len(doc_lines) == args.max_file_segments or chars + len(line) > args.max_file_chars:
            break
        doc_lines.append(line)
        chars += len(line)

    session = Session([args.checkpoint], "cpu")
    translator = session.translator(with_scores=True)
    split = Plan(split=session.source_language())

    def reference(sources: list[str]) -> list[str]:
        """What `mt translate` writes for each line (split into sentences, as the server)."""
        return [t.text for t in translator.translate([Request(s, plan=split) for s in sources])]

    html = Plan(html=True)
    pool = test[:300]
    want = dict(zip(pool, reference(pool)))
    for a in range(0, 300, 4):  # the html requests' answers: <p> fragments of 1 to 4 lines
        for n in range(1, 5):
            q = "".join(f"<p>{s}</p>" for s in pool[a : a + n])
            want[q] = translator.translate([Request(q, plan=html)])[0].text
    tmp = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    (tmp / "keys").write_text(KEY + "\n")
    print(f"# serve_soak: {args.checkpoint}")
    print(
        f"machine: {describe_machine()}; server OMP_NUM_THREADS=1; bench torch threads "
        f"{torch.get_num_threads()}"
    )
    server = start_server(
        args.checkpoint,
        "--device",
        "cpu",
        "--api-key-file",
        tmp / "keys",
        "--max-file-segments",
        args.max_file_segments,
        "--max-file-chars",
        args.max_file_chars,
        log=tmp / "server.log",
    )
    try:
        print(f"\nserver RSS at start: {status_kib(server.proc.pid, 'VmRSS') / 1024:.0f} MiB")
        if "bombs" not in skip:
            print("\n## 1. zip bombs\n\n| bomb | bytes | status | peak RSS growth | error |")
            print("|---|---:|---:|---:|---|")
            for what, size, status, error, grew in bombs(server):
                print(f"| {what} | {size:,} | {status} | {grew:.1f} MiB | {error} |")
        if "fair" not in skip:
            f = fairness(server, dev, doc_lines, reference)
            idle, busy = f["idle"], f["busy"]
            print(f"\n## 2. fairness: the largest document ({f['lines']} lines, {chars:,} chars)\n")
            print("| /translate, one sentence | requests | p50 ms | p99 ms |\n|---|---:|---:|---:|")
            for name, xs in (("idle", idle), ("while the document translates", busy)):
                print(
                    f"| {name} | {len(xs)} | {pct(xs, 0.5) * 1000:.0f} | "
                    f"{pct(xs, 0.99) * 1000:.0f} |"
                )
            print(
                f"\np99 busy / idle: {pct(busy, 0.99) / pct(idle, 0.99):.2f}x (target <= 2x); "
                f"p50 {statistics.median(busy) / statistics.median(idle):.2f}x. The document: "
                f"{f['alone_s']:.1f} s alone, {f['with_s']:.1f} s beside the client; "
                f"{f['same']}/{f['lines']} lines as the CLI's."
            )
        if "soak" not in skip:
            say(f"soak: {args.minutes} minutes")
            s = asyncio.run(soak(server, pool, want, args.minutes * 60))
            growth = (s["rss_end"] - s["rss_warm"]) / s["rss_warm"]
            print(f"\n## 3. soak: {args.minutes:g} minutes, 8 clients\n")
            print("| what | status | answers |\n|---|---:|---:|")
            for key, n in sorted(s["seen"].items()):
                what, _, status = key.rpartition(" ")
                print(f"| {what} | {status} | {n} |")
            print(
                f"\n{len(s['wrong'])} wrong or lost answers, {len(s['5xx'])} 5xx; RSS after "
                f"the first tenth {s['rss_warm']:.0f} MiB, at the end {s['rss_end']:.0f} MiB "
                f"({growth:+.1%}, target <= 10%), most {s['rss_max']:.0f} MiB; by minute: "
                + ", ".join(f"{m:.0f}" for m in s["rss_minutes"])
            )
            for line in (s["wrong"] + s["5xx"])[:20]:
                print(f"- {line}")
        print(f"\nload at the end: {os.getloadavg()[0]:.2f}")
    finally:
        rc = server.stop()
        log = server.log.read_text()
        print(f"server exit {rc}; tracebacks in its log: {log.count('Traceback')}")


if __name__ == "__main__":
    main()

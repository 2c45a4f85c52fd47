"""`mt serve` under load, beside `mt translate` on the same sentences, in the same run.

    python -m scripts.bench.serve /work/runs/recipe/best.pt \
        --src $MT_DATA/test_2016_flickr.de.gz [--limit 1000] [--soak-seconds 600]

1. The CLI: `mt translate --output-format jsonl` on the whole file in a child process (wall
   time, model load included), and the same Translator call in this process (translate time
   only), plus each sentence translated alone in this process (the 1-client reference).
2. A server (`mt serve` on a free loopback port) gets every sentence as its own request from
   1, 8, 32 and 128 concurrent clients: sentences/s and p50/p95/p99 latency. Every answer is
   compared with the CLI's translation of that sentence (text, byte for byte).
   The CLI and the server take turns over `--rounds` rounds (a shared VM is noisy).
3. Overload: 2x the server's queue limit at once; counts 503s and checks that every accepted
   request was answered correctly and the server still answers after.
4. Soak: `--soak-seconds` of 8 clients; the server's RSS after the first tenth and at the end.

Prints a Markdown report (for docs/benchmarks.md) with the machine's CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

REPO = Path(__file__).resolve().parents[2]

from mt.translation.requests import Plan, Request  # noqa: E402
from mt.translation.session import Session  # noqa: E402
from scripts.common import describe_machine, read_lines  # noqa: E402
from tests.support.processes import start_server  # noqa: E402


def asked(lines: list[str]) -> list[Request]:
    """Requests as the server's worker makes them from a body's items."""
    return [Request(x, plan=Plan()) for x in lines]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cli_round(ckpt: Path, src: Path) -> tuple[float, list[str]]:
    """`mt translate` on the file: wall seconds (load included) and each line's translation."""
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "mt", "translate", str(ckpt), "--device", "cpu",
         "--input", str(src), "--output-format", "jsonl"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return time.perf_counter() - start, [
        json.loads(x)["translation"] for x in out.stdout.splitlines()
    ]


async def load_round(url: str, lines: list[str], clients: int, want: list[str]) -> dict:
    """Every line as its own request from `clients` concurrent clients."""
    todo = list(enumerate(lines))
    latencies: list[float] = []
    wrong = lost = 0
    statuses: dict[int | str, int] = {}  # status codes, and errors by name

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal wrong, lost
        while todo:
            i, line = todo.pop()
            t0 = time.perf_counter()
            try:
                r = await http.post("/v1/translate", json={"items": [{"src": line}]})
            except httpx.HTTPError as err:
                lost += 1
                name = type(err).__name__
                statuses[name] = statuses.get(name, 0) + 1
                continue
            latencies.append(time.perf_counter() - t0)
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            if r.status_code != 200:
                lost += 1  # a 503 too: the load rounds stay under the queue limit
            elif r.json()["items"][0]["translation"] != want[i]:
                wrong += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=600) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        wall = time.perf_counter() - start
    return {
        "clients": clients,
        "sent_s": len(lines) / wall,
        "p50": pct(latencies, 0.50),
        "p95": pct(latencies, 0.95),
        "p99": pct(latencies, 0.99),
        "wrong": wrong,
        "lost": lost,
        "statuses": statuses,
    }


def batch_stats(url: str) -> tuple[float, float]:
    """(sentences, model calls) the server's workers have done so far (from /metrics)."""
    text = httpx.get(url + "/metrics", timeout=60).text
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("mt_batch"))
    return float(values["mt_batch_sentences_sum"]), float(values["mt_batch_sentences_count"])


async def overload(url: str, lines: list[str], n: int, want: dict[str, str]) -> dict:
    """`n` requests at once (2x the queue limit): 200s must be right, the rest 503."""
    async with httpx.AsyncClient(base_url=url, timeout=600,
                                 limits=httpx.Limits(max_connections=n)) as http:  # fmt: skip
        picks = [lines[i % len(lines)] for i in range(n)]
        answers = await asyncio.gather(
            *(http.post("/v1/translate", json={"items": [{"src": s}]}) for s in picks),
            return_exceptions=True,
        )
        after = await http.get("/health")
    counts = {"ok": 0, "503": 0, "other": 0, "wrong": 0}
    for s, r in zip(picks, answers):
        if isinstance(r, Exception):
            counts["other"] += 1
        elif r.status_code == 503:
            counts["503"] += 1
        elif r.status_code == 200:
            counts["ok"] += 1
            counts["wrong"] += r.json()["items"][0]["translation"] != want[s]
        else:
            counts["other"] += 1
    counts["healthy_after"] = after.status_code == 200
    return counts


async def soak(url: str, lines: list[str], seconds: float, pid: int) -> dict:
    end = time.monotonic() + seconds
    first_at = time.monotonic() + seconds / 10
    first: float | None = None
    sent = 0

    async def client(http: httpx.AsyncClient, k: int) -> None:
        nonlocal sent, first
        i = k
        while time.monotonic() < end:
            r = await http.post("/v1/translate", json={"items": [{"src": lines[i % len(lines)]}]})
            r.raise_for_status()
            sent += 1
            i += 8
            if first is None and time.monotonic() >= first_at:
                first = rss_mib(pid)

    async with httpx.AsyncClient(base_url=url, timeout=600) as http:
        await asyncio.gather(*(client(http, k) for k in range(8)))
    last = rss_mib(pid)
    first = first if first is not None else last
    return {"requests": sent, "rss_first": first, "rss_last": last,
            "growth": (last - first) / first}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    default_src = Path(os.environ.get("MT_DATA", "data")) / "test_2016_flickr.de.gz"
    parser.add_argument("--src", type=Path, default=default_src)
    parser.add_argument("--limit", type=int, default=0, help="First N sentences (0: all).")
    parser.add_argument("--clients", default="1,8,32,128")
    parser.add_argument(
        "--latency-limit", type=int, default=0,
        help="First N sentences for the 1-client round and one-sentence timing (0: all).",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--max-queue", type=int, default=256, help="The server's; above the most clients."
    )
    parser.add_argument("--batch-window-ms", type=float, default=5.0)
    parser.add_argument("--soak-seconds", type=float, default=600)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "0")) or torch.get_num_threads())

    lines = [x.strip() for x in read_lines(args.src)][: args.limit or None]
    clients = [int(c) for c in args.clients.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    src = tmp / "src.txt"
    src.write_text("".join(x + "\n" for x in lines), encoding="utf-8")

    session = Session([args.checkpoint], "cpu")
    translator = session.translator(with_scores=True)
    short = lines[: args.latency_limit or None]  # the 1-client round and one-sentence timing
    reference = [t.text for t in translator.translate(asked(lines))]  # what every answer must be

    def in_process_file() -> float:
        start = time.perf_counter()
        out = [t.text for t in translator.translate(asked(lines))]
        assert out == reference
        return len(lines) / (time.perf_counter() - start)

    def in_process_alone() -> tuple[float, int]:
        times, same = [], 0
        for line, want in zip(short, reference):
            t0 = time.perf_counter()
            same += translator.translate(asked([line]))[0].text == want
            times.append(time.perf_counter() - t0)
        return statistics.median(times), same

    print(f"# bench_serve: {len(lines)} sentences of {args.src.name}, {args.checkpoint}")
    print(f"machine: {describe_machine()}; torch threads {torch.get_num_threads()}; "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; the 1-client round "
          f"and one-sentence timing use the first {len(short)} sentences")  # fmt: skip
    server = start_server(
        args.checkpoint, "--device", "cpu", "--max-queue", args.max_queue,
        "--batch-window-ms", args.batch_window_ms, log=tmp / "server.log",
    )  # fmt: skip
    rows: list[dict] = []
    cli_rows: list[tuple[float, int]] = []
    files: list[float] = []
    alones: list[float] = []
    try:
        url = server.url
        for r in range(args.rounds):
            engines = ["file", "alone", "cli", *clients]
            for engine in engines if r % 2 == 0 else reversed(engines):
                if engine == "file":
                    files.append(in_process_file())
                    print(f"round {r + 1} in process, file: {files[-1]:.1f} sent/s", flush=True)
                elif engine == "alone":
                    median, same = in_process_alone()
                    alones.append(median)
                    print(f"round {r + 1} in process, one sentence alone: median "
                          f"{1000 * median:.1f} ms; text as in the file: {same}/{len(short)}",
                          flush=True)  # fmt: skip
                elif engine == "cli":
                    wall, cli_out = cli_round(args.checkpoint, src)
                    cli_rows.append((wall, sum(a != b for a, b in zip(cli_out, reference))))
                    print(f"round {r + 1} cli: {len(lines) / wall:.1f} sent/s (process wall, load "
                          f"included), {cli_rows[-1][1]} lines differ", flush=True)  # fmt: skip
                else:
                    todo = short if engine == 1 else lines
                    before = batch_stats(url)
                    row = asyncio.run(load_round(url, todo, engine, reference))
                    after = batch_stats(url)
                    row["round"] = r + 1
                    row["mean_batch"] = (after[0] - before[0]) / max(1, after[1] - before[1])
                    rows.append(row)
                    print(f"round {r + 1} serve {engine:>3} clients: {row['sent_s']:.1f} sent/s, "
                          f"p50 {row['p50'] * 1000:.0f} ms, wrong {row['wrong']}, lost "
                          f"{row['lost']}, statuses {row['statuses']}, "
                          f"{row['mean_batch']:.1f} sentences per call", flush=True)  # fmt: skip
        want = dict(zip(lines, reference))
        over = asyncio.run(overload(url, lines, 2 * args.max_queue, want))
        soaked = (
            asyncio.run(soak(url, lines, args.soak_seconds, server.proc.pid))
            if args.soak_seconds > 0
            else None
        )
    finally:
        rc = server.stop()

    file_rate = max(files)  # each engine by its best round
    print("\n| engine | clients | sentences/s | vs CLI in-process | p50 ms | p95 ms | p99 ms | "
          "wrong | lost | sentences per model call |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k, rate in enumerate(files):
        print(f"| mt translate in process (translate only), round {k + 1} | - | {rate:.1f} | "
              f"{rate / file_rate:.2f} | - | - | - | 0 | 0 | - |")  # fmt: skip
    for wall, diff in cli_rows:
        print(f"| mt translate (process, load included) | - | {len(lines) / wall:.1f} | "
              f"{len(lines) / wall / file_rate:.2f} | - | - | - | {diff} | 0 | - |")  # fmt: skip
    for row in rows:
        print(f"| mt serve, round {row['round']} | {row['clients']} | {row['sent_s']:.1f} | "
              f"{row['sent_s'] / file_rate:.2f} | {row['p50'] * 1000:.0f} | "
              f"{row['p95'] * 1000:.0f} | {row['p99'] * 1000:.0f} | {row['wrong']} | "
              f"{row['lost']} | {row['mean_batch']:.1f} |")  # fmt: skip
    one = min(alones)
    p50_1 = min(r["p50"] for r in rows if r["clients"] == 1) if 1 in clients else float("nan")
    print(f"\n1 client: best round p50 {p50_1 * 1000:.1f} ms vs one sentence in process (best "
          f"round's median) {one * 1000:.1f} ms: {p50_1 / one:.2f}x (target <= 1.3x)")  # fmt: skip
    if 32 in clients:
        best32 = max(r["sent_s"] for r in rows if r["clients"] == 32)
        print(f"32 clients: {best32 / file_rate:.2f}x the CLI's in-process sentences/s "
              "(target >= 0.8x)")  # fmt: skip
    print(f"overload ({2 * args.max_queue} requests at once, queue limit {args.max_queue}): "
          f"{over['ok']} answered ({over['wrong']} wrong), {over['503']} x 503, "
          f"{over['other']} other; healthy after: {over['healthy_after']}")  # fmt: skip
    if soaked:
        print(f"soak {args.soak_seconds:.0f} s, 8 clients, {soaked['requests']} requests: RSS "
              f"{soaked['rss_first']:.0f} MiB after the first tenth, {soaked['rss_last']:.0f} MiB "
              f"at the end ({100 * soaked['growth']:+.1f}%)")  # fmt: skip
    print(f"server exit code after SIGTERM: {rc}")


if __name__ == "__main__":
    main()

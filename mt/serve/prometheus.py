"""The server's counters in the Prometheus text format, written by hand (no client library).

Requests and errors by route and status, request latency and batch sizes as histograms, the
queue depth as a gauge, and each document being translated with its texts done so far.
Workers run in threads, so every update takes one lock.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter

from mt.translation.doubt import FLAGS

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Histogram:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.n += 1

    def lines(self, name: str, labels: str = "") -> list[str]:
        out, total = [], 0
        sep = "," if labels else ""
        for bound, count in zip([*map(_num, self.bounds), "+Inf"], self.counts):
            total += count
            out.append(f'{name}_bucket{{{labels}{sep}le="{bound}"}} {total}')
        tag = f"{{{labels}}}" if labels else ""
        out += [f"{name}_sum{tag} {self.sum:.6f}", f"{name}_count{tag} {self.n}"]
        return out


def _label(value: str) -> str:
    """A label value as the text format escapes it (a client's file name), kept short."""
    value = value[:100]
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


class Metrics:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: Counter[tuple[str, int]] = Counter()  # (route, status)
        self.latency: dict[str, Histogram] = {}
        self.batches = Histogram(BATCH_BUCKETS)
        self.sentences = 0
        self.dropped = 0  # sentences never translated because their client had gone
        self.queue_depth: dict[str, int] = {}  # model -> queued sentences
        self.answered = 0  # translations answered (items, after sentences are joined)
        self.flagged: Counter[str] = Counter()  # doubt flag -> translations that carry it
        self.documents: dict[tuple[str, str], list] = {}  # (model, id) -> [file, total, done]
        self.document_texts = 0  # texts of documents translated

    def request(self, route: str, status: int, seconds: float) -> None:
        with self.lock:
            self.requests[route, status] += 1
            self.latency.setdefault(route, Histogram(LATENCY_BUCKETS)).observe(seconds)

    def batch(self, size: int) -> None:
        with self.lock:
            self.batches.observe(size)
            self.sentences += size

    def doubts(self, flags: list[list[str]]) -> None:
        """The doubt flags of answered translations (mt.translation.doubt), one list each."""
        with self.lock:
            self.answered += len(flags)
            for each in flags:
                self.flagged.update(each)

    def drop(self, size: int) -> None:
        with self.lock:
            self.dropped += size

    def queue(self, model: str, depth: int) -> None:
        with self.lock:
            self.queue_depth[model] = depth

    def document(self, model: str, ident: str, file: str, texts: int) -> None:
        """A document queued for `model`: `texts` to translate."""
        with self.lock:
            self.documents[model, ident] = [file, texts, 0]

    def document_done(self, model: str, ident: str, texts: int) -> None:
        with self.lock:
            self.document_texts += texts
            if (model, ident) in self.documents:
                self.documents[model, ident][2] += texts

    def document_end(self, model: str, ident: str) -> None:
        with self.lock:
            self.documents.pop((model, ident), None)

    def text(self) -> str:
        with self.lock:
            out = [
                "# HELP mt_requests_total HTTP requests answered, by route and status.",
                "# TYPE mt_requests_total counter",
            ]
            for (route, status), n in sorted(self.requests.items()):
                out.append(f'mt_requests_total{{route="{route}",status="{status}"}} {n}')
            out += [
                "# HELP mt_errors_total HTTP requests answered with a 4xx or 5xx status.",
                "# TYPE mt_errors_total counter",
            ]
            errors: Counter[str] = Counter()
            for (route, status), n in self.requests.items():
                if status >= 400:
                    errors[route] += n
            for route, n in sorted(errors.items()):
                out.append(f'mt_errors_total{{route="{route}"}} {n}')
            out += [
                "# HELP mt_request_seconds Time from a request's arrival to its answer.",
                "# TYPE mt_request_seconds histogram",
            ]
            for route, hist in sorted(self.latency.items()):
                out += hist.lines("mt_request_seconds", f'route="{route}"')
            out += [
                "# HELP mt_batch_sentences Sentences per model call of the batching workers.",
                "# TYPE mt_batch_sentences histogram",
                *self.batches.lines("mt_batch_sentences"),
                "# HELP mt_sentences_total Sentences translated.",
                "# TYPE mt_sentences_total counter",
                f"mt_sentences_total {self.sentences}",
                "# HELP mt_dropped_sentences_total Sentences dropped: their client had gone.",
                "# TYPE mt_dropped_sentences_total counter",
                f"mt_dropped_sentences_total {self.dropped}",
                "# HELP mt_translations_total Translations answered (a split item counts once).",
                "# TYPE mt_translations_total counter",
                f"mt_translations_total {self.answered}",
                "# HELP mt_doubtful_translations_total Translations answered with a doubt flag.",
                "# TYPE mt_doubtful_translations_total counter",
                *(f'mt_doubtful_translations_total{{flag="{f}"}} {self.flagged[f]}' for f in FLAGS),
                "# HELP mt_queue_sentences Sentences waiting for a model.",
                "# TYPE mt_queue_sentences gauge",
            ]
            for model, depth in sorted(self.queue_depth.items()):
                out.append(f'mt_queue_sentences{{model="{model}"}} {depth}')
            out += [
                "# HELP mt_documents_in_progress Documents being translated (/translate_file).",
                "# TYPE mt_documents_in_progress gauge",
            ]
            for model in sorted(set(self.queue_depth) | {m for m, _ in self.documents}):
                n = sum(m == model for m, _ in self.documents)
                out.append(f'mt_documents_in_progress{{model="{model}"}} {n}')
            out += [
                "# HELP mt_document_texts Texts of each document being translated: all, done.",
                "# TYPE mt_document_texts gauge",
            ]
            for (model, ident), (file, total, done) in sorted(self.documents.items()):
                labels = f'model="{model}",document="{ident}",file="{_label(file)}"'
                out.append(f'mt_document_texts{{{labels},state="total"}} {total}')
                out.append(f'mt_document_texts{{{labels},state="done"}} {done}')
            out += [
                "# HELP mt_document_texts_total Texts of documents translated.",
                "# TYPE mt_document_texts_total counter",
                f"mt_document_texts_total {self.document_texts}",
            ]
        return "\n".join(out) + "\n"

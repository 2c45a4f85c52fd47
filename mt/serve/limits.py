"""What one request may ask of the server, and the error a client gets when it asks too much.

The defaults are what a public service would pick (LibreTranslate's and DeepL's free tiers are
of this order): a request is a paragraph or a page, not a book, and the queue is short enough
that a queued sentence is answered in seconds, not minutes. An uploaded document is a few dozen
pages: its texts go against limits of their own and wait in the same queue. Over a limit, the
answer names it, so a client knows which knob it hit.
"""

from __future__ import annotations

from dataclasses import dataclass

from mt.serve.documents import DocumentLimits
from mt.serve.unzip import ZipLimits


@dataclass(frozen=True)
class Limits:
    max_items: int = 100  # sentences in one request (413 max_items)
    max_chars: int = 5000  # characters in one sentence, prefix or target (413 max_chars)
    max_queue: int = 2000  # sentences waiting for a model, all requests together (503 max_queue)
    max_body_bytes: int = 4 << 20  # bytes of one request body (413 max_body_bytes)
    batch_window_ms: float = 5.0  # how long a worker waits to pool the sentences of requests
    max_glossary_entries: int = 10000  # entries of one glossary, inline or uploaded (413)
    max_file_segments: int = 1000  # texts (lines, paragraphs...) of a document, <= max_queue
    max_file_chars: int = 100_000  # characters of one document's texts (413 max_file_chars)
    max_unzipped_bytes: int = 32 << 20  # what a .docx may unzip to (413 max_unzipped_bytes)

    def check(self) -> None:
        for name in ("max_items", "max_chars", "max_queue", "max_body_bytes",
                     "max_glossary_entries", "max_file_segments", "max_file_chars",
                     "max_unzipped_bytes"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not 0 <= self.batch_window_ms <= 1000:
            raise ValueError("batch_window_ms must be between 0 and 1000")

    def document(self) -> DocumentLimits:
        """What one uploaded document may hold: never more texts than the queue takes."""
        return DocumentLimits(
            min(self.max_file_segments, self.max_queue),
            self.max_file_chars,
            self.max_chars,
            ZipLimits(max_unzipped_bytes=self.max_unzipped_bytes),
        )


class ApiError(Exception):
    """A request the server refuses: an HTTP status, one line for the client, and the name of
    the limit it went over (None for plain bad input)."""

    def __init__(self, status: int, message: str, limit: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.limit = limit

    def body(self) -> dict[str, str]:
        out = {"error": self.message}
        if self.limit is not None:
            out["limit"] = self.limit
        return out


def check_text(text: str, where: str, limits: Limits) -> None:
    """One string of a request against max_chars."""
    if len(text) > limits.max_chars:
        raise ApiError(
            413,
            f"{where} has {len(text)} characters; the limit is {limits.max_chars}",
            "max_chars",
        )


def check_count(n: int, limits: Limits) -> None:
    """The number of sentences of one request against max_items."""
    if n > limits.max_items:
        raise ApiError(
            413, f"{n} items in one request; the limit is {limits.max_items}", "max_items"
        )
    if n == 0:
        raise ApiError(422, "'items' is empty")

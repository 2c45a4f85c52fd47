"""Subtitles (.srt) as a document: each subtitle's text translated, its numbering and timing
kept, and its translation written on as many lines as the subtitle had."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from mt.errors import MtError


class Gather(Protocol):
    """What collects a document's texts (mt.serve.documents.Texts)."""

    def hold(self, n: int) -> None: ...

    def text(self, text: str) -> Callable[[], str]: ...


def read_srt(text: str, texts: Gather) -> Callable[[], str]:
    import srt

    subs, lines, parts = [], [], []
    try:
        for sub in srt.parse(text):  # read one by one: a limit stops it early
            texts.hold(len(subs) + 1)
            ls = sub.content.splitlines() or [""]
            subs.append(sub)
            lines.append(len(ls))
            parts.append(texts.text(" ".join(x.strip() for x in ls)))
    except srt.SRTParseError as err:
        raise MtError(f"not an SRT file ({err})") from None

    def write() -> str:
        for sub, n, part in zip(subs, lines, parts):
            sub.content = "\n".join(rewrap(part(), n))
        return srt.compose(subs, reindex=False)

    return write


def rewrap(text: str, n: int) -> list[str]:
    """`text` on `n` lines (at most one per word), each break at the word end nearest to an
    even share of the characters."""
    words = text.split()
    n = min(n, len(words))
    if n <= 1:
        return [text]
    ends = [len(" ".join(words[: i + 1])) for i in range(len(words))]
    total, cuts, prev = ends[-1], [], -1
    for k in range(1, n):
        room = range(prev + 1, len(words) - (n - k))  # a word left for every later line
        prev = min(room, key=lambda i: abs(ends[i] - k * total / n))
        cuts.append(prev)
    bounds = [-1, *cuts, len(words) - 1]
    return [" ".join(words[a + 1 : b + 1]) for a, b in zip(bounds, bounds[1:])]

"""The metrics log: one call writes a record to every sink.

A record is one flat dict per log interval or evaluation (`step`, `loss`, `lr`, `valid_loss`,
`dev_bleu`, ...). The trainer builds it once and hands it to `MetricsLog.write`; each sink
(`metrics.jsonl` always, TensorBoard when on) turns it into its own format. So a value logged
in one place is logged in all of them, at the same step, without a second call site to forget.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Protocol

from mt.errors import MtError


class Sink(Protocol):
    """Where records go; `flush` puts what the sink buffers on disk, `close` too and ends."""

    def write(self, record: dict[str, Any]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def strict(value: Any) -> Any:
    """JSON has no NaN or Infinity: a non-finite number is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlSink:
    """Appends one JSON object per line to `metrics.jsonl` (kept across resumes).

    Strict JSON (`null` for a non-finite value), so any JSON parser reads every line. The file
    is opened per record: a run killed at any moment leaves whole lines behind.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps({k: strict(v) for k, v in record.items()}, allow_nan=False)
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as err:
            raise MtError(f"{self.path}: cannot write metrics ({err.strerror or err})") from None

    def flush(self) -> None:
        pass  # every record is on disk once written

    def close(self) -> None:
        pass


class MetricsLog:
    """The one place the trainer writes records to; fans each out to every sink."""

    def __init__(self, sinks: list[Sink]) -> None:
        self.sinks = sinks

    def write(self, record: dict[str, Any]) -> None:
        for sink in self.sinks:
            sink.write(record)

    def flush(self) -> None:
        """Before a checkpoint: every record up to its step is on disk, so a resumed run
        (which starts after that step) never has a gap."""
        for sink in self.sinks:
            sink.flush()

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

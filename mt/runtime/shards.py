"""One input file decoded by many processes: line-range chunks, each written once, then merged.

`torchrun --nproc_per_node=N -m mt translate CKPT --input BIG --output OUT` (or N array jobs
with `--shard K/N`, K = 0..N-1) cuts BIG into chunks of `chunk_lines` lines; process K takes
chunks K, K+N, K+2N, ... Finding the chunks is one pass that notes the byte offset of every
chunk's first line, so a process then seeks straight to its chunks and reads only them: memory
holds one chunk, never the file.

Each chunk's output is written atomically to `OUT.parts/NNNNNNNN` and never written again: a
job started again (preempted, killed, requeued) skips the chunks that exist. The process that
finds every chunk written concatenates them into OUT (atomically) and removes the folder, so OUT
is the one-process output in input order. Chunk boundaries fall on multiples of the decoder's
`buffer_lines`, so each chunk's sentences are batched exactly as one process batches them and
the output is byte-identical (sampling aside: its draws continue across buffers).

`OUT.parts/job.json` records the input and the settings; chunks of another job (other options
or a changed input) are refused rather than mixed.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from mt.atomic import write_text, write_with
from mt.data.corpus import chunk_offsets, line_range
from mt.errors import MtError

MANIFEST = "job.json"


@dataclass(frozen=True)
class Shard:
    """This process's share: chunks `index`, `index + count`, ..."""

    index: int
    count: int


def parse_shard(text: str) -> Shard:
    """`K/N` with 0 <= K < N (Slurm: `--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT`
    for an array 0..N-1)."""
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise MtError(f"--shard must be K/N (e.g. 0/4), got {text!r}") from None
    if not 0 <= k < n:
        raise MtError(f"--shard K/N needs 0 <= K < N, got {text!r}")
    return Shard(k, n)


def this_shard(flag: str | None) -> Shard | None:
    """The share of this process: `--shard`, else its rank under torchrun (WORLD_SIZE > 1),
    else None (one process decodes everything, as before)."""
    if flag is not None:
        return parse_shard(flag)
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world > 1 and "RANK" in os.environ:
        return Shard(int(os.environ["RANK"]), world)
    return None


# (first line number, the lines of each input for this chunk, output stream)
Work = Callable[[int, list[list[str]], TextIO], object]


class ChunkedJob:
    """The chunks of `inputs` (line-aligned files) that this shard writes into `output`."""

    def __init__(
        self, inputs: list[Path], output: Path, chunk_lines: int, settings: dict, shard: Shard
    ) -> None:
        for path in inputs:
            if path.suffix == ".gz":
                raise MtError(f"{path}: decoding over several processes needs an uncompressed file")
        self.inputs, self.output, self.shard = inputs, output, shard
        self.chunk_lines = chunk_lines
        plans = [chunk_offsets(p, chunk_lines) for p in inputs]
        self.lines = plans[0][1]
        for path, (_, n) in zip(inputs[1:], plans[1:]):
            if n != self.lines:
                raise MtError(f"{inputs[0]} has {self.lines} lines but {path} has {n}")
        self.offsets = [offsets for offsets, _ in plans]
        self.chunks = len(self.offsets[0])
        self.parts = output.with_name(output.name + ".parts")
        self._check_manifest(settings)

    def _check_manifest(self, settings: dict) -> None:
        """Create `OUT.parts/job.json`, or make sure the one there describes this job."""
        files = [{"path": str(p.resolve()), "size": p.stat().st_size} for p in self.inputs]
        files = [{**f, "mtime_ns": p.stat().st_mtime_ns} for f, p in zip(files, self.inputs)]
        job = {"inputs": files, "chunk_lines": self.chunk_lines, "settings": settings}
        text = json.dumps(job, sort_keys=True, indent=1) + "\n"
        manifest = self.parts / MANIFEST
        try:
            self.parts.mkdir(parents=True, exist_ok=True)
            if not manifest.exists():
                write_text(manifest, text, "the job description")
        except OSError as err:
            raise MtError(f"{self.parts}: cannot create ({err.strerror or err})") from None
        try:
            same = manifest.read_text(encoding="utf-8") == text
        except FileNotFoundError:  # merged and removed by a faster process meanwhile
            same = True
        if not same:
            raise MtError(
                f"{self.parts}: holds chunks of another job (other input or settings); "
                "remove the folder to start again"
            )

    def chunk_path(self, i: int) -> Path:
        return self.parts / f"{i:08d}"

    def pending_lines(self) -> int:
        """Lines of this shard's chunks not written yet: what `run` will do."""
        mine = range(self.shard.index, self.chunks, self.shard.count)
        return sum(self._count(i) for i in mine if not self.chunk_path(i).exists())

    def _count(self, i: int) -> int:
        return min(self.chunk_lines, self.lines - i * self.chunk_lines)

    def run(self, work: Work, what: str, written: Callable[[int], object] | None = None) -> None:
        """Write this shard's missing chunks with `work`, then merge if every chunk exists;
        `written(lines)` hears of each chunk written (a progress line)."""
        made = skipped = 0
        for i in range(self.shard.index, self.chunks, self.shard.count):
            path = self.chunk_path(i)
            if path.exists():
                skipped += 1
                continue
            first, count = i * self.chunk_lines, self._count(i)
            lines = [
                line_range(p, offsets[i], count, first)
                for p, offsets in zip(self.inputs, self.offsets)
            ]
            write_with(path, f"chunk {i}", lambda out, a=first, b=lines: work(a, b, out), mode="w")
            made += 1
            if written is not None:
                written(count)
        merged = self.merge()
        note = f"merged {self.chunks} chunks into {self.output}" if merged else "others not done"
        print(
            f"{what} shard {self.shard.index}/{self.shard.count}: {made} chunks written, "
            f"{skipped} found done; {note}",
            file=sys.stderr,
            flush=True,
        )

    def merge(self) -> bool:
        """Concatenate the chunks into the output once all exist (one process does it)."""
        if any(not self.chunk_path(i).exists() for i in range(self.chunks)):
            return False
        try:
            lock = open(self.parts / ".merge", "a")  # noqa: SIM115
        except FileNotFoundError:
            return False  # another process merged and removed the folder
        with lock:
            fcntl.lockf(lock.fileno(), fcntl.LOCK_EX)
            if not (self.parts / MANIFEST).exists():
                return False  # merged while this process waited for the lock

            def concatenate(out: TextIO) -> None:
                for i in range(self.chunks):
                    with self.chunk_path(i).open("rb") as part:
                        shutil.copyfileobj(part, out)

            write_with(self.output, "the output", concatenate)
            (self.parts / MANIFEST).unlink()
            shutil.rmtree(self.parts, ignore_errors=True)
        return True

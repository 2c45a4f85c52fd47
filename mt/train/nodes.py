"""Before the first step, on every node: the run directory, the tokenizer and the token stores.

Nodes of a multi-node job need not share a filesystem. Global rank 0 alone takes the run
directory (its lock, the tokenizer, later the checkpoints and logs) and sends the tokenizer to
every other process over the process group, as the serialized sentencepiece models; no process
reads rank 0's files. Each node's local rank 0 then builds or checks that node's token stores in
the node's cache folder (`data.cache_dir`, else env MT_CACHE, else `{run_dir}/cache`) while the
node's other ranks wait, then map what it built. On one node this is the single-node order:
rank 0 prepares, the others map.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from mt.config import DataConfig, TokenizerConfig
from mt.data.prepare import Prepared, prepare, prepare_tokenizer
from mt.tokenizer import Tokenizer
from mt.train import distributed, finetune
from mt.train.distributed import Dist
from mt.train.resume import record_job
from mt.train.rundir import RunLock, lock_run_dir, refuse_finished_run

_LENGTH = 8  # bytes of the source model's length in `pack`


def pack(tok: Tokenizer) -> bytes:
    """The tokenizer's models as one byte string: source length, source, target length,
    target (empty when joint), then an imported model's piece tables as JSON (or nothing)."""
    target = b"" if tok.joint else tok.tgt_proto
    tables = json.dumps(tok.pieces).encode("utf-8") if tok.pieces is not None else b""
    parts = b""
    for blob in (tok.src_proto, target):
        parts += len(blob).to_bytes(_LENGTH, "little") + blob
    return parts + tables


def unpack(data: bytes) -> Tokenizer:
    blobs, i = [], 0
    for _ in range(2):
        n = int.from_bytes(data[i : i + _LENGTH], "little")
        blobs.append(data[i + _LENGTH : i + _LENGTH + n])
        i += _LENGTH + n
    tables = json.loads(data[i:]) if data[i:] else None
    pieces = (tables[0], tables[1]) if tables is not None else None
    return Tokenizer(blobs[0], blobs[1] or None, None, pieces)


def prepare_run(
    data: DataConfig,
    tok: TokenizerConfig,
    seed: int,
    run_dir: Path,
    resume: bool,
    d: Dist,
    device: torch.device,
    init: finetune.Init | None,
) -> tuple[Prepared, RunLock | None]:
    """The tokenizer and this node's stores for this process, and the run directory's lock
    (held by global rank 0, None elsewhere); the sections and seed are `prepare`'s."""
    lock, packed = None, None
    if d.main:
        lock = lock_run_dir(run_dir, "train")
        refuse_finished_run(run_dir, resume)
        record_job(run_dir)
        finetune.write_tokenizer(init, run_dir)
        packed = pack(prepare_tokenizer(data, tok, seed, run_dir))
    packed = distributed.broadcast_bytes(d, packed, device)
    assert packed is not None
    tokenizer = unpack(packed)
    prepared: Prepared | None = None
    for turn in (True, False):
        if d.node_main == turn:
            prepared = prepare(data, tok, seed, run_dir, turn, turn, tokenizer)
        distributed.barrier(d)
    assert prepared is not None
    return prepared, lock

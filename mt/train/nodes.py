"""Before the first step, on every node: the run directory, the tokenizer and the token stores.

Nodes of a multi-node job need not share a filesystem. Global rank 0 alone takes the run
directory (its lock, the tokenizer and the text statistics, later the checkpoints and logs) and
sends the tokenizer to every other process over the process group, as the serialized
sentencepiece models with the statistics; no process reads rank 0's files. Each node's local
rank 0 then builds or checks that node's token stores in the node's cache folder
(`data.cache_dir`, else env MT_CACHE, else `{run_dir}/cache`) while the node's other ranks wait,
then map what it built. On one node this is the single-node order: rank 0 prepares, the others
map.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from mt.config import DataConfig, TokenizerConfig
from mt.data.prepare import Prepared, prepare, prepare_text_stats, prepare_tokenizer
from mt.textstats import TextStats
from mt.tokenizer import Tokenizer
from mt.train import distributed, finetune
from mt.train.distributed import Dist
from mt.train.resume import record_job
from mt.train.rundir import RunLock, lock_run_dir, refuse_finished_run

_LENGTH = 8  # bytes of the source model's length in `pack`


def pack(tok: Tokenizer) -> bytes:
    """The tokenizer as one byte string: source length, source, target length, target (empty
    when joint), then one JSON object with an imported model's piece tables and the training
    text's statistics (mt/textstats.py), where it has them. The statistics travel with it
    because they are counted and kept in the run directory, which is global rank 0's alone:
    another node has none to read or write them in."""
    target = b"" if tok.joint else tok.tgt_proto
    extra: dict = {}
    if tok.pieces is not None:
        extra["pieces"] = tok.pieces
    if tok.text_stats is not None:
        extra["text_stats"] = tok.text_stats.to_dict()
    parts = b""
    for blob in (tok.src_proto, target):
        parts += len(blob).to_bytes(_LENGTH, "little") + blob
    return parts + json.dumps(extra, ensure_ascii=False).encode("utf-8")


def unpack(data: bytes) -> Tokenizer:
    """`pack`'s tokenizer, statistics and all."""
    blobs, i = [], 0
    for _ in range(2):
        n = int.from_bytes(data[i : i + _LENGTH], "little")
        blobs.append(data[i + _LENGTH : i + _LENGTH + n])
        i += _LENGTH + n
    extra = json.loads(data[i:])
    tables = extra.get("pieces")
    pieces = (tables[0], tables[1]) if tables is not None else None
    stats = TextStats.from_dict(extra["text_stats"]) if "text_stats" in extra else None
    return Tokenizer(blobs[0], blobs[1] or None, None, pieces, stats)


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
        tokenizer = prepare_tokenizer(data, tok, seed, run_dir)
        tokenizer.text_stats = prepare_text_stats(data, run_dir, True, True)
        packed = pack(tokenizer)
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

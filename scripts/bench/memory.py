"""Memory of the processes scripts/bench/data.py measures, read from /proc: each process's RSS
and PSS split into the pages of files under one folder (a memory-mapped store) and the rest, and
the processes of one measurement added up."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

MIB = 2**20


def _kib(line: str) -> int:
    return int(line.split()[1])


def process_memory(pid: int, store: Path) -> dict[str, float]:
    """RSS, PSS and anonymous memory of `pid` in MiB, in total and for files under `store`.

    PSS divides each shared page by the number of processes mapping it, so the store PSS of all
    processes adds up to the store pages resident once, however many processes map them.
    Anonymous memory is what no other process could share by mapping a file: heap, Python
    objects, tensors (and pages a forked loader worker still shares copy-on-write).
    """
    prefix = str(store.resolve()) + "/"
    total: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(("Rss:", "Pss:", "Anonymous:")):
            total[line.split(":")[0]] = _kib(line)
    store_rss = store_pss = 0
    in_store = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", head[0]):  # a mapping's header line
            in_store = len(head) == 6 and head[5].startswith(prefix)
        elif in_store and line.startswith("Rss:"):
            store_rss += _kib(line)
        elif in_store and line.startswith("Pss:"):
            store_pss += _kib(line)
    rss, pss = total.get("Rss", 0), total.get("Pss", 0)
    return {
        "pid": pid,
        "rss": rss / 1024,
        "pss": pss / 1024,
        "anon": total.get("Anonymous", 0) / 1024,
        "store_rss": store_rss / 1024,
        "store_pss": store_pss / 1024,
        "rss_excl_store": (rss - store_rss) / 1024,
    }


def summarize(trainers: list[dict], loaders: list[dict], store_bytes: int) -> dict[str, Any]:
    """Per-trainer means and sums over all processes; loader workers are kept apart."""

    def mean(rows: list[dict], key: str) -> float:
        return sum(r[key] for r in rows) / len(rows) if rows else 0.0

    def total(rows: list[dict], key: str) -> float:
        return sum(r[key] for r in rows)

    everyone = trainers + loaders
    return {
        "trainers": len(trainers),
        "loader_workers": len(loaders),
        "trainer_rss_mib": mean(trainers, "rss"),
        "trainer_rss_excl_store_mib": mean(trainers, "rss_excl_store"),
        "trainer_anon_mib": mean(trainers, "anon"),
        "trainer_store_rss_mib": mean(trainers, "store_rss"),
        "trainer_pss_mib": mean(trainers, "pss"),
        "store_pss_trainers_mib": total(trainers, "store_pss"),
        "loader_rss_excl_store_mib": mean(loaders, "rss_excl_store"),
        "loader_anon_mib": mean(loaders, "anon"),
        "loader_pss_mib": total(loaders, "pss"),
        "store_pss_all_mib": total(everyone, "store_pss"),
        "total_pss_mib": total(everyone, "pss"),
        "store_on_disk_mib": store_bytes / MIB,
    }

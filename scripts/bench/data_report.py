"""The report of scripts/bench/data.py: derived figures, and the table of the current code
beside a baseline commit with their ratios."""

from __future__ import annotations

from typing import Any

# -- report ------------------------------------------------------------------------------------


def get(results: dict[str, Any], path: str) -> float | None:
    value: Any = results
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def derive(results: dict[str, Any], pairs: int, nproc: int) -> None:
    """Figures computed from others, so that the table and the JSON show the same numbers."""
    cold, warm = get(results, "cold.seconds"), get(results, "warm_1.first_step_s")
    if cold is not None and warm is not None:
        net = cold - warm
        results["cold"]["minus_warm_start_s"] = net
        results["cold"]["net_pairs_per_s"] = pairs / net if net > 0 else None
    multi = results.get(f"warm_{nproc}", {})
    pss = get(results, f"warm_{nproc}.summary.store_pss_all_mib")
    if pss is not None:
        disk = multi["summary"]["store_on_disk_mib"]
        one = get(results, "warm_1.summary.store_pss_all_mib")
        multi["store_pss_over_disk"] = pss / disk if disk else None
        multi["store_pss_over_1proc"] = pss / one if one else None


def rows(nproc: int) -> list[tuple[str, str, str, bool]]:
    """(label, result path, format, show current/baseline)."""
    one, many = "warm_1.summary.", f"warm_{nproc}.summary."
    n = f"{nproc} procs:"
    return [
        ("prepare: seconds", "prepare.seconds", ".1f", True),
        ("prepare: pairs/s", "prepare.pairs_per_s", ",.0f", True),
        ("prepare: peak RSS MiB", "prepare.peak_rss_mib", ",.0f", True),
        ("prepare: store build s (its own log)", "prepare.store_build_s_logged", ".1f", False),
        ("cold train to step 1: seconds", "cold.seconds", ".1f", True),
        ("cold train to step 1: peak RSS MiB", "cold.peak_rss_mib", ",.0f", True),
        ("cold minus warm start: seconds", "cold.minus_warm_start_s", ".1f", True),
        ("cold minus warm start: pairs/s", "cold.net_pairs_per_s", ",.0f", True),
        ("train store: MiB on disk", "store.bytes_mib", ",.1f", True),
        ("train store: bytes/token", "store.bytes_per_token", ".2f", True),
        ("train store: bytes/pair", "store.bytes_per_pair", ".1f", True),
        ("1 proc: warm start to step 1 s", "warm_1.first_step_s", ".1f", True),
        ("1 proc: trainer RSS MiB", one + "trainer_rss_mib", ",.0f", True),
        ("1 proc: trainer RSS excl. store", one + "trainer_rss_excl_store_mib", ",.0f", True),
        ("1 proc: trainer anonymous MiB", one + "trainer_anon_mib", ",.0f", True),
        ("1 proc: trainer store RSS MiB", one + "trainer_store_rss_mib", ",.1f", False),
        ("1 proc: loader workers", one + "loader_workers", "d", False),
        ("1 proc: loader RSS excl. store (each)", one + "loader_rss_excl_store_mib", ",.0f", False),
        ("1 proc: loader PSS MiB (sum)", one + "loader_pss_mib", ",.0f", False),
        ("1 proc: store PSS, all procs", one + "store_pss_all_mib", ",.1f", False),
        ("1 proc: total PSS, all procs", one + "total_pss_mib", ",.0f", True),
        (f"{n} warm start to step 1 s", f"warm_{nproc}.first_step_s", ".1f", True),
        (f"{n} trainer RSS MiB (mean)", many + "trainer_rss_mib", ",.0f", True),
        (f"{n} trainer RSS excl. store (mean)", many + "trainer_rss_excl_store_mib", ",.0f", True),
        (f"{n} trainer anonymous MiB (mean)", many + "trainer_anon_mib", ",.0f", True),
        (f"{n} trainer store RSS (mean)", many + "trainer_store_rss_mib", ",.1f", False),
        (f"{n} store PSS, trainers summed", many + "store_pss_trainers_mib", ",.1f", False),
        (f"{n} store PSS, all procs summed", many + "store_pss_all_mib", ",.1f", False),
        (f"{n} store PSS sum / store on disk", f"warm_{nproc}.store_pss_over_disk", ".2f", False),
        (
            f"{n} store PSS sum / 1-proc store PSS",
            f"warm_{nproc}.store_pss_over_1proc",
            ".2f",
            False,
        ),
        (f"{n} loader PSS MiB (sum)", many + "loader_pss_mib", ",.0f", False),
        (f"{n} total PSS, all procs", many + "total_pss_mib", ",.0f", True),
    ]


def fmt(value: float | None, spec: str) -> str:
    if value is None:
        return "-"
    return format(int(value) if spec == "d" else value, spec)


def table(results: list[dict[str, Any]], nproc: int) -> tuple[str, dict[str, float]]:
    """The report's table (the current code's results, then the baseline's if measured) and the
    current/baseline ratios it shows."""
    cur = results[0]
    base = results[1] if len(results) > 1 else None
    width = 42
    head = f"{'':{width}} {'current':>11}" + (f" {'baseline':>11} {'cur/base':>9}" if base else "")
    lines = [head]
    ratios: dict[str, float] = {}
    for label, path, spec, want_ratio in rows(nproc):
        a = get(cur, path)
        if a is None and (base is None or get(base, path) is None):
            continue  # not measured (skipped, or failed: the reason is printed below)
        line = f"{label:{width}} {fmt(a, spec):>11}"
        if base:
            b = get(base, path)
            r = a / b if want_ratio and a is not None and b else None
            if r is not None:
                ratios[path] = r
            line += f" {fmt(b, spec):>11} {fmt(r, '.2f') if r is not None else '':>9}"
        lines.append(line)
    return "\n".join(lines), ratios

"""What the benchmark and study scripts share, so each carries only its own measurement.

- `machine()`: the CPU, its cores and the instruction sets that decide CPU speed, and the load
  average: every figure a script reports is printed beside the machine it came from.
- `say()`: progress on stderr with the seconds since the script started, so stdout holds
  only the report.
- `load_checkpoint()`: a trained model for a benchmark, on the CPU, with the thread count set
  before torch starts its pool.
- `timed()` and `alternate()`: one timed call, and several settings timed in turn over several
  rounds (the machines are shared and noisy: the best round is the one least disturbed).
- `markdown_table()`: the tables that go into docs/studies/.
- `read_lines()`, `write_text()`: a corpus file (`.gz` too) in, a result file out atomically.
- `worktree()`: an older commit checked out beside the working tree, to measure both.

Scripts run from the repository root as `python -m scripts.bench.NAME` (or `studies`, `tools`)
and `from scripts.common import ...`; a measured child is in scripts/measure.py, and what the
tests use too (a real `mt serve`, ports, the browser, the small HF models) in tests/support/.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")
_START = time.perf_counter()


def say(message: str) -> None:
    """Progress on stderr, so that stdout holds only the report."""
    print(f"[{time.perf_counter() - _START:7.1f} s] {message}", file=sys.stderr, flush=True)


def machine() -> dict[str, Any]:
    """CPU model, cores, memory, the instruction sets that decide CPU speed (AVX2, AVX-512,
    AMX for bf16), the GPU if torch sees one, and the load average now."""
    fields: dict[str, str] = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    flags = set(fields.get("Flags", "").split())
    info: dict[str, Any] = {
        "cpu": fields.get("Model name", "unknown"),
        "family": fields.get("CPU family", "?"),
        "model": fields.get("Model", "?"),
        "cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "avx2": "avx2" in flags,
        "avx512f": "avx512f" in flags,
        "amx_bf16": "amx_bf16" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }
    if "torch" in sys.modules:  # only ask a torch the script already imported
        torch = sys.modules["torch"]
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    return info


def describe_machine(info: dict[str, Any] | None = None) -> str:
    """One line for a report: 'AMD EPYC (family 25, model 1), 2 cores (AVX2), load 1.2'. The
    family and model tell CPUs apart that share a model name (Zen 3 is family 25 model 1, Zen 4
    family 25 model 17, Zen 5 family 26)."""
    info = info or machine()
    isa = (("AVX2", "avx2"), ("AVX-512", "avx512f"), ("avx512_bf16", "avx512_bf16"),
           ("AMX", "amx_bf16"))  # fmt: skip
    have = [name for name, key in isa if info.get(key)]
    sets = f" ({', '.join(have)})" if have else ""
    family = f" (family {info['family']}" if info.get("family", "?") != "?" else ""
    if family and info.get("model", "?") != "?":
        family += f", model {info['model']}"
    family += ")" if family else ""
    return f"{info['cpu']}{family}, {info['cpus']} cores{sets}, load {info['loadavg'][0]}"


def load_checkpoint(path: str | Path, threads: int) -> Any:
    """A checkpoint's model, tokenizer and config on the CPU (mt.checkpoint.Loaded), with
    `threads` torch threads (0 keeps torch's default)."""
    import torch

    from mt.checkpoint import load_model

    if threads:
        torch.set_num_threads(threads)
    return load_model(path, "cpu")


def timed(
    fn: Callable[..., T], *args: Any, clock: Callable[[], float] = time.perf_counter, **kwargs: Any
) -> tuple[T, float]:
    """`fn(*args, **kwargs)` and the seconds it took by `clock` (wall time unless given)."""
    start = clock()
    result = fn(*args, **kwargs)
    return result, clock() - start


def alternate(
    rounds: int, runs: dict[str, Callable[[], T]], clock: Callable[[], float] = time.perf_counter
) -> tuple[dict[str, T], dict[str, list[float]]]:
    """Every run once per round, in turn, for `rounds` rounds: the settings alternate, so a burst
    of load on a shared machine falls on all of them alike rather than on one. Returns each
    run's last output and the seconds of each of its rounds (report the best: the round least
    disturbed). `clock=time.process_time` counts the process's CPU seconds: for one-thread runs
    on a virtual machine whose stolen time moves wall time from round to round."""
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    outputs: dict[str, T] = {}
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            outputs[name], s = timed(run, clock=clock)
            seconds[name].append(s)
    return outputs, seconds


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "") -> str:
    """A Markdown table; `align` gives each column 'l' or 'r' (default: the first left, the
    rest right, as numbers read)."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = [header, rule, *[[str(c) for c in row] for row in rows]]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


# How the fine-tuning studies score a model on the software strings and on Multi30k (`mt eval`
# flags): greedy, length-bounded as the first strings measurement was, one thread, so that the
# studies' tables compare with each other (docs/fine-tuning.md).
STRINGS_GREEDY = ["--greedy", "--max-len-a", "1.2", "--max-len-b", "10", "--threads", "1"]


def multi30k_dir() -> Path:
    """Where Multi30k is: $MT_DATA (the folder of its files, as CI sets it), else
    ../shared/data/multi30k beside the repository."""
    return Path(os.environ.get("MT_DATA") or REPO.parent / "shared" / "data" / "multi30k")


def read_lines(path: Path) -> list[str]:
    """The lines of a text file, `.gz` too (mt's own reader: bad UTF-8 is one line naming it)."""
    from mt.data.corpus import read_lines as read

    return read(path)


def print_report(report: dict[str, Any], path: Path | None) -> None:
    """A benchmark's JSON report with the machine line and the load at its end, printed and,
    given `path`, written there too."""
    report["machine_line"] = describe_machine(report["machine"])
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(report, indent=1)
    print(text)
    if path:
        path.write_text(text + "\n", "utf-8")


def write_text(path: Path, text: str, what: str = "results") -> None:
    """Atomically, so an interrupted run never leaves a half-written file behind."""
    from mt.atomic import write_text as write

    write(path, text, what)


def git(*args: str, cwd: Path = REPO) -> str:
    """`git ARGS` in the repository, its output stripped."""
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=120
    ).stdout.strip()


@contextlib.contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """`commit` checked out in a temporary git worktree, removed on the way out (also after an
    error or Ctrl-C), so a script can run an older `mt` with `PYTHONPATH` pointing there."""
    folder = Path(tempfile.mkdtemp(prefix="mt-worktree-"))
    try:
        git("worktree", "add", "--detach", "-q", str(folder), commit)
        yield folder
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(folder)],
            capture_output=True,
            check=False,
            timeout=120,
        )
        shutil.rmtree(folder, ignore_errors=True)


def run_mt(*argv: str, log: Path | None = None) -> str:
    """`python -m mt ARGV` with one thread and MT_DATA set, in the caller's directory (paths
    the user gave stay valid): its stdout, its stderr into `log` when given; a failure stops
    the script in one line naming the log."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MT_DATA": str(multi30k_dir().resolve())}
    with contextlib.ExitStack() as stack:
        err = stack.enter_context(log.open("w", encoding="utf-8")) if log else subprocess.DEVNULL
        done = subprocess.run(
            [sys.executable, "-m", "mt", *argv], stdout=subprocess.PIPE, stderr=err, env=env,
            text=True, check=False,
        )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"mt {' '.join(argv)}: exit {done.returncode} (see {log})")
    return done.stdout


def eval_json(
    checkpoint: Path, src: Path, ref: Path, flags: Sequence[str], log: Path
) -> dict[str, Any]:
    """`mt eval CHECKPOINT --src SRC --ref REF FLAGS --json` through `run_mt`: its scores."""
    argv = ["eval", str(checkpoint), "--src", str(src), "--ref", str(ref), *flags, "--json"]
    return json.loads(run_mt(*argv, log=log))

"""Device, precision and CPU threads: resolved in one place for training, decoding, serving
and scripts.

`auto` means CUDA when there is one. Precision `auto` means bf16 on CUDA (fp16 where bf16 is
missing) and on a CPU bf16 only where the CPU computes bf16 dot products natively (AVX-512 BF16
or AMX, read once from /proc/cpuinfo): without them torch emulates bf16 through fp32 and its
matmuls run several times slower than fp32, so fp32 is the right default there. Decoding's
`auto` (`decode.dtype`) is the same on CUDA and fp32 on every CPU (`choose_decode_dtype`).

Threads follow the cores this process may really use: the affinity mask (taskset, a cpuset)
capped by the cgroup's CPU quota (a container's `--cpus`), which torch does not read (it sizes
its pool from the host's cores). A thread count above those cores only makes threads wait for
each other. Waiting threads spin only briefly before they yield the core (`yield_when_waiting`):
on a busy machine spinning threads burn the time the other work needs, and one late thread holds
up every step. torch is imported inside the functions that need it, so that the wait policy can be
set before torch starts its OpenMP pool (libgomp reads it once, when torch is imported).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mt.config_rules import MAX_THREADS
from mt.errors import MtError

if TYPE_CHECKING:
    import torch

DEVICES = ("auto", "cpu", "cuda")


CPUINFO = Path("/proc/cpuinfo")
# The CPU flags of native bf16 dot products: AMX tiles (Intel Sapphire Rapids and later) and
# AVX-512 BF16's VDPBF16PS (AMD Zen 4 and later, Intel Cooper Lake and later).
NATIVE_BF16 = ("amx_bf16", "avx512_bf16")


def read_cpu_flags(path: Path = CPUINFO) -> frozenset[str]:
    """The flags of the first processor in a /proc/cpuinfo file; empty when there is none to
    read (not Linux): then no bf16 is assumed, which only keeps fp32."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def cpu_flags(environ: MutableMapping[str, str] = os.environ) -> frozenset[str]:
    """This machine's CPU flags, read once per process. MT_CPU_FLAGS (space-separated), when
    set, stands for them: the test suite sets it empty so that `auto` chooses alike on every
    CPU (tests/conftest.py), and it shows what `auto` would do on another CPU."""
    given = environ.get("MT_CPU_FLAGS")
    return frozenset(given.split()) if given is not None else _this_cpu()


@functools.cache
def _this_cpu() -> frozenset[str]:
    return read_cpu_flags()


def native_bf16(flags: Iterable[str]) -> str | None:
    """The flag that gives the CPU native bf16 dot products, None without one."""
    have = set(flags)
    return next((f for f in NATIVE_BF16 if f in have), None)


@dataclass(frozen=True)
class Precision:
    """A resolved precision (fp32, bf16, fp16) and why it was chosen, for start lines."""

    name: str
    why: str

    def describe(self) -> str:
        return f"{self.name} ({self.why})"


def _no_bf16() -> str:
    return f"this CPU has no {' or '.join(NATIVE_BF16)}, so bf16 runs slower than fp32"


def choose_precision(
    name: str,
    device_type: str,
    flags: Iterable[str] = (),
    cuda_bf16: bool = False,
    option: str = "train.precision",
) -> Precision:
    """What training computes in: `name` (auto, fp32, bf16, fp16) on a `device_type` whose CPU
    has `flags` (CUDA: `cuda_bf16` says whether the GPU has bf16)."""
    if name not in ("auto", "fp32", "bf16", "fp16"):
        raise MtError(f"{option} must be auto, fp32, bf16 or fp16, got {name!r}")
    if name == "fp16" and device_type != "cuda":
        raise MtError(f"{option} fp16 needs CUDA (use bf16 or fp32 on CPU)")
    native = native_bf16(flags)
    if name != "auto":
        slow = name == "bf16" and device_type == "cpu" and native is None
        return Precision(name, option + (f"; {_no_bf16()}" if slow else ""))
    if device_type == "cuda":
        if cuda_bf16:
            return Precision("bf16", "auto: the GPU computes bf16")
        return Precision("fp16", "auto: the GPU lacks bf16, so fp16")
    if native is not None:
        return Precision("bf16", f"auto: the CPU computes bf16 natively ({native})")
    return Precision("fp32", f"auto: {_no_bf16()}")


def choose_decode_dtype(
    name: str,
    device_type: str,
    flags: Iterable[str] = (),
    cuda_bf16: bool = False,
    int8: bool = False,
    option: str = "decode.dtype",
) -> Precision:
    """What decoding computes in: `auto` is bf16 on CUDA (fp16 on a GPU without bf16) and fp32
    on every CPU, and fp32 under int8, whose Linear layers compute in int8 and take fp32 inputs
    only (so bf16 and int8 do not combine).

    A CPU decodes fp32 by default, even one with native bf16, because the equalities users
    check rest on it: an imported model's output is HF `generate`'s, a translation's score is
    `mt score`'s, the CTranslate2 export writes what `mt translate` writes. A bf16 copy broke
    each of them on some lines for little speed on the models measured (docs/decoding.md), so
    it is asked for (`--dtype bf16`), not chosen by the CPU's flags.
    `bf16` asked for on a CPU without native bf16 still runs, slowly, and says so."""
    if name not in ("auto", "fp32", "bf16", "fp16"):
        raise MtError(f"{option} must be auto, fp32, bf16 or fp16, got {name!r}")
    if name == "fp16" and device_type != "cuda":
        raise MtError(f"{option} fp16 decodes on CUDA only; on a CPU use auto, fp32 or bf16")
    if int8 and name != "auto":
        if name != "fp32":
            raise MtError(
                f"{option} {name} cannot be combined with int8 decoding (its Linear layers "
                "compute in int8 from fp32 inputs): choose one"
            )
        return Precision("fp32", f"{option}, int8 Linear layers")
    if int8:
        return Precision("fp32", "auto: int8 Linear layers take fp32 inputs")
    if name == "auto" and device_type == "cpu":
        return Precision("fp32", "auto: a CPU decodes fp32 (--dtype bf16 for a bf16 copy)")
    return choose_precision(name, device_type, flags, cuda_bf16, option)


def resolve_device(name: str, option: str = "--device") -> torch.device:
    """The torch device for `auto`, `cpu` or `cuda`; `option` names the setting in errors."""
    import torch

    if name not in DEVICES:
        raise MtError(f"{option} must be cpu, cuda or auto, got {name!r}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise MtError(f"{option} is 'cuda' but no CUDA device is available")
    return torch.device(name)


def planless_attention(device: torch.device) -> None:
    """On CUDA, leave cuDNN's fused attention out of the kernels SDPA may choose (flash and
    memory-efficient attention stay). cuDNN builds an execution plan for every new input
    shape, and a decode meets a new key length at every step, a training run a new batch shape
    for its first many steps: building those plans is most of a first pass, and without
    cuDNN's kernel warm passes are no slower (docs/studies/on-a-gpu.md). A process-wide torch
    setting: every CUDA entry point calls this."""
    import torch

    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


def resolve_precision(name: str, device: torch.device) -> Precision:
    """`choose_precision` for this machine's device and CPU."""
    import torch

    cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    return choose_precision(name, device.type, cpu_flags(), cuda_bf16)


def resolve_decode_dtype(
    name: str, device: torch.device, int8: bool = False, option: str = "decode.dtype"
) -> Precision:
    """`choose_decode_dtype` for this machine's device and CPU."""
    import torch

    cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    return choose_decode_dtype(name, device.type, cpu_flags(), cuda_bf16, int8, option)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    """Mixed precision for `precision` bf16 or fp16: matmuls in the half type, sums, norms
    and softmaxes in fp32; fp32 is no context at all."""
    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


# -- CPU threads -------------------------------------------------------------------------------

CGROUP_ROOT = Path("/sys/fs/cgroup")
MEMBERSHIP = Path("/proc/self/cgroup")  # which cgroup this process is in, per hierarchy
V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


@dataclass(frozen=True)
class Cores:
    """The CPUs this process may use and what bounds them."""

    affinity: int  # CPUs in the affinity mask (taskset, a cpuset)
    quota: float | None  # CPUs' worth of time the cgroup allows per period; None: no quota

    @property
    def usable(self) -> int:
        """The affinity capped by the quota, rounded down (a thread per whole CPU of quota)."""
        if self.quota is None:
            return self.affinity
        return max(1, min(self.affinity, math.floor(self.quota)))

    def describe(self) -> str:
        noun = "core" if self.usable == 1 else "cores"
        why = f"affinity {self.affinity}"
        if self.quota is not None:
            why += f", cgroup quota {self.quota:g} CPUs"
        return f"{self.usable} usable {noun}: {why}"


def _cgroup_dirs(base: Path, relative: str) -> list[Path]:
    """`base/a/b`, `base/a`, `base`: a quota on a parent cgroup bounds its children too."""
    parts = [p for p in relative.strip().split("/") if p and p != ".."]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def cgroup_quota(root: Path = CGROUP_ROOT, membership: Path = MEMBERSHIP) -> float | None:
    """The tightest CPU quota (in CPUs) on this process's cgroup and its parents: cgroup v2
    `cpu.max` ("QUOTA PERIOD" or "max PERIOD"), v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`
    (quota -1: none). None when there is no quota or no cgroup file to read. A file that does
    not parse counts as no quota: the quota only narrows a choice, it never stops a command."""
    v2, v1 = "/", "/"
    for line in (_read(membership) or "").splitlines():
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if number == "0" and controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    quotas = []
    for folder in _cgroup_dirs(root, v2):
        fields = (_read(folder / "cpu.max") or "").split()
        if len(fields) == 2 and fields[0] != "max":
            quotas.append(_ratio(fields[0], fields[1]))
    for mount in V1_CPU_MOUNTS:
        for folder in _cgroup_dirs(root / mount, v1):
            quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
            if quota is not None and period is not None:
                quotas.append(_ratio(quota, period))
    found = [q for q in quotas if q is not None]
    return min(found) if found else None


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def usable_cores(root: Path = CGROUP_ROOT, membership: Path = MEMBERSHIP) -> Cores:
    """This process's affinity mask and cgroup quota (`root` stands for /sys/fs/cgroup)."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        affinity = os.cpu_count() or 1
    return Cores(affinity, cgroup_quota(root, membership))


@dataclass(frozen=True)
class Threads:
    """How many intra-op threads a command uses, and why (its start line says so)."""

    count: int
    cores: Cores
    asked: int | None = None  # what the user gave, before the cap of the usable cores
    source: str = ""  # where the asked count came from: "--threads", "OMP_NUM_THREADS", ...

    def describe(self) -> str:
        noun = "thread" if self.count == 1 else "threads"
        if self.asked is None:
            return f"{self.count} {noun} ({self.cores.describe()})"
        if self.asked > self.count:
            return (
                f"{self.count} {noun} ({self.source} {self.asked} capped at the "
                f"{self.cores.describe()})"
            )
        return f"{self.count} {noun} ({self.source}; {self.cores.describe()})"


def check_threads(value: int, option: str = "--threads") -> None:
    """The one bound of a thread count a user gives: 1 to MAX_THREADS."""
    if not 1 <= value <= MAX_THREADS:
        raise MtError(f"{option} must be between 1 and {MAX_THREADS:,}, got {value:,}")


def env_threads(environ: MutableMapping[str, str] = os.environ) -> int | None:
    """OMP_NUM_THREADS as a count (its first level when it lists several), None when unset or
    not a positive number: then it is no request, as OpenMP itself ignores it."""
    first = environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else None


def choose_threads(
    cores: Cores,
    asked: int | None = None,
    source: str = "--threads",
    processes: int = 1,
    environ: MutableMapping[str, str] = os.environ,
) -> Threads:
    """The intra-op thread count of a process, never above the usable cores.

    A count the user asked for (`--threads`, train.threads) comes first, then OMP_NUM_THREADS,
    then the policy: each process takes its share of the usable cores (`processes` is how many
    share them, as torchrun starts on one machine). Decoding too: with idle threads sleeping
    soon (yield_when_waiting), two decoding threads beat one on free cores and lose no more
    than one beside a competing training (docs/studies/busy-machines.md); it was the spinning,
    not the second thread, that collapsed beside other work.
    """
    if asked is None and env_threads(environ) is not None:
        asked, source = env_threads(environ), "OMP_NUM_THREADS"
    share = max(1, cores.usable // max(1, processes))
    if asked is not None:
        return Threads(min(asked, share), cores, asked, source)
    return Threads(share, cores)


def set_threads(threads: Threads) -> None:
    """Size torch's intra-op pool (threads torch starts later, as a server's workers, follow)."""
    import torch

    torch.set_num_threads(threads.count)


SHORT_SPIN = 1_000  # GOMP_SPINCOUNT: turns an idle OpenMP thread spins before it sleeps


def yield_when_waiting(environ: MutableMapping[str, str] = os.environ) -> None:
    """Have OpenMP's idle threads spin briefly, then sleep (GOMP_SPINCOUNT=SHORT_SPIN), unless
    the user chose a policy (OMP_WAIT_POLICY or GOMP_SPINCOUNT). libgomp reads this when torch
    is imported, so callers do this first: `mt`'s entry point before any command runs, scripts
    before `import torch`.

    Neither extreme serves. libgomp's default spins 300,000 turns (milliseconds), which beside
    other work burns the time that work needs. Sleeping at once (OMP_WAIT_POLICY=PASSIVE)
    makes every parallel region wake its threads through the kernel, and a decoding step is
    hundreds of small ops microseconds apart. A short spin (SHORT_SPIN turns) wins back most
    of what sleeping at once costs decoding and training on free cores, and is no slower than
    sleeping beside a competing training; longer spins gain little more alone and lose much
    beside it (docs/studies/bf16-and-threads.md, "Idle threads: a short spin")."""
    if "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ:
        return
    environ["GOMP_SPINCOUNT"] = str(SHORT_SPIN)

"""Peak memory of reading TMX files of growing size (mt/cat streams them unit by unit).

Writes TMX files of Multi30k's training pairs repeated to each size, reads each through
`mt.cat.tmx.tmx_pairs` in a fresh process, and prints the peak resident memory of that
process beside the file's size: flat memory means the peak does not grow with the file.

    python -m scripts.bench.cat_memory [--units 50000 200000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from html import escape
from pathlib import Path

from scripts.common import machine, multi30k_dir, read_lines, say

CHILD = """
import resource, sys
from pathlib import Path
from mt.cat.tmx import tmx_pairs
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
n = sum(1 for _ in tmx_pairs(Path(sys.argv[1]), "de", "en"))
print(n, base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def write_tmx(path: Path, de: list[str], en: list[str], units: int) -> None:
    with path.open("w", encoding="utf-8") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<tmx version="1.4"><header/><body>\n')
        for i in range(units):
            s, t = escape(de[i % len(de)], False), escape(en[i % len(en)], False)
            f.write(
                f'<tu><tuv xml:lang="de-DE"><seg>{s} <ph x="1">{{0}}</ph></seg></tuv>'
                f'<tuv xml:lang="en-GB"><seg>{t} <ph x="1">{{0}}</ph></seg></tuv></tu>\n'
            )
        f.write("</body></tmx>\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, nargs="+", default=[50_000, 200_000])
    args = ap.parse_args()
    root = multi30k_dir()
    de, en = read_lines(root / "train.de.gz"), read_lines(root / "train.en.gz")
    print(machine())
    print("| units | file MiB | peak RSS MiB | of which reading |")
    print("|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for units in args.units:
            path = Path(tmp) / f"m{units}.tmx"
            write_tmx(path, de, en, units)
            say(f"{units} units written, reading")
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True
            ).stdout.split()
            n, base, peak = (int(x) for x in out)
            assert n == units, (n, units)
            mib = path.stat().st_size / 2**20
            print(f"| {units:,} | {mib:.1f} | {peak / 1024:.1f} | {(peak - base) / 1024:.1f} |")
            path.unlink()


if __name__ == "__main__":
    main()

"""What a LoRA adapter costs: its size beside its base, and decoding with it.

For a base checkpoint and an adapter trained on it (`finetune.adapter: lora`), the script
reports the adapter's values and file bytes as a share of the base's, then translates the same
sentences (default: the first 500 of Multi30k test_2016_flickr) with

- `base`: the base alone (what `mt serve` answers a request without an adapter);
- `unmerged`: the adapter beside the base's weights (what `mt serve --adapter` holds);
- `merged`: the adapter folded into the weights (what `mt translate --adapter` decodes, and
  `mt adapter merge` writes);

in fp32, int8 and bf16 (where the CPU has it), greedy and beam 4, each setting in turn over
`--rounds` rounds (the best round is reported: the machine is shared). It checks that the
base's outputs are the base's with an adapter loaded beside it, and counts the lines where
unmerged and merged outputs differ.

    python -m scripts.bench.adapters BASE.pt ADAPTER.pt [--src FILE] [--lines 500] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from mt.errors import MtError
from mt.translation.options import DecodeOptions
from mt.translation.session import Session
from mt.translation.translator import translate_stream
from scripts.common import (
    alternate,
    describe_machine,
    machine,
    markdown_table,
    multi30k_dir,
    read_lines,
    say,
)


def sizes(base: Path, adapter: Path) -> dict[str, float]:
    """The adapter's share of its base: tensor values and file bytes."""
    b = torch.load(base, weights_only=True, map_location="cpu")["model"]
    a = torch.load(adapter, weights_only=True, map_location="cpu")["model"]
    unique = {id(t.untyped_storage()): t for t in b.values()}  # tied tables count once
    base_values = sum(t.numel() for t in unique.values() if t.is_floating_point())
    adapter_values = sum(t.numel() for t in a.values())
    return {
        "base_values": base_values,
        "adapter_values": adapter_values,
        "values_pct": round(100 * adapter_values / base_values, 2),
        "base_bytes": base.stat().st_size,
        "adapter_bytes": adapter.stat().st_size,
        "bytes_pct": round(100 * adapter.stat().st_size / base.stat().st_size, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("adapter", type=Path)
    parser.add_argument("--src", type=Path, default=multi30k_dir() / "test_2016_flickr.de.gz")
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    info = machine()
    say(f"{describe_machine(info)}; {args.threads} thread(s), OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS')}")  # fmt: skip
    lines = [x.strip() for x in read_lines(args.src)][: args.lines]
    size = sizes(args.base, args.adapter)
    base = Session([args.base], "cpu", dtype="fp32")
    sessions = {
        "base": base,
        "unmerged": base.with_adapter(args.adapter),
        "merged": base.with_adapter(args.adapter, merge=True),
    }
    fresh = Session([args.base], "cpu", dtype="fp32")  # a process that never saw the adapter
    searches = {"greedy": DecodeOptions(greedy=True), "beam 4": DecodeOptions(beam=4)}
    rows, results = [], {"sizes": size, "machine": info, "lines": len(lines), "runs": {}}
    kinds = {"fp32": {}, "int8": {"int8": True}, "bf16": {"dtype": "bf16"}}
    for kind, setting in kinds.items():
        for search, options in searches.items():
            options = DecodeOptions(**{**options.given(), **setting})
            try:
                translators = {n: s.translator(options) for n, s in sessions.items()}
            except MtError as err:  # bf16 on a CPU without it
                say(f"{kind}: {err}")
                continue
            runs = {n: (lambda t=t: [x.text for x in translate_stream(t, lines)])
                    for n, t in translators.items()}  # fmt: skip
            what = f"{kind}, {search}"
            say(f"{what}: {args.rounds} rounds of {', '.join(runs)}")
            outputs, seconds = alternate(args.rounds, runs)
            alone = [x.text for x in translate_stream(fresh.translator(options), lines)]
            differ = sum(a != b for a, b in zip(outputs["unmerged"], outputs["merged"]))
            best = {n: min(s) for n, s in seconds.items()}
            results["runs"][what] = {
                "seconds": seconds,
                "base_unchanged": outputs["base"] == alone,
                "unmerged_vs_merged_lines_differ": differ,
            }
            rows.append([
                what,
                f"{best['base']:.2f}",
                f"{best['unmerged']:.2f} ({best['unmerged'] / best['base']:.2f}x)",
                f"{best['merged']:.2f} ({best['merged'] / best['base']:.2f}x)",
                differ,
                "yes" if outputs["base"] == alone else "NO",
            ])  # fmt: skip
    print(f"{describe_machine(info)}; {args.threads} thread(s); {len(lines)} lines of {args.src}")
    print(f"adapter: {size['adapter_values']:,} values, {size['values_pct']}% of the base's "
          f"{size['base_values']:,}; file {size['adapter_bytes']:,} bytes, "
          f"{size['bytes_pct']}% of the base's {size['base_bytes']:,}")  # fmt: skip
    print(
        markdown_table(
            [
                "decode (seconds, best round)",
                "base",
                "unmerged",
                "merged",
                "lines unmerged != merged",
                "base output unchanged",
            ],
            rows,
        )  # fmt: skip
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")


if __name__ == "__main__":
    main()

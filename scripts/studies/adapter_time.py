"""A LoRA adapter against plain fine-tuning at equal CPU time rather than equal updates.

    python -m scripts.studies.adapter_time BASE.pt STRINGS_DIR OUT_DIR [--time-steps 100]
        [--rounds 2] [--time-rank 8] [--arm NAME:STEPS:LR[:RANK[:SEED]][/SECTION.KEY=VALUE]] ...

First the cost of one update: plain fine-tuning and the adapter (`finetune.adapter: lora`, the
default targets, rank `--time-rank`) train `--time-steps` updates each from BASE.pt on the
software strings of STRINGS_DIR ({train,val,test}.{de,en}), in turn for `--rounds` rounds (one
thread each, so a burst of load falls on both alike); an update's seconds are read from
metrics.jsonl between the first logged step and the last (the start-up and the one evaluation
left out), and the best round of each is reported with the load average.

Then each `--arm` trains for a given number of updates (step-bounded, so the load changes the
time and not the model: give the adapter the updates it does in plain fine-tuning's time) with
the recipe of docs/fine-tuning.md (inverse_sqrt, warmup 50, 2,048 tokens, seed SEED, default 1)
and is scored greedily, lowercased BLEU and chrF, on the strings test part and Multi30k's
test_2016_flickr. A NAME starting with `plain` is plain fine-tuning, any other a LoRA adapter
of rank RANK (default 8); each adapter's share of the gain is taken against the plain run with
as many updates and the same seed. `/SECTION.KEY=VALUE` adds a setting to the arm's config
(`/train.freeze=[encoder,decoder]`, `/finetune.lora_targets=[embed]`). An arm whose
OUT_DIR/NAME/scores.json exists is not trained again. The table is printed at the end;
docs/fine-tuning.md ("Measured: an adapter against plain fine-tuning") holds it.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from scripts.common import (
    STRINGS_GREEDY,
    describe_machine,
    eval_json,
    machine,
    markdown_table,
    multi30k_dir,
    run_mt,
    say,
    write_text,
)


@dataclass(frozen=True)
class Arm:
    """One fine-tuning run: plain when `rank` is 0, else a LoRA adapter of that rank."""

    name: str
    steps: int
    lr: float
    rank: int = 0
    seed: int = 1
    extra: tuple[tuple[str, Any], ...] = ()  # (dotted key, value): settings beside the recipe


def config(strings: Path, run_dir: Path, arm: Arm) -> dict[str, Any]:
    """One run's config, the recipe of docs/fine-tuning.md with the arm's settings."""
    steps = arm.steps
    data = {"root": str(strings.resolve()), "src_lang": "de", "tgt_lang": "en", "valid": "val",
            "test": "test", "max_len": 100}  # fmt: skip
    train = {
        "run_dir": str(run_dir), "schedule": "inverse_sqrt", "lr": arm.lr, "warmup": 50,
        "max_steps": steps, "threads": 1, "loader_workers": 0, "max_tokens": 2048,
        "eval_bleu": False, "eval_every": steps, "log_every": 20, "keep_last": 0,
        "tensorboard": False, "seed": arm.seed,
    }  # fmt: skip
    cfg: dict[str, Any] = {"data": data, "train": train}
    if arm.rank:
        cfg["finetune"] = {"adapter": "lora", "lora_rank": arm.rank}
    for key, value in arm.extra:
        section, name = key.split(".", 1)
        cfg.setdefault(section, {})[name] = value
    return cfg


def train(args: argparse.Namespace, folder: Path, arm: Arm) -> Path:
    """Train one run into FOLDER/run: its run directory."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    cfg = config(args.strings, folder / "run", arm)
    write_text(path, yaml.safe_dump(cfg), "the config")
    run_mt("train", str(path), "--init-from", str(args.base), log=folder / "train.log")
    return folder / "run"


def seconds_per_update(run: Path) -> float:
    """From metrics.jsonl: the seconds between the first and the last logged training step,
    over the updates between them."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in rows if "loss" in r and "elapsed" in r]
    first, last = logged[0], logged[-1]
    return (last["elapsed"] - first["elapsed"]) / (last["step"] - first["step"])


def time_updates(args: argparse.Namespace) -> dict[str, Any]:
    """Plain and adapter updates timed in turn; the best round of each, and every round."""
    kinds = {"plain": 0, "lora": args.time_rank}  # the rate does not change an update's cost
    rounds: dict[str, list[float]] = {k: [] for k in kinds}
    loads = [os.getloadavg()[0]]
    for i in range(args.rounds):
        for kind, rank in kinds.items():
            say(f"timing {kind}, round {i + 1}: {args.time_steps} updates")
            arm = Arm(kind, args.time_steps, args.plain_lr, rank)
            run = train(args, args.out / f"timing{args.time_rank}" / f"{kind}{i}", arm)
            rounds[kind].append(round(seconds_per_update(run), 4))
            loads.append(os.getloadavg()[0])
    best = {k: min(v) for k, v in rounds.items()}
    return {"rounds": rounds, "best": best, "ratio": round(best["plain"] / best["lora"], 3),
            "load": [round(min(loads), 2), round(max(loads), 2)]}  # fmt: skip


def scores(args: argparse.Namespace, arm: Arm) -> dict[str, Any]:
    """Train the arm (none for the base, 0 steps) and score it: a result row."""
    folder = args.out / arm.name
    done = folder / "scores.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    folder.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    say(f"{arm}")
    run = train(args, folder, arm) if arm.steps else None
    model, extra = (args.base, []) if run is None else (run / "best.pt", [])
    if run is not None and arm.rank:
        model, extra = args.base, ["--adapter", str(run)]
    general = multi30k_dir()
    sets = {
        "strings": (args.strings / "test.de", args.strings / "test.en"),
        "multi30k": (general / "test_2016_flickr.de.gz", general / "test_2016_flickr.en.gz"),
    }
    result: dict[str, Any] = {"arm": arm.name, "steps": arm.steps, "lr": arm.lr,
                              "rank": arm.rank, "seed": arm.seed}  # fmt: skip
    for key, (src, ref) in sets.items():
        raw = eval_json(model, src, ref, [*STRINGS_GREEDY, *extra], folder / f"eval_{key}.log")
        result[key] = {"bleu_lc": round(raw["bleu_lc"], 2), "chrf": round(raw["chrf"], 2)}
    if run is not None:
        result["seconds_per_update"] = round(seconds_per_update(run), 4)
    result["load"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    write_text(done, json.dumps(result, indent=1) + "\n")
    say(f"{arm.name}: {result}")
    return result


def parse_arm(spec: str) -> Arm:
    """NAME:STEPS:LR[:RANK[:SEED]][/SECTION.KEY=VALUE]...; a name starting `plain` has rank 0,
    others 8 by default; each VALUE is read as YAML (`/finetune.lora_targets=[embed]`)."""
    spec, *settings = spec.split("/")
    extra = []
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or "." not in key:
            raise SystemExit(f"--arm {spec}: expected /SECTION.KEY=VALUE, got /{setting}")
        extra.append((key, yaml.safe_load(value)))
    parts = spec.split(":")
    if len(parts) not in (3, 4, 5):
        raise SystemExit(f"--arm {spec}: expected NAME:STEPS:LR[:RANK[:SEED]]")
    name = parts[0]
    rank = 0 if name.startswith("plain") else int(parts[3]) if len(parts) > 3 else 8
    seed = int(parts[4]) if len(parts) == 5 else 1
    return Arm(name, int(parts[1]), float(parts[2]), rank, seed, tuple(extra))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base", type=Path)
    p.add_argument("strings", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--time-steps", type=int, default=100, help="updates per timing run (0: none)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--plain-lr", type=float, default=0.0005)
    p.add_argument("--time-rank", type=int, default=8, help="the timed adapter's rank")
    p.add_argument(
        "--arm",
        action="append",
        default=[],
        help="NAME:STEPS:LR[:RANK[:SEED]][/SECTION.KEY=VALUE]...",
    )
    args = p.parse_args()
    info = machine()
    say(describe_machine(info))
    timing = None
    if args.time_steps:
        timing = time_updates(args)
        write_text(args.out / f"timing{args.time_rank}.json", json.dumps(timing, indent=1) + "\n")
    results = [scores(args, Arm("base", 0, 0.0))]
    results += [scores(args, parse_arm(spec)) for spec in args.arm]
    print(describe_machine(info))
    if timing:
        best = timing["best"]
        print(f"seconds per update (best of {args.rounds}): plain {best['plain']}, "
              f"adapter {best['lora']}: {timing['ratio']}x; load {timing['load']}")  # fmt: skip
    base = results[0]["strings"]["bleu_lc"]
    # each adapter against plain fine-tuning with as many updates (the same CPU time)
    plain = {
        (r["steps"], r.get("seed", 1)): r["strings"]["bleu_lc"] - base
        for r in results
        if not r["rank"]
    }
    rows = []
    for r in results:
        gain = r["strings"]["bleu_lc"] - base
        plain_gain = plain.get((r["steps"], r.get("seed", 1)), 0.0)
        share = f"{100 * gain / plain_gain:.0f}%" if plain_gain > 0 and r["steps"] else ""
        rows.append([
            r["arm"], r["steps"] or "", f"{r['lr']:g}" if r["steps"] else "", r["rank"] or "",
            r.get("seed", 1),
            f"{r['strings']['bleu_lc']:.2f} ({r['strings']['chrf']:.2f})", f"{gain:+.2f}", share,
            f"{r['multi30k']['bleu_lc']:.2f} ({r['multi30k']['chrf']:.2f})",
            f"{r['load'][0]} / {r['load'][1]}",
        ])  # fmt: skip
    header = ["arm", "updates", "lr", "rank", "seed", "strings BLEU (chrF)", "gain",
              "of plain's gain", "Multi30k BLEU (chrF)", "load start / end"]  # fmt: skip
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()

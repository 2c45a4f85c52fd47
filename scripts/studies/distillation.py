"""A student distilled from a teacher against the same student trained on the references.

    python -m scripts.studies.distillation TEACHER.pt OUT_DIR [--lines 5000] [--steps 300]
        [--config configs/multi30k_de_en_student.yaml] [--set KEY=VALUE ...]

The student is the model of `--config` (a deep encoder, a shallow decoder), trained for the
same number of updates (step-bounded, so the figures do not depend on the machine's load) on
the first `--lines` pairs of Multi30k's train, one thread, with `--set` items for both students
(e.g. `train.warmup=150`, the demo model's, for a budget of 300 steps):

- teacher: TEACHER.pt as it is;
- distilled: `mt distill`, the teacher's beam-5 translations of those sources as the targets
  (translated first with `--shard 0/1`, so the translation is timed on its own, then trained
  by `mt distill` finding the translations kept);
- references: `mt train` of the same config on the same pairs (the student's baseline).

Each model is scored with beam 5 (alpha 0.6) on Multi30k's test_2016_flickr through `mt eval`
(BLEU, chrF). An arm whose OUT_DIR/ARM/scores.json exists is not run again. The table is
printed at the end, with the machine and the load average at each arm's start and end; the
decoding speeds of the models are measured apart, by scripts.bench.decode (`--baseline`),
which runs them in turns. docs/studies/distillation.md holds the measured table.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from scripts.common import (
    REPO,
    describe_machine,
    eval_json,
    machine,
    markdown_table,
    multi30k_dir,
    run_mt,
    say,
    write_text,
)

ARMS = ("teacher", "distilled", "references")
BEAM = ["--beam", "5", "--alpha", "0.6", "--threads", "1"]


def sets(args: argparse.Namespace, run: Path) -> list[str]:
    """The `--set` items every student run shares: the slice, the steps, one thread."""
    items = [
        f"data.max_train_examples={args.lines}", "train.max_minutes=0",
        f"train.max_steps={args.steps}", f"train.eval_every={args.steps}", "train.threads=1",
        "train.tune_beam=[]", "train.tune_alpha=[]", "train.tensorboard=false",
        f"distill.teachers=[{args.teacher.resolve()}]", *args.set,
    ]  # fmt: skip
    return ["--run-dir", str(run), *(a for item in items for a in ("--set", item))]


def score(checkpoint: Path, folder: Path) -> dict[str, float]:
    test = multi30k_dir()
    src, ref = test / "test_2016_flickr.de.gz", test / "test_2016_flickr.en.gz"
    raw = eval_json(checkpoint, src, ref, BEAM, folder / "eval.log")
    return {"bleu": round(raw["bleu"], 2), "chrf": round(raw["chrf"], 2)}


def run_arm(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    folder = args.out / arm
    done = folder / "scores.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    folder.mkdir(parents=True, exist_ok=True)
    start_load = os.getloadavg()[0]
    result: dict[str, Any] = {"arm": arm, "steps": 0 if arm == "teacher" else args.steps}
    model, run = args.teacher, folder / "run"
    if arm == "distilled":
        say(f"{arm}: the teacher translates {args.lines:,} sources")
        tick = time.perf_counter()
        run_mt("distill", str(args.config), *sets(args, run), "--shard", "0/1",
           log=folder / "translate.log")  # fmt: skip
        result["translate_seconds"] = round(time.perf_counter() - tick, 1)
    if arm != "teacher":
        say(f"{arm}: training {args.steps} steps")
        command = "distill" if arm == "distilled" else "train"
        tick = time.perf_counter()
        run_mt(command, str(args.config), *sets(args, run), log=folder / "train.log")
        result["train_seconds"] = round(time.perf_counter() - tick, 1)
        model = run / "best.pt"
    say(f"{arm}: scoring {model}")
    result["scores"] = score(model, folder)
    result["load"] = [round(start_load, 2), round(os.getloadavg()[0], 2)]
    write_text(done, json.dumps(result, indent=1) + "\n")
    say(f"{arm}: {result['scores']}")
    return result


def table(results: list[dict[str, Any]], lines: int) -> str:
    rows = []
    for r in results:
        s = r["scores"]
        translate = r.get("translate_seconds")
        rows.append([
            r["arm"], r["steps"], f"{s['bleu']:.2f}", f"{s['chrf']:.2f}",
            f"{lines / translate:.1f} lines/s ({translate:.0f} s)" if translate else "",
            f"{r.get('train_seconds', 0):.0f} s" if r["steps"] else "",
            f"{r['load'][0]} / {r['load'][1]}",
        ])  # fmt: skip
    header = ["model", "steps", "test BLEU (beam 5)", "chrF", "teacher's translation",
              "training", "load start / end"]  # fmt: skip
    return markdown_table(header, rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("teacher", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--lines", type=int, default=5000)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--config", type=Path, default=REPO / "configs/multi30k_de_en_student.yaml")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--set", action="append", default=[], help="KEY=VALUE for both students")
    args = p.parse_args()
    say(describe_machine(machine()))
    results = [run_arm(arm, args) for arm in args.arms.split(",") if arm]
    print(table(results, args.lines))


if __name__ == "__main__":
    main()

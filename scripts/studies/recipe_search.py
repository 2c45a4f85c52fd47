"""A recipe search you can rerun: candidate settings trained one after another as short proxy
runs, each scored, one row per trial appended to docs/studies/recipe-search.md.

Each trial is the base config with a few `--set` overrides (a trial with none is the base
itself). It runs `mt train BASE --run-dir WORK/NAME --set ...` under the budget given
(`--minutes`: train.max_minutes; `--steps`: train.max_steps), then `mt eval` of the run's
best.pt on the config's test set (data.test, test_2016_flickr for Multi30k) with the decode
settings stored in the checkpoint. The row says what changed, the steps reached, the training
tokens/s (the median of the run's log intervals), dev BLEU at the given minutes of training and
at best, the test BLEU, the decode settings, the wall time of the trial and the 1-minute load
average before and after it. A trial that fails is a row too, with why.

Trials come from the command line, `--trial "NAME key=value key=value"`, or a YAML file of
named overrides:

    ema: {train.ema_decay: 0.999}
    deep-enc: {model.encoder_layers: 5, model.decoder_layers: 2}

    python -m scripts.studies.recipe_search configs/multi30k_de_en.yaml --minutes 10 \\
        --trial base --trial "ema train.ema_decay=0.999" --trials more.yaml

Run it on free cores: every trial is a timed run. `--dry-run` prints the commands only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mt.errors import MtError
from scripts.common import REPO, git, markdown_table, read_lines, say, write_text

NAME = re.compile(r"[A-Za-z0-9._-]+")
HEADER = [
    "trial",
    "change",
    "budget",
    "steps",
    "tokens/s",
    "dev BLEU at minutes",
    "best dev BLEU",
    "test BLEU",
    "decode",
    "wall",
    "load before, after",
    "commit",
    "result",
]
ALIGN = "lllrrlrrlrlll"
INTRO_END = "<!-- recipe_search.py appends one row per trial below -->"


@dataclass
class Trial:
    name: str
    sets: list[str] = field(default_factory=list)  # `key=value` items, as `--set` takes them

    def change(self) -> str:
        return ", ".join(self.sets) or "(base config)"


def set_item(key: str, value: Any) -> str:
    """`key=value` as `mt train --set` parses it (YAML): lists and numbers as JSON."""
    return f"{key}={value if isinstance(value, str) else json.dumps(value)}"


def parse_trial(text: str) -> Trial:
    """`"NAME key=value key=value"` -> Trial."""
    name, *items = text.split()
    for item in items:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise SystemExit(f"--trial {text!r}: {item!r} is not section.key=value")
    return Trial(checked_name(name, "--trial"), items)


def read_trials(path: Path) -> list[Trial]:
    """A YAML mapping of trial name -> {section.key: value} (empty: the base config)."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict):
        raise SystemExit(f"{path}: must map trial names to {{section.key: value}} overrides")
    trials = []
    for name, sets in raw.items():
        if sets is not None and not isinstance(sets, dict):
            raise SystemExit(f"{path}: trial {name!r} must map section.key to a value")
        items = [set_item(str(k), v) for k, v in (sets or {}).items()]
        trials.append(Trial(checked_name(str(name), str(path)), items))
    return trials


def checked_name(name: str, where: str) -> str:
    if not NAME.fullmatch(name):
        raise SystemExit(f"{where}: trial name {name!r} may use only letters, digits, . _ -")
    return name


def budget_sets(minutes: float | None, steps: int | None) -> list[str]:
    """The budget as overrides: minutes of training, a number of updates, or both (first to
    stop wins)."""
    sets = []
    if minutes is not None:
        sets.append(f"train.max_minutes={minutes}")
        if steps is None:
            sets.append("train.max_steps=100000000")
    if steps is not None:
        sets.append(f"train.max_steps={steps}")
        if minutes is None:
            sets.append("train.max_minutes=0")
    return sets


def test_files(base: Path, sets: list[str], work: Path, lines: int) -> tuple[Path, Path]:
    """The config's test set (data.test) as source and reference files; its first `lines`
    lines (copied into `work`) when `lines` > 0, for checking the script on small sizes."""
    from mt.config_file import load_config

    d = load_config(base, sets).data
    found = []
    for lang in (d.src_lang, d.tgt_lang):
        plain = Path(d.root) / f"{d.test}.{lang}"
        path = plain if plain.is_file() else plain.with_name(plain.name + ".gz")
        if not path.is_file():
            raise SystemExit(f"{plain}(.gz): the test set data.test={d.test!r} is not there")
        if lines:
            cut = work / f"{d.test}.{lines}.{lang}"
            write_text(cut, "".join(x + "\n" for x in read_lines(path)[:lines]), "test lines")
            path = cut
        found.append(path)
    return found[0], found[1]


def metrics(run_dir: Path, at: list[float]) -> dict[str, Any]:
    """What the row reads from the run's metrics.jsonl."""
    path = run_dir / "metrics.jsonl"
    records = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    logs = [r for r in records if "tgt_tokens_per_s" in r]
    evals = [r for r in records if r.get("dev_bleu") is not None and "valid_loss" in r]
    averaged = [r["averaged_dev_bleu"] for r in records if "averaged_dev_bleu" in r]
    dev_at = []
    for minutes in at:
        before = [r for r in evals if r["elapsed"] <= minutes * 60]
        dev_at.append(f"{minutes:g}: {before[-1]['dev_bleu']:.2f}" if before else f"{minutes:g}: -")
    best = max([r["dev_bleu"] for r in evals] + averaged, default=None)
    return {
        "steps": max((r.get("step", 0) for r in records), default=0),
        "tokens_per_s": statistics.median(r["tgt_tokens_per_s"] for r in logs) if logs else None,
        "dev_at": ", ".join(dev_at),
        "best_dev": best,
        "averaged": averaged[-1] if averaged else None,
    }


def decode_of(best: Path) -> str:
    """The beam and length penalty best.pt decodes with (chosen on dev when tuned)."""
    import torch

    data = torch.load(best, map_location="cpu", weights_only=True)
    d = data["config"]["decode"]
    tuned = " (tuned)" if "tuned_decode" in data else ""
    return f"beam {d['beam']}, alpha {d['alpha']}{tuned}"


def run_logged(cmd: list[str], log: Path, timeout: float) -> tuple[int, str, str]:
    """Run `cmd` with its stderr in `log`: (exit code, stdout, the log's last non-empty line).
    A run past `timeout` seconds is killed and reads as exit 124."""
    with log.open("w", encoding="utf-8") as err:
        try:
            done = subprocess.run(
                cmd, stdout=subprocess.PIPE, stderr=err, timeout=timeout, cwd=REPO, text=True
            )
            rc, out = done.returncode, done.stdout
        except subprocess.TimeoutExpired:
            rc, out = 124, ""
    with log.open("a", encoding="utf-8") as err:
        err.write(out if cmd[3] == "train" else "")  # training's stdout: its evaluation lines
    lines = [x for x in log.read_text(encoding="utf-8", errors="replace").splitlines() if x]
    return rc, out, (lines[-1] if lines else "")


def fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def run_trial(trial: Trial, args: argparse.Namespace, work: Path) -> list[str]:
    """Train, evaluate and describe one trial: its table row."""
    run_dir = work / trial.name
    n = 2
    while run_dir.exists():  # a trial run again keeps the earlier run
        run_dir, n = work / f"{trial.name}-{n}", n + 1
    sets = [*args.set, *trial.sets, *budget_sets(args.minutes, args.steps)]
    mt = [sys.executable, "-m", "mt"]
    train = [*mt, "train", str(args.base), "--run-dir", str(run_dir)]
    for item in sets:
        train += ["--set", item]
    best = run_dir / "best.pt"
    try:
        src, ref = test_files(args.base, sets, work, args.test_lines)
    except MtError as err:  # a trial's override the config rejects: its row says so
        src = ref = Path("-")
        problem = str(err)
    else:
        problem = ""
    evaluate = [*mt, "eval", str(best), "--src", str(src), "--ref", str(ref), "--json"]
    if args.dry_run:
        print(shlex.join(train) + "\n" + shlex.join(evaluate))
        return []
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    say(f"trial {trial.name}: {trial.change()}")
    budget = 60 * (args.minutes or 0)
    test_bleu, decode = None, "-"
    if problem:
        result = f"config: {problem}"
    else:
        rc, _, last = run_logged(
            train, work / f"{run_dir.name}.train.log", 3 * budget + args.timeout
        )
        result = "ok" if rc == 0 else f"train exit {rc}: {last}"
        if rc == 124:
            result = f"train killed at the time limit ({3 * budget + args.timeout:.0f} s)"
        if best.is_file():
            erc, out, last = run_logged(evaluate, work / f"{run_dir.name}.eval.log", args.timeout)
            if erc == 0:  # every score (chrF, TER, lowercased BLEU) beside the logs
                write_text(work / f"{run_dir.name}.eval.json", out)
                test_bleu, decode = json.loads(out)["bleu"], decode_of(best)
            elif rc == 0:
                result = f"eval exit {erc}: {last}"
        elif rc == 0:
            result = "no best.pt"
    wall = time.perf_counter() - start
    m = metrics(run_dir, args.at)
    load_after = os.getloadavg()[0]
    averaged_won = m["averaged"] is not None and m["averaged"] == m["best_dev"]
    limits = (
        f"{args.minutes:g} min" if args.minutes else "",
        f"{args.steps} steps" if args.steps else "",
    )
    budget_text = " or ".join(x for x in limits if x)
    say(f"trial {trial.name}: {result}, test BLEU {fmt(test_bleu, '.2f')}")
    return [
        run_dir.name,
        trial.change().replace("|", "\\|"),
        budget_text,
        f"{m['steps']:,}",
        fmt(m["tokens_per_s"], ",.0f"),
        m["dev_at"],
        fmt(m["best_dev"], ".2f") + (" (avg)" if averaged_won else ""),
        fmt(test_bleu, ".2f"),
        decode,
        f"{wall / 60:.1f} min",
        f"{load_before:.1f}, {load_after:.1f}",
        args.commit,
        result[:200].replace("|", "\\|"),
    ]


def append_row(out: Path, row: list[str]) -> None:
    """One row more at the end of the results table (the table header first if `out` has
    none), written atomically."""
    text = out.read_text(encoding="utf-8") if out.is_file() else ""
    if INTRO_END not in text:
        text += (
            ("\n" if text else "") + INTRO_END + "\n\n" + markdown_table(HEADER, [], ALIGN) + "\n"
        )
    if not text.endswith("\n"):
        text += "\n"
    table = markdown_table(HEADER, [row], ALIGN).splitlines()[-1]
    write_text(out, text + table + "\n", "the recipe table")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base", type=Path, help="The base config every trial starts from.")
    p.add_argument("--trial", action="append", default=[], help='"NAME key=value ..."')
    p.add_argument("--trials", type=Path, action="append", default=[], help="YAML of trials.")
    p.add_argument("--minutes", type=float, help="Training minutes per trial.")
    p.add_argument("--steps", type=int, help="Updates per trial.")
    p.add_argument("--set", action="append", default=[], help="An override for every trial.")
    p.add_argument("--at", default="5,10,30", help="Minutes to read dev BLEU at (5,10,30).")
    p.add_argument("--work", type=Path, default=REPO / "runs" / "recipe_search")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "studies" / "recipe-search.md")
    p.add_argument("--test-lines", type=int, default=0, help="First N test lines (0: all).")
    p.add_argument("--timeout", type=float, default=1800, help="Seconds allowed beyond 3x budget.")
    p.add_argument("--dry-run", action="store_true", help="Print the commands only.")
    args = p.parse_args()
    if args.minutes is None and args.steps is None:
        raise SystemExit("give a budget: --minutes, --steps or both")
    if (args.minutes is not None and args.minutes <= 0) or (
        args.steps is not None and args.steps < 1
    ):
        raise SystemExit("--minutes and --steps must be positive")
    if args.test_lines < 0:
        raise SystemExit("--test-lines must be >= 0")
    args.at = [float(x) for x in args.at.split(",") if x]
    trials = [parse_trial(t) for t in args.trial]
    for path in args.trials:
        trials += read_trials(path)
    if not trials:
        raise SystemExit("no trials: give --trial or --trials")
    names = [t.name for t in trials]
    if len(set(names)) != len(names):
        raise SystemExit(f"a trial name is given twice: {names}")
    args.commit = git("rev-parse", "--short", "HEAD") + (
        "+" if git("status", "--porcelain", "--untracked-files=no") else ""
    )
    args.work.mkdir(parents=True, exist_ok=True)
    for trial in trials:
        row = run_trial(trial, args, args.work)
        if row:
            append_row(args.out, row)


if __name__ == "__main__":
    main()

"""Fine-tuning that keeps the general domain: plain, a KL term toward the base, replay, both,
self-replay.

    python -m scripts.studies.keep_general BASE.pt STRINGS_DIR OUT_DIR [--steps 280]
        [--keep-weight 1.0] [--replay-weight 0.25] [--replay-beam 1] [--seed 1]
        [--arms plain,keep,replay,both] [--jobs 2] [--schedule constant --cooldown 0.2]
        [--lr 0.0005]

From BASE.pt (the demo model), each arm fine-tunes on the software strings that
scripts/tools/software_strings.py writes to STRINGS_DIR ({train,val,test}.{de,en}) for the same
number of updates (step-bounded, so the figures do not depend on the machine's load), with the
recipe of docs/pretrained-models.md (inverse_sqrt, lr 0.0005, warmup 50, 2,048 tokens, one
thread; `--schedule constant --cooldown 0.2` holds the rate after the warmup and lowers it to 0
over the last fifth instead, `--lr` sets the peak rate):

- plain: the strings alone;
- keep: `finetune.keep: kl`, a KL term toward the frozen base on every batch;
- replay: Multi30k's train mixed in as a second corpus (`data.corpora`, `--replay-weight`);
- both: replay and the KL term;
- self_replay (on request): the German side of Multi30k's train alone, translated by the base
  (`finetune.replay_sources`, greedy or `--replay-beam`), mixed in at `--replay-weight`
  without a term (`finetune.keep: none`): replay for a base whose own data is absent (its
  English side is not read). The base's translation is
  made once: a later self_replay arm (another weight) finds it in an earlier arm's run
  directory, in OUT_DIR or `--also`, and starts from a copy;
- self_replay_kl (on request): self_replay with the KL term toward the base on the replayed
  pairs alone (`finetune.keep: kl`, `keep_on: general`, `--keep-weight`);
- watch (on request): plain, with the first 300 pairs of Multi30k's val watched
  (`train.watch`, `keep_within: 1.0`) and evaluated 7 times: best.pt is the strings' best
  among the evaluations within 1 BLEU of the base on them.

Then the base and each arm's final model are scored greedily (as the earlier measurement did)
on the strings test part and Multi30k's test_2016_flickr: lowercased BLEU and chrF, through
`mt eval`. An arm whose OUT_DIR/ARM/scores.json exists is not run again (arms can be run in
several calls, or with other weights into other OUT_DIRs, joined in one table by `--also`);
the table is printed at the end, with the machine and the load average when each arm started
and ended. docs/fine-tuning.md ("Keeping the general domain") holds the measured table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
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

ARMS = ("plain", "keep", "replay", "both", "watch", "self_replay", "self_replay_kl")


def arm_config(arm: str, args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    """The fine-tuning config of one arm."""
    strings, general = str(args.strings.resolve()), str(multi30k_dir().resolve())
    data: dict[str, Any] = {
        "root": strings, "src_lang": "de", "tgt_lang": "en", "valid": "val", "test": "test",
        "max_len": 100,
    }  # fmt: skip
    if arm in ("replay", "both"):
        data["corpora"] = [
            {"name": "train"},
            {"name": "train", "root": general, "weight": args.replay_weight},
        ]
    train = {
        "run_dir": str(run_dir), "schedule": args.schedule, "cooldown": args.cooldown,
        "lr": args.lr, "warmup": 50,
        "max_steps": args.steps, "threads": 1, "loader_workers": 0, "max_tokens": 2048,
        "eval_bleu": False, "eval_every": args.steps, "log_every": 20, "keep_last": 0,
        "tensorboard": False, "seed": args.seed,
    }  # fmt: skip
    if arm == "watch":  # plain, with Multi30k's val watched and best.pt bounded by it
        general = multi30k_dir().resolve()
        train.update(eval_bleu=True, eval_every=args.steps // 7)
        src, ref = general / "val.de.gz", general / "val.en.gz"
        train["watch"] = [{
            "name": "multi30k", "src": str(src), "ref": str(ref), "max_examples": 300,
            "keep_within": 1.0,
        }]  # fmt: skip
    cfg: dict[str, Any] = {"data": data, "train": train}
    if arm in ("keep", "both"):
        cfg["finetune"] = {"keep": "kl", "keep_weight": args.keep_weight}
    if arm in ("self_replay", "self_replay_kl"):
        cfg["finetune"] = {
            "replay_sources": str((multi30k_dir() / "train.de.gz").resolve()),
            "replay_weight": args.replay_weight, "replay_beam": args.replay_beam,
            "keep": "none",  # self-replay alone, not keep: auto's term beside it
        }  # fmt: skip
    if arm == "self_replay_kl":
        cfg["finetune"].update(keep="kl", keep_weight=args.keep_weight, keep_on="general")
    return cfg


def reuse_replay(args: argparse.Namespace, run_dir: Path) -> None:
    """An earlier self_replay arm's translations (RUN/replay: kept by a digest of the base,
    the search and the lines, so `mt train` uses them only if they match) copied into
    `run_dir`, so that each weight does not translate Multi30k's train again."""
    for out in [args.out, *args.also]:
        for found in sorted(out.glob("self_replay*/run/replay")):  # self_replay_kl's too
            if found.parent != run_dir and any(found.glob("*/distill.json")):
                say(f"self_replay: starting from the translations in {found}")
                shutil.copytree(found, run_dir / "replay", dirs_exist_ok=True)
                return


def scores(checkpoint: Path, strings: Path, folder: Path) -> dict[str, Any]:
    """Greedy lowercased BLEU and chrF on both test sets."""
    general = multi30k_dir()
    sets = {
        "strings": (strings / "test.de", strings / "test.en"),
        "multi30k": (general / "test_2016_flickr.de.gz", general / "test_2016_flickr.en.gz"),
    }
    out = {}
    for name, (src, ref) in sets.items():
        raw = eval_json(checkpoint, src, ref, STRINGS_GREEDY, folder / f"eval_{name}.log")
        out[name] = {"bleu_lc": round(raw["bleu_lc"], 2), "chrf": round(raw["chrf"], 2)}
    return out


def run_arm(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    folder = args.out / arm
    done = folder / "scores.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    folder.mkdir(parents=True, exist_ok=True)
    start_load = os.getloadavg()[0]
    tick = time.perf_counter()
    if arm == "base":
        model = args.base
    else:
        config = folder / "config.yaml"
        write_text(config, yaml.safe_dump(arm_config(arm, args, folder / "run")), "the config")
        if arm.startswith("self_replay"):
            reuse_replay(args, folder / "run")
        say(f"{arm}: training {args.steps} steps")
        run_mt("train", str(config), "--init-from", str(args.base), log=folder / "train.log")
        model = folder / "run" / "best.pt"
    seconds = time.perf_counter() - tick
    say(f"{arm}: scoring {model}")
    result = {
        "arm": arm,
        "scores": scores(model, args.strings, folder),
        "train_seconds": round(seconds, 1),
        "load": [round(start_load, 2), round(os.getloadavg()[0], 2)],
        "steps": 0 if arm == "base" else args.steps,
        "seed": args.seed,
        "schedule": args.schedule,
        "cooldown": args.cooldown,
        "lr": args.lr,
        "keep_weight": args.keep_weight if arm in ("keep", "both", "self_replay_kl") else 0.0,
        "replay_weight": args.replay_weight
        if arm in ("replay", "both", "self_replay", "self_replay_kl")
        else 0.0,
    }
    if arm.startswith("self_replay"):
        result["replay_beam"] = args.replay_beam
        result["replay"] = json.loads((folder / "run" / "replay.json").read_text())["replay"]
    write_text(done, json.dumps(result, indent=1) + "\n")
    say(f"{arm}: {result['scores']}")
    return result


def label(r: dict[str, Any]) -> str:
    """An arm with its settings: `keep (kl 1)`, `both (kl 1, replay 0.25)`."""
    parts = [f"kl {r['keep_weight']:g}"] if r["keep_weight"] else []
    parts += [f"replay {r['replay_weight']:g}"] if r["replay_weight"] else []
    parts += [f"beam {r['replay_beam']}"] if r.get("replay_beam", 1) > 1 else []
    parts += [f"seed {r['seed']}"] if r.get("seed", 1) != 1 and r["steps"] else []
    parts += [f"lr {r['lr']:g}"] if r.get("lr", 0.0005) != 0.0005 and r["steps"] else []
    if r.get("schedule", "inverse_sqrt") != "inverse_sqrt" and r["steps"]:
        parts.append(f"{r['schedule']}, cooldown {r.get('cooldown', 0):g}")
    return f"{r['arm']} ({', '.join(parts)})" if parts else r["arm"]


def table(results: list[dict[str, Any]]) -> str:
    """The Markdown table: each arm's scores, its gain on the strings against the base (and
    as a share of plain fine-tuning's gain) and its change on Multi30k."""
    base = next(r for r in results if r["arm"] == "base")["scores"]
    plain = next((r for r in results if r["arm"] == "plain"), None)
    plain_gain = plain["scores"]["strings"]["bleu_lc"] - base["strings"]["bleu_lc"] if plain else 0
    rows = []
    for r in results:
        s, m = r["scores"]["strings"], r["scores"]["multi30k"]
        gain = s["bleu_lc"] - base["strings"]["bleu_lc"]
        share = f"{100 * gain / plain_gain:.0f}%" if plain_gain > 0 and r["steps"] else ""
        rows.append([
            label(r), r["steps"], f"{s['bleu_lc']:.2f} ({s['chrf']:.2f})", f"{gain:+.2f}", share,
            f"{m['bleu_lc']:.2f} ({m['chrf']:.2f})",
            f"{m['bleu_lc'] - base['multi30k']['bleu_lc']:+.2f}",
            f"{r['load'][0]} / {r['load'][1]}",
        ])  # fmt: skip
    header = ["arm", "steps", "strings test BLEU (chrF)", "gain", "of plain's gain",
              "Multi30k test BLEU (chrF)", "vs base", "load start / end"]  # fmt: skip
    return markdown_table(header, rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base", type=Path)
    p.add_argument("strings", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--steps", type=int, default=280)
    p.add_argument("--keep-weight", type=float, default=1.0)
    p.add_argument("--replay-weight", type=float, default=0.25)
    p.add_argument("--replay-beam", type=int, default=1, help="self_replay: the base's search")
    p.add_argument("--seed", type=int, default=1, help="train.seed of every arm")
    p.add_argument("--arms", default=",".join(ARMS[:4]))
    p.add_argument("--schedule", default="inverse_sqrt", choices=["inverse_sqrt", "constant"])
    p.add_argument("--cooldown", type=float, default=0.0, help="train.cooldown of every arm")
    p.add_argument("--lr", type=float, default=0.0005, help="train.lr of every arm")
    p.add_argument("--jobs", type=int, default=1, help="arms trained side by side")
    p.add_argument(
        "--also", type=Path, nargs="*", default=[],
        help="OUT_DIRs of earlier calls (other weights) whose arms join the table",
    )  # fmt: skip
    args = p.parse_args()
    arms = ["base"] + [a for a in args.arms.split(",") if a]
    info = machine()
    say(describe_machine(info))
    with ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        results = list(pool.map(lambda a: run_arm(a, args), arms))
    for folder in args.also:
        for arm in ARMS:
            done = folder / arm / "scores.json"
            if done.is_file():
                results.append(json.loads(done.read_text(encoding="utf-8")))
    print(describe_machine(info))
    print(table(results))


if __name__ == "__main__":
    main()

"""bf16 against fp32 on this CPU: training target tokens/s on the recipe model and decoding
sentences/s (greedy and beam 5), with what `auto` picks here, and CTranslate2 int8 beside them.

The targets of issue 43 are for a CPU with native bf16 dot products (avx512_bf16 or AMX):
training >= 1.5x fp32 target tokens/s, decoding >= 1.3x fp32 and >= 1.2x CTranslate2 int8 on
the same checkpoint. On a CPU without them (AVX2 only) bf16 is emulated and slower, and the
point is that `auto` stays fp32 there: no slower than before. The report names the CPU, its
flags, torch's own CPU capability and the load, beside every number.

Training runs mt's own update (`mt.train.update.Update`: autocast, loss, backward, clipping,
fused Adam) on the recipe config's real token-budget batches of Multi30k, each precision from
the same starting weights on the same batches, in alternating rounds; the loss after the timed
steps is printed too (bf16 should follow fp32). Decoding runs `mt.translation.session` with
`--dtype` fp32, bf16 and auto (and int8) on a checkpoint's test-set translations, in
alternating rounds; each engine's outputs are compared with fp32's (identical lines, BLEU).
By default every engine lives in this one process; `--isolate` gives each a fresh process per
round, as a user runs one (one process holding every engine shares oneDNN's kernel cache among
them, which slowed the bf16 ones on a Xeon with AMX; on a Zen 5 it made no difference), and
times each child's first pass apart. A dtype spec ending in "+early" uses CTranslate2's
stopping rule for beam search (`--stop-early`), as its rows do. The script sets the OpenMP wait
policy as `mt` does (`mt.device.yield_when_waiting`), for every engine alike. A spec ending
in ":w2" decodes with two worker processes of one thread each (`--workers 2`); CTranslate2 runs
in both of its modes, one translator using every thread inside each op (`ct2-int8`) and one
replica per thread (`ct2-int8:replicas`, its `inter_threads`), and `vs_ct2_int8` compares with
the faster of the two at each beam.

    MT_DATA=../shared/data/multi30k OMP_NUM_THREADS=2 python -m scripts.bench.bf16 \\
        --checkpoint runs/multi30k_de_en/best.pt --rounds 3
    python -m scripts.bench.bf16 --skip-decode --steps 4 --rounds 2     # training only, briefly
    python -m scripts.bench.bf16 --skip-train --isolate --limit 0 --checkpoint CKPT \\
        --dtypes fp32,bf16,bf16+early                     # each engine in a process of its own
    python -m scripts.bench.bf16 --skip-train --isolate --limit 0 --checkpoint CKPT \\
        --dtypes bf16,bf16:w2,int8+early:w2                # workers against CTranslate2's modes
"""

from __future__ import annotations

import argparse
import atexit
import copy
import dataclasses
import importlib.util
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from scripts.common import REPO, alternate, machine, read_lines, say


def cpu_report() -> dict:
    """The machine and what decides bf16 speed on it."""
    import torch

    from mt.device import (
        NATIVE_BF16,
        cpu_flags,
        native_bf16,
        resolve_decode_dtype,
        resolve_precision,
    )

    flags = cpu_flags()
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16")
    return {
        **machine(),
        "flags": {f: f in flags for f in wanted},
        "native_bf16": native_bf16(flags) or f"none of {', '.join(NATIVE_BF16)}",
        "torch": torch.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "auto": resolve_precision("auto", torch.device("cpu")).describe(),
        "decode_auto": resolve_decode_dtype("auto", torch.device("cpu")).describe(),
    }


# -- training ---------------------------------------------------------------------------------


def bench_training(args: argparse.Namespace, precisions: list[str]) -> list[dict]:
    """Target tokens/s of the recipe model's update in each precision, alternating rounds."""
    import torch

    from mt.config_file import load_config
    from mt.device import resolve_precision
    from mt.train.trainer import Trainer
    from mt.train.update import Update

    # train.device cpu: the config's `auto` would take a GPU where there is one (gpu_check's
    # bench_cpu runs on a GPU machine's host CPU), and this measures the CPU.
    sets = [f"data.root={args.data}", f"train.threads={args.threads}", "train.loader_workers=0"]
    sets.append("train.device=cpu")
    if args.train_examples:
        sets.append(f"data.max_train_examples={args.train_examples}")
    cfg = load_config(args.config, sets)
    run_dir = Path(tempfile.mkdtemp(prefix="bench-bf16-"))
    say(f"preparing {args.config.name} in {run_dir} (tokenizer, token stores)")
    trainer = Trainer(cfg, run_dir)
    try:
        n = args.warmup + args.steps
        index = trainer.train_set.epoch_batches(cfg.train.max_tokens, cfg.train.seed, 0)[:n]
        groups = [[trainer.train_set[b]] for b in index]
        tokens = sum(g[0].tgt_tokens for g in groups[args.warmup :])
        start = copy.deepcopy(trainer.model.state_dict())
        losses: dict[str, float] = {}
        seconds: dict[str, list[float]] = {name: [] for name in precisions}

        def steps(name: str) -> None:
            """Warm-up steps, then the timed ones (only those count), from `start`."""
            trainer.model.load_state_dict(start)
            torch.manual_seed(0)  # the same dropout masks for every precision
            chosen = resolve_precision(name, trainer.device).name
            update = Update(
                cfg.train, cfg.model, trainer.model, trainer.dist, trainer.device, chosen
            )
            for step, group in enumerate(groups[: args.warmup], 1):
                update(group, step)
            t = time.perf_counter()
            for step, group in enumerate(groups[args.warmup :], args.warmup + 1):
                loss_sum, _, ntok, _ = update(group, step)
            seconds[name].append(time.perf_counter() - t)
            losses[name] = float(loss_sum) / ntok

        alternate(args.rounds, {name: (lambda n=name: steps(n)) for name in precisions})
    finally:
        if trainer.lock is not None:
            trainer.lock.release()
        shutil.rmtree(run_dir, ignore_errors=True)
    rows = []
    base = tokens / min(seconds[precisions[0]])
    for name in precisions:
        best = tokens / min(seconds[name])
        rows.append(
            {
                "part": "train",
                "precision": name,
                "resolves_to": resolve_precision(name, torch.device("cpu")).name,
                "tgt_tok_s_best": round(best, 1),
                "tgt_tok_s_median": round(tokens / statistics.median(seconds[name]), 1),
                f"vs_{precisions[0]}": round(best / base, 3),
                "loss_after": round(losses[name], 4),
                "timed_steps": args.steps,
                "rounds": args.rounds,
            }
        )
    return rows


# -- decoding ---------------------------------------------------------------------------------


def engine_keys(args: argparse.Namespace, dtypes: list[str]) -> list[tuple[str, int]]:
    """(spec, beam) of every engine to time: each dtype spec per beam, mt int8 (packed for
    torch's default engine and for oneDNN's: which pays differs by CPU kind), CTranslate2.

    A spec is `DTYPE[/GEMM][+early][+slK][:wN]` ("bf16/torch": bf16 without oneDNN's packed
    weights; "+early": CTranslate2's stopping rule, `--stop-early`, beam search only; "+sl50":
    the checkpoint's lexical shortlist, `--shortlist 50`; ":w2": two worker processes of one
    thread each, `--workers 2`), `int8[+early][+slK][:wN]` (`--int8`), `ct2-int8[+vmap]` (one
    translator, its threads inside each op; "+vmap": with the shortlist exported as its
    vocabulary map, `use_vmap`) or `ct2-int8[+vmap]:replicas` (one replica per thread,
    `inter_threads`, each on its own batches: CTranslate2's faster mode on a 2-core Zen 5)."""
    int8 = ["int8", "int8/onednn"] if args.int8 else []  # torch's int8 engine, oneDNN's
    specs = [*dtypes, *(s for s in int8 if s not in dtypes)]
    specs += ["ct2-int8", "ct2-int8:replicas"] if args.ct2 else []
    return [(s, beam) for beam in args.beams for s in specs if not (beam == 1 and "+early" in s)]


def make_engine(args: argparse.Namespace, spec: str, beam: int, lines: list[str]):
    """A function that translates `lines` with engine `spec` and returns the texts."""
    if spec.startswith("ct2-int8"):
        return ctranslate2_engine(
            args, lines, beam, spec.endswith(":replicas"), vmap="+vmap" in spec
        )
    from mt.runtime.workers import WorkerPool
    from mt.translation.requests import Plan, Request
    from mt.translation.session import DecodeOptions, Session

    asked = [
        Request(x, plan=Plan(protect=False, recase=False, keep_numbers=False)) for x in lines
    ]  # search alone
    spec, _, workers = spec.partition(":w")
    name, *marks = spec.split("+")
    early = "early" in marks
    shortlist = next((int(m[2:]) for m in marks if m.startswith("sl")), None)
    dtype, _, gemm = name.partition("/")
    options = DecodeOptions(
        beam=beam,
        nbest=1,
        greedy=beam == 1 or None,
        stop_early=True if early else None,
        shortlist=shortlist,
    )  # None: the checkpoint's own setting
    if dtype == "int8":
        dtype, options = "fp32", dataclasses.replace(options, int8=True)
    if gemm:
        options = dataclasses.replace(options, gemm=gemm)
    translator = Session([args.checkpoint], "cpu", dtype=dtype).translator(options)
    decoder = translator
    if workers:  # forked once, as `mt translate --workers N` forks them
        decoder = WorkerPool(translator, int(workers))
        atexit.register(decoder.close)

    def translate() -> list[str]:
        return [t.text for t in decoder.translate(asked)]

    translate.precision = translator.precision.name  # type: ignore[attr-defined]
    return translate


def bench_decoding(args: argparse.Namespace, dtypes: list[str]) -> list[dict]:
    """Sentences/s of greedy and beam 5 per engine, alternating; in one process, or with
    `--isolate` each engine in a fresh process of its own per round."""
    from mt.metrics import bleu

    lines = read_lines(args.src)[: args.limit or None]
    refs = read_lines(args.ref)[: len(lines)] if args.ref else None
    keys = engine_keys(args, dtypes)
    names = {key: f"{key[0]} beam {key[1]}" for key in keys}
    first: dict[str, list[float]] = {}
    resolved: dict[str, str] = {}
    if args.isolate:
        outputs, seconds, first, resolved = isolated(args, keys, names)
    else:
        calls = {names[k]: make_engine(args, *k, lines) for k in keys}
        resolved = {n: c.precision for n, c in calls.items() if hasattr(c, "precision")}
        for call in calls.values():  # warm-up, untimed: first calls allocate and pack weights
            call()
        outputs, seconds = alternate(args.rounds, calls)
    ct2 = {  # the faster of CTranslate2's two modes at each beam
        beam: min(
            (
                n
                for n in (f"ct2-int8 beam {beam}", f"ct2-int8:replicas beam {beam}")
                if n in seconds
            ),
            key=lambda n: min(seconds[n]),
            default=None,
        )
        for beam in args.beams
    }
    rows = []
    for key in keys:
        name, secs = names[key], seconds[names[key]]
        ref_key = f"{dtypes[0]} beam {key[1]}"
        row = {
            "part": "decode",
            "engine": key[0],
            "beam": key[1],
            "sentences": len(lines),
            "isolated": args.isolate,
            "sent_s_best": round(len(lines) / min(secs), 2),
            "sent_s_median": round(len(lines) / statistics.median(secs), 2),
            f"vs_{dtypes[0]}": round(min(seconds[ref_key]) / min(secs), 3),
            f"same_as_{dtypes[0]}": sum(a == b for a, b in zip(outputs[name], outputs[ref_key])),
        }
        if ct2[key[1]] is not None:
            row["vs_ct2_int8"] = round(min(seconds[ct2[key[1]]]) / min(secs), 3)
            row["ct2_mode"] = ct2[key[1]].split(" ")[0]
        if name in first:  # a fresh process's first pass: oneDNN builds its kernels in it
            row["first_pass_s_best"] = round(min(first[name]), 3)
        if name in resolved:
            row["resolves_to"] = resolved[name]
        if refs is not None:
            row["bleu"] = round(bleu(outputs[name], refs), 2)
        rows.append(row)
    return rows


def isolated(
    args: argparse.Namespace, keys: list[tuple[str, int]], names: dict
) -> tuple[dict, dict, dict, dict]:
    """Every engine in a fresh child process per round, the engines taking turns: how a user
    runs one (`mt translate`, `mt serve`), where one process holding every engine shares
    oneDNN's kernel cache among them and slows the bf16 ones (docs/studies/bf16-and-threads.md).
    Each child times its first pass and `--passes` more; returns outputs, the later passes'
    seconds, the first passes' seconds and the precision each mt engine resolved to, per
    engine."""

    outputs: dict[str, list[str]] = {}
    seconds: dict[str, list[float]] = {names[k]: [] for k in keys}
    first: dict[str, list[float]] = {names[k]: [] for k in keys}
    resolved: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench-bf16-") as tmp:
        for r in range(args.rounds):
            for spec, beam in keys:
                got = run_child(args, args.checkpoint, spec, beam, Path(tmp) / "child.json")
                name = names[(spec, beam)]
                outputs[name] = got["outputs"]
                seconds[name] += got["seconds"]
                first[name].append(got["first"])
                if got["precision"]:
                    resolved[name] = got["precision"]
                say(f"round {r + 1}: {name}: first {got['first']:.2f} s, then {got['seconds']}")
    return outputs, seconds, first, resolved


def run_child(args: argparse.Namespace, checkpoint: Path, spec: str, beam: int, out: Path) -> dict:
    """Engine `spec` on `checkpoint` in a fresh process (`child`, below): its outputs, its
    first pass's seconds, its timed passes' seconds and the precision it resolved to."""
    import subprocess
    import sys

    cmd = [
        sys.executable, "-m", "scripts.bench.bf16", "--child", spec, "--child-beam", str(beam),
        "--checkpoint", str(checkpoint), "--src", str(args.src), "--limit", str(args.limit),
        "--threads", str(args.threads), "--passes", str(args.passes), "--out", str(out),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, cwd=REPO)
    return json.loads(out.read_text())


def child(args: argparse.Namespace) -> None:
    """One engine in this process: the first pass, then `--passes` timed ones, to `--out`."""
    lines = read_lines(args.src)[: args.limit or None]
    call = make_engine(args, args.child, args.child_beam, lines)
    t = time.perf_counter()
    call()
    cold = time.perf_counter() - t
    times = []
    for _ in range(args.passes):
        t = time.perf_counter()
        texts = call()
        times.append(time.perf_counter() - t)
    got = {"first": cold, "seconds": times, "outputs": texts}
    got["precision"] = getattr(call, "precision", None)
    args.out.write_text(json.dumps(got))


def ctranslate2_engine(
    args: argparse.Namespace, lines: list[str], beam: int, replicas: bool, vmap: bool = False
):
    """CTranslate2 int8 (its fastest CPU compute type) on the same checkpoint: one translator
    whose ops use every thread, or with `replicas` one replica per thread (`inter_threads`),
    each translating its own batches of 2,048 tokens (its best of 2,048 and 4,096 measured);
    with `vmap`, the checkpoint's shortlist as its vocabulary map (`mt export` writes
    `vmap.txt` for a checkpoint that has one). The timed call takes the lines as text and
    returns texts, as mt's engines do."""
    import ctranslate2

    from mt.export import write_ctranslate2
    from scripts.common import load_checkpoint

    loaded = load_checkpoint(args.checkpoint, 0)
    folder = Path(tempfile.mkdtemp(prefix="bench-bf16-ct2-"))
    write_ctranslate2(loaded, folder, None)  # as `mt export --to ctranslate2` writes it
    if vmap and not (folder / "vmap.txt").exists():
        raise SystemExit(f"{args.checkpoint} has no shortlist: run `mt shortlist` on it first")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    tok, d = loaded.tokenizer, loaded.cfg.decode
    threads = args.threads or os.cpu_count() or 1
    inter, intra = (threads, 1) if replicas else (1, threads)
    translator = ctranslate2.Translator(
        str(folder), device="cpu", inter_threads=inter, intra_threads=intra, compute_type="int8",
    )  # fmt: skip
    batch = 2048 if replicas else 4096

    def translate() -> list[str]:
        # Tokenized inside the timed call, as mt's engines tokenize theirs.
        pieces = [tok.src.encode(x, out_type=str) for x in lines]
        longest = max(len(p) for p in pieces) + 1
        results = translator.translate_batch(
            pieces, beam_size=beam, max_batch_size=batch, batch_type="tokens",
            max_decoding_length=int(d.max_len_a * longest + d.max_len_b), use_vmap=vmap,
        )  # fmt: skip
        return [tok.tgt.decode_pieces(r.hypotheses[0]) for r in results]

    return translate


# -- report -----------------------------------------------------------------------------------


def table(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        if r["part"] == "train":
            ratio = next(v for k, v in r.items() if k.startswith("vs_"))
            lines.append(
                f"train  {r['precision']:>5} (-> {r['resolves_to']}) {r['tgt_tok_s_best']:>9.0f} "
                f"tgt tok/s  {ratio:5.2f}x  loss {r['loss_after']:.4f}"
            )
        else:
            ratio = next(v for k, v in r.items() if k.startswith("vs_"))
            same = next(v for k, v in r.items() if k.startswith("same_as_"))
            to = f" (-> {r['resolves_to']})" if "resolves_to" in r else ""
            bleu = f"  BLEU {r['bleu']:.2f}" if "bleu" in r else ""
            ct2 = f"  {r['vs_ct2_int8']:5.2f}x {r['ct2_mode']}" if "vs_ct2_int8" in r else ""
            cold = r.get("first_pass_s_best")
            cold = f"  first pass {cold:.2f} s" if cold is not None else ""
            lines.append(
                f"decode {r['engine'] + to:>16} beam {r['beam']} {r['sent_s_best']:>8.1f} sent/s  "
                f"{ratio:5.2f}x{ct2}  same {same}/{r['sentences']}{bleu}{cold}"
            )
    return "\n".join(lines)


def main() -> None:
    data = os.environ.get("MT_DATA") or str(REPO.parent / "shared" / "data" / "multi30k")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, default=REPO / "configs" / "multi30k_de_en.yaml")
    p.add_argument("--data", default=data, help="Multi30k folder (default: $MT_DATA)")
    p.add_argument("--threads", type=int, default=0, help="0: OMP_NUM_THREADS, else the cores")
    p.add_argument("--train-examples", type=int, default=0, help="a slice, for a quick run")
    p.add_argument("--steps", type=int, default=20, help="timed training steps per round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best counts")
    p.add_argument("--precisions", default="fp32,bf16,auto")
    p.add_argument("--checkpoint", type=Path, help="a trained model for decoding")
    p.add_argument("--src", type=Path, default=Path(data) / "test_2016_flickr.de.gz")
    p.add_argument("--ref", type=Path, default=Path(data) / "test_2016_flickr.en.gz")
    p.add_argument("--limit", type=int, default=300, help="sentences decoded (0: all)")
    p.add_argument("--beams", default="1,5")
    p.add_argument(
        "--dtypes", default="fp32,bf16,auto", help="dtype or dtype/gemm each, e.g. bf16/torch"
    )
    p.add_argument(
        "--no-int8", dest="int8", action="store_false", help="leave mt int8 (both engines) out"
    )
    p.add_argument("--no-ct2", dest="ct2", action="store_false", help="leave CTranslate2 out")
    p.add_argument(
        "--isolate", action="store_true", help="each decoding engine in a fresh process per round"
    )
    p.add_argument("--passes", type=int, default=2, help="timed passes per child (--isolate)")
    p.add_argument("--child", help=argparse.SUPPRESS)  # one engine's spec, in a child process
    p.add_argument("--child-beam", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--skip-decode", action="store_true")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args()
    args.beams = [int(b) for b in args.beams.split(",")]
    from mt.device import choose_threads, set_threads, usable_cores, yield_when_waiting

    yield_when_waiting()  # as `mt` does, before torch starts its pool
    threads = choose_threads(usable_cores(), args.threads or None)
    set_threads(threads)
    args.threads = threads.count
    if args.child:
        return child(args)
    if args.ct2 and not args.skip_decode and importlib.util.find_spec("ctranslate2") is None:
        say("ctranslate2 is not installed: its rows are left out (pip install -e '.[bench]')")
        args.ct2 = False
    info = cpu_report()
    print(json.dumps({"machine": info}), flush=True)
    rows: list[dict] = []
    if not args.skip_train:
        rows += bench_training(args, args.precisions.split(","))
        print(json.dumps(rows[-1]), flush=True)
    if not args.skip_decode:
        if args.checkpoint is None:
            say("no --checkpoint: decoding is left out")
        else:
            rows += bench_decoding(args, args.dtypes.split(","))
    for r in rows:
        print(json.dumps(r), flush=True)
    print()
    print(table(rows))
    flags = ", ".join(f for f, have in info["flags"].items() if have)
    print(
        f"machine: {info['cpu']}, {info['threads']} threads ({flags}; torch "
        f"{info['torch_cpu_capability']}), load {info['loadavg']}; training's auto: "
        f"{info['auto']}; decoding's auto: {info['decode_auto']}"
    )
    if args.json:
        from scripts.common import write_text

        write_text(args.json, json.dumps({"machine": info, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

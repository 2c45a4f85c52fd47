"""A distilled student through `mt` against its teacher's CTranslate2 int8 export, and against
CTranslate2 int8 on the student itself: the decoding targets of a student recipe.

The question a user asks of a student is whether it replaces the exported teacher: as fast as
what they would deploy otherwise (the teacher in CTranslate2 int8, its best mode) several
times over, at the teacher's quality. And whether `mt` is the fastest way to run the student,
so the comparison is made again with CTranslate2 running the same student, the shortlist on
both (`--shortlist K` in mt; its export as `vmap.txt`, `use_vmap`, in CTranslate2).

Every engine runs in a fresh process per round, the engines taking turns over `--rounds`
rounds (`scripts.bench.bf16.run_child`, whose engine specs this takes:
`auto+early:w2` is mt at the dtype `auto` picks with CTranslate2's stopping rule and two
workers of one thread; `ct2-int8:replicas` is CTranslate2 int8 with one replica per core;
`+sl50` and `+vmap` are the shortlist). Each engine is reported by its best pass, its BLEU on
the references, and the ratios the targets name:

- the fastest student engine of mt / the faster of the teacher's two CTranslate2 int8 modes,
  and the student's BLEU there against the teacher's in that mode (and through mt at `auto`,
  the teacher's first spec);
- the fastest student engine of mt with the shortlist / the faster of CTranslate2's modes
  with the vocabulary map on the student (not for a student with SSRU decoder layers,
  `model.decoder_self: ssru`, which CTranslate2 cannot run: its engines are left out).

CTranslate2 cannot run a student with SSRU decoder layers; `--twin` names its twin, the same
recipe with self-attention (the same teacher's translations, the same updates), which every
student engine runs too: on it mt is compared with CTranslate2 on one student, and the SSRU
student through mt with the twin in CTranslate2, each at its own BLEU (the fastest engine at
the student's quality, whichever layer it takes).

The teacher decodes at `--beam`; the student at each of `--student-beams` (default: the same),
since a student's best settings may be a smaller beam: a distilled student learns the teacher's
beam output, so greedy search loses it less than it loses its teacher (Kim and Rush 2016). The
first ratio is given for each student beam, and mt and CTranslate2 are compared on the student
at the same beam.

    mt shortlist runs/student/best.pt --source train.de.gz --target train.en.gz -o student_sl.pt
    MT_DATA=../shared/data/multi30k python -m scripts.bench.student \\
        --teacher runs/multi30k_de_en/best.pt --student student_sl.pt --rounds 2 \\
        --student-beams 5,1 --shortlist 50
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from scripts.bench.bf16 import run_child
from scripts.common import REPO, machine, read_lines, say

TEACHER_SPECS = "auto,ct2-int8,ct2-int8:replicas"
STUDENT_SPECS = "auto+early,int8+early,auto+early:w2,int8+early:w2,ct2-int8,ct2-int8:replicas"
SHORTLIST_SPECS = "auto+early+sl{k}:w2,int8+early+sl{k}:w2,ct2-int8+vmap,ct2-int8+vmap:replicas"


def measure(args: argparse.Namespace, engines: list[tuple[str, Path, str, int]]) -> list[dict]:
    """Every (who, checkpoint, spec, beam) in turn, `--rounds` times; a row per engine."""
    from mt.metrics import bleu

    lines = read_lines(args.src)[: args.limit or None]
    refs = read_lines(args.ref)[: len(lines)]
    seconds: dict[str, list[float]] = {}
    outputs: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-student-") as tmp:
        for r in range(args.rounds):
            for who, checkpoint, spec, beam in engines:
                name = f"{who} {spec} beam {beam}"
                got = run_child(args, checkpoint, spec, beam, Path(tmp) / "child.json")
                seconds.setdefault(name, []).extend(got["seconds"])
                outputs[name] = got["outputs"]
                say(f"round {r + 1}: {name}: first {got['first']:.2f} s, then {got['seconds']}")
    rows = []
    for who, _, spec, beam in engines:
        name = f"{who} {spec} beam {beam}"
        best = min(seconds[name])
        rows.append(
            {
                "who": who,
                "engine": spec,
                "beam": beam,
                "sentences": len(lines),
                "sent_s_best": round(len(lines) / best, 2),
                "sent_s_slowest": round(len(lines) / max(seconds[name]), 2),
                "bleu": round(bleu(outputs[name], refs), 2),
            }
        )
    return rows


def fastest(
    rows: list[dict],
    who: str,
    engine: str = "",
    shortlist: bool | None = None,
    beam: int | None = None,
):
    """The fastest row of `who` whose engine starts with `engine` (mt: not "ct2"), with or
    without the shortlist where `shortlist` says, at `beam` where given; None if none."""
    picked = [
        r
        for r in rows
        if r["who"] == who
        and (beam is None or r["beam"] == beam)
        and (r["engine"].startswith(engine) if engine else not r["engine"].startswith("ct2"))
        and (shortlist is None or (("+sl" in r["engine"]) or ("+vmap" in r["engine"])) == shortlist)
    ]
    return max(picked, key=lambda r: r["sent_s_best"], default=None)


def verdict(rows: list[dict]) -> list[str]:
    """The targets' ratios, each from the rows measured in this run."""
    said = []
    teacher_ct2 = fastest(rows, "teacher", "ct2-int8")
    teacher_mt = next((r for r in rows if r["who"] == "teacher" and r["engine"] == "auto"), None)
    beams = sorted({r["beam"] for r in rows if r["who"] == "student"}, reverse=True)
    for beam in beams:
        student = fastest(rows, "student", beam=beam)
        if not (teacher_ct2 and student):
            continue
        own = f", {teacher_mt['bleu']:.2f} through mt at `auto`" if teacher_mt else ""
        said.append(
            f"student mt ({student['engine']} beam {beam}) / teacher CTranslate2 "
            f"({teacher_ct2['engine']} beam {teacher_ct2['beam']}): "
            f"{student['sent_s_best'] / teacher_ct2['sent_s_best']:.2f}x, BLEU "
            f"{student['bleu']:.2f} against the teacher's {teacher_ct2['bleu']:.2f} there "
            f"({student['bleu'] - teacher_ct2['bleu']:+.2f}{own})"
        )
    for who in ("student", "twin"):
        for beam in beams:
            for shortlist in (False, True):
                ours = fastest(rows, who, shortlist=shortlist, beam=beam)
                peer = fastest(rows, who, "ct2-int8", shortlist=shortlist, beam=beam)
                if ours and peer and ours["engine"] != peer["engine"]:
                    said.append(
                        f"{who} beam {beam}, shortlist {'on' if shortlist else 'off'}: mt "
                        f"({ours['engine']}) / CTranslate2 ({peer['engine']}): "
                        f"{ours['sent_s_best'] / peer['sent_s_best']:.2f}x"
                    )
    for beam in beams:
        ours, peer = fastest(rows, "student", beam=beam), fastest(rows, "twin", "ct2", beam=beam)
        if ours and peer:
            said.append(
                f"beam {beam}: the student through mt ({ours['engine']}, BLEU "
                f"{ours['bleu']:.2f}) / its twin in CTranslate2 ({peer['engine']}, BLEU "
                f"{peer['bleu']:.2f}): {ours['sent_s_best'] / peer['sent_s_best']:.2f}x"
            )
    return said


def runnable(student: Path, specs: list[str]) -> list[str]:
    """`specs` less CTranslate2's where the student has SSRU decoder layers (`mt export`
    refuses them: CTranslate2 has no such layer), said on stderr."""
    from scripts.common import load_checkpoint

    if load_checkpoint(student, 0).cfg.model.decoder_self == "attention":
        return specs
    left = [s for s in specs if s.startswith("ct2")]
    say(f"{student}: SSRU decoder layers, which CTranslate2 cannot run: {', '.join(left)} left out")
    return [s for s in specs if not s.startswith("ct2")]


def main() -> None:
    data = os.environ.get("MT_DATA") or str(REPO.parent / "shared" / "data" / "multi30k")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher", type=Path, required=True)
    p.add_argument("--student", type=Path, required=True)
    p.add_argument("--src", type=Path, default=Path(data) / "test_2016_flickr.de.gz")
    p.add_argument("--ref", type=Path, default=Path(data) / "test_2016_flickr.en.gz")
    p.add_argument("--limit", type=int, default=0, help="sentences decoded (0: all)")
    p.add_argument("--beam", type=int, default=5, help="the teacher's beam")
    p.add_argument(
        "--student-beams", default="", help="the student's beams, e.g. 5,1 (default: --beam)"
    )
    p.add_argument("--threads", type=int, default=0, help="0: every usable core")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds; the best counts")
    p.add_argument("--passes", type=int, default=1, help="timed passes per child and round")
    p.add_argument("--teacher-specs", default=TEACHER_SPECS)
    p.add_argument("--student-specs", default=STUDENT_SPECS)
    p.add_argument(
        "--shortlist", type=int, default=0, help="K: the student's shortlist engines too"
    )
    p.add_argument("--twin", type=Path, help="the student's self-attention twin (see above)")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args()
    from mt.device import choose_threads, usable_cores

    args.threads = choose_threads(usable_cores(), args.threads or None).count
    specs = args.student_specs.split(",")
    if args.shortlist:
        specs += SHORTLIST_SPECS.format(k=args.shortlist).split(",")
    twin_specs = runnable(args.twin, specs) if args.twin else []
    specs = runnable(args.student, specs)
    student_beams = [int(b) for b in args.student_beams.split(",") if b] or [args.beam]
    engines = [("teacher", args.teacher, s, args.beam) for s in args.teacher_specs.split(",") if s]
    for b in student_beams:  # greedy search has no stopping rule to choose: "+early" dropped
        at_beam = dict.fromkeys(s.replace("+early", "") if b == 1 else s for s in specs if s)
        engines += [("student", args.student, s, b) for s in at_beam]
        if args.twin:
            all_specs = dict.fromkeys(s.replace("+early", "") if b == 1 else s for s in twin_specs)
            engines += [("twin", args.twin, s, b) for s in all_specs if s]
    info = machine()
    print(json.dumps({"machine": info}), flush=True)
    rows = measure(args, engines)
    for r in rows:
        print(json.dumps(r), flush=True)
    print()
    for r in rows:
        print(
            f"{r['who']:8} {r['engine']:28} beam {r['beam']} {r['sent_s_best']:8.1f} sent/s "
            f"(slowest {r['sent_s_slowest']:.1f})  BLEU {r['bleu']:.2f}"
        )
    said = verdict(rows)
    print("\n".join(["", *said]))
    print(
        f"machine: {info['cpu']}, {args.threads} threads, load {info['loadavg']}; "
        f"best of {args.rounds} rounds x {args.passes} passes"
    )
    if args.json:
        from scripts.common import write_text

        report = {"machine": info, "rows": rows, "verdict": said}
        write_text(args.json, json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

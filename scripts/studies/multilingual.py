"""The multilingual recipe's tables: trained directions beside bilingual models, zero-shot
directions with and without the target-vocabulary guard beside pivoting through English, and
how often each output is in the wrong language.

Two steps, so translation can run where the models are (a GPU machine, say) and scoring where
the language identifier is installed (`pip install -e '.[bench]'`: lingua-language-detector,
which ships its models in the package):

    python -m scripts.studies.multilingual translate --multi source=runs/multi30k_multi/best.pt \
        --bilingual runs/bi --data $MT_DATA --out study/
    python -m scripts.studies.multilingual score --data $MT_DATA --out study/

With `--ratios 0 0.1` each direction is translated with the guard at each
decode.target_vocab_ratio, and without it (`-noguard`). `--bilingual DIR` holds one run per
direction, `DIR/de-en/best.pt` ...; `--multi NAME=CKPT`
may be given several times (the two placements of the language token, say). Translations go to
`OUT/{system}.{src}-{tgt}.txt`, with `OUT/timings.json`; `score` prints Markdown tables and
writes `OUT/scores.json`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

TEST = "test_2016_flickr"
PIVOT = "en"


def _lines(data: Path, lang: str) -> list[str]:
    from mt.data.corpus import read_lines, text_path

    return read_lines(text_path(data, TEST, lang))


def translate(args: argparse.Namespace) -> None:
    from mt.translation.requests import Plan
    from mt.translation.session import DecodeOptions, Session
    from mt.translation.translator import translate_stream

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    options = DecodeOptions(beam=args.beam, max_tokens=args.max_tokens)

    def write(name: str, hyps: list[str], seconds: float) -> None:
        (out / f"{name}.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        timings[name] = round(seconds, 2)
        print(f"{name}: {len(hyps)} lines in {seconds:.1f} s", flush=True)

    for spec in args.multi:
        system, path = spec.split("=", 1)
        session = Session([path], args.device)
        langs = session.languages
        assert langs is not None, f"{path} is not a multilingual model"
        for src in langs.languages:
            lines = _lines(Path(args.data), src)
            for tgt in langs.targets:
                if tgt == src:
                    continue
                zero = langs.zero_shot(src, tgt)
                for ratio in [*args.ratios, None]:  # None: without the guard
                    targets = session.targets(tgt, src, ratio is not None, ratio)
                    tr = session.translator(options, targets=targets)
                    start = time.perf_counter()
                    hyps = [
                        t.text
                        for t in translate_stream(tr, lines, Plan(recase=False, keep_numbers=False))
                    ]
                    tag = f"{system}-r{ratio:g}" if ratio is not None else f"{system}-noguard"
                    write(f"{tag}.{src}-{tgt}", hyps, time.perf_counter() - start)
                if zero and PIVOT in langs.languages:
                    tr = session.translator(options, targets=session.targets(tgt, None))
                    start = time.perf_counter()
                    hyps = [
                        t.text
                        for t in translate_stream(tr, lines, Plan(pivot=PIVOT, keep_numbers=False))
                    ]
                    write(f"{system}-pivot.{src}-{tgt}", hyps, time.perf_counter() - start)
    if args.bilingual:
        for run in sorted(Path(args.bilingual).iterdir()):
            if not (run / "best.pt").is_file():
                continue
            src, tgt = run.name.split("-")
            session = Session([run / "best.pt"], args.device)
            tr = session.translator(options)
            start = time.perf_counter()
            hyps = [
                t.text
                for t in translate_stream(
                    tr, _lines(Path(args.data), src), Plan(recase=False, keep_numbers=False)
                )
            ]
            write(f"bilingual.{src}-{tgt}", hyps, time.perf_counter() - start)
    (out / "timings.json").write_text(json.dumps(timings, indent=1))


def score(args: argparse.Namespace) -> None:
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    from mt.metrics import bleu, chrf

    out = Path(args.out)
    rows = []
    files = sorted(out.glob("*.txt"))
    codes = sorted({f.stem.rsplit(".", 1)[1].split("-")[i] for f in files for i in (0, 1)})
    detector = LanguageDetectorBuilder.from_iso_codes_639_1(
        *[IsoCode639_1.from_str(c) for c in codes]
    ).build()
    for f in files:
        system, direction = f.stem.rsplit(".", 1)
        src, tgt = direction.split("-")
        hyps = f.read_text(encoding="utf-8").splitlines()
        refs = _lines(Path(args.data), tgt)
        found = detector.detect_languages_in_parallel_of(hyps)
        wrong = sum(
            1
            for h, lang in zip(hyps, found)
            if h.strip() and (lang is None or lang.iso_code_639_1.name.lower() != tgt)
        )
        rows.append(
            {
                "system": system,
                "direction": direction,
                "bleu": round(bleu(hyps, refs), 2),
                "chrf": round(chrf(hyps, refs), 2),
                "off_target": round(100 * wrong / max(len(hyps), 1), 2),
            }
        )
    (out / "scores.json").write_text(json.dumps(rows, indent=1))
    # The references themselves through the same identifier: its own error rate.
    ref_wrong = {}
    for c in codes:
        refs = _lines(Path(args.data), c)
        found = detector.detect_languages_in_parallel_of(refs)
        ref_wrong[c] = round(
            100
            * sum(1 for lang in found if lang is None or lang.iso_code_639_1.name.lower() != c)
            / len(refs),
            2,
        )
    print(f"identifier on the references (% not identified as their language): {ref_wrong}")
    by = {(r["system"], r["direction"]): r for r in rows}
    systems = sorted({r["system"] for r in rows})
    directions = sorted({r["direction"] for r in rows})
    print("| direction | " + " | ".join(systems) + " |")
    print("|---|" + "---|" * len(systems))
    for d in directions:
        cells = []
        for s in systems:
            r = by.get((s, d))
            cells.append(f"{r['bleu']:.2f} ({r['off_target']:.1f}%)" if r else "")
        print(f"| {d} | " + " | ".join(cells) + " |")
    print("cells: BLEU (off-target % of lines), test_2016_flickr, beam as translated")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="step", required=True)
    t = sub.add_parser("translate")
    t.add_argument("--multi", action="append", default=[], help="NAME=CHECKPOINT")
    t.add_argument("--bilingual", help="folder of runs named src-tgt")
    t.add_argument("--data", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--beam", type=int, default=5)
    t.add_argument(
        "--ratios", type=float, nargs="*", default=[0.1], help="decode.target_vocab_ratio values"
    )
    t.add_argument("--device", default="auto")
    t.add_argument("--max-tokens", type=int, default=None, help="decode batch size")
    s = sub.add_parser("score")
    s.add_argument("--data", required=True)
    s.add_argument("--out", required=True)
    args = p.parse_args()
    translate(args) if args.step == "translate" else score(args)


if __name__ == "__main__":
    main()

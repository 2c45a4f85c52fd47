"""Text as people send it (issue 42): paragraphs, capitals, numbers, doubt flags and their cost.

On the first N sentences of test_2016_flickr (de->en, lowercased BLEU as the issue reports):

- paragraphs: five sentences joined on one line, translated whole (today) and sentence by
  sentence (`--split-sentences`): BLEU against the five references joined, and the output's
  words against those of the sentence-by-sentence translations;
- capitals: the sources in ALL CAPS and in Title Case, without and with decode-time recasing,
  and the share of the words whose case recasing gives back (the checkpoint's case table,
  where it has one, else the tokenizer's guess);
- numbers: each sentence with a number put in (a time, a year, a count, a thousand, a
  decimal, German-style), the share of lines that keep every number without and with the
  guard (`--keep-numbers`), and clean BLEU with the guard on;
- flags: the share of whole-paragraph outputs flagged `short`, and of normal lines with any
  flag, each flag counted, with the mean sentence chrF of the flagged and the unflagged lines
  (are the flagged ones the bad ones?) and the flags of the references against the same sources;
- speed: `mt translate`'s work on normal lines plain, with sentence splitting, and the time
  the flags take, alternating over rounds.

    OMP_NUM_THREADS=1 python -m scripts.bench.text CHECKPOINT [--lines 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time
from pathlib import Path

from scripts import common


def number_lines(lines: list[str], seed: int = 1) -> list[str]:
    """Each line with a German number phrase put before its final punctuation."""
    rng = random.Random(seed)
    out = []
    for i, line in enumerate(lines):
        kind = i % 5
        if kind == 0:
            phrase = f"um {rng.randint(1, 23)}:{rng.randint(0, 59):02d} Uhr"
        elif kind == 1:
            phrase = f"im Jahr {rng.randint(1950, 2024)}"
        elif kind == 2:
            phrase = f"mit {rng.randint(2, 99)} Freunden"
        elif kind == 3:
            phrase = f"vor {rng.randint(2, 40)}.{rng.randint(0, 9)}00 Zuschauern"
        else:
            phrase = f"nach {rng.randint(1, 20)},{rng.randint(1, 9)} Kilometern"
        body = line.rstrip()
        end = body[-1] if body and body[-1] in ".!?" else ""
        out.append(f"{body[: len(body) - len(end)]} {phrase}{end}")
    return out


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def title(line: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in line.split(" "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--data", type=Path, default=common.multi30k_dir())
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import sacrebleu

    from mt.textstats import WORD
    from mt.translation.casing import usual_case
    from mt.translation.doubt import FLAGS, flags
    from mt.translation.number_guard import kept_rate
    from mt.translation.requests import Plan, Request
    from mt.translation.session import Session
    from mt.translation.stages import spelling_cost
    from mt.translation.translator import translate_stream

    src = [x.strip() for x in common.read_lines(args.data / "test_2016_flickr.de.gz")]
    ref = [x.strip() for x in common.read_lines(args.data / "test_2016_flickr.en.gz")]
    src, ref = src[: args.lines], ref[: args.lines]
    session = Session([args.checkpoint], "cpu")
    translator = session.translator()
    plain = Plan(recase=False, keep_numbers=False)
    recase = Plan(recase=True, keep_numbers=False)
    guard = Plan(recase=False, keep_numbers=True)

    def run(lines: list[str], steps: Plan = plain, split: bool = False) -> list:
        plan = dataclasses.replace(steps, split="de" if split else None)
        return list(translate_stream(translator, [Request(x, plan=plan) for x in lines]))

    def bleu(hyps: list[str], refs: list[str]) -> float:
        return sacrebleu.metrics.BLEU(lowercase=True).corpus_score(hyps, [refs]).score

    def words(ts: list) -> int:
        return sum(len(t.text.split()) for t in ts)

    rows = []
    common.say("normal lines")
    normal = run(src)
    base = bleu([t.text for t in normal], ref)
    rows.append(["sentence by sentence", f"{base:.2f}", "", ""])
    any_flag = sum(bool(t.flags) for t in normal) / len(normal)
    by_flag = {f: sum(f in t.flags for t in normal) for f in FLAGS}
    chrf = [sacrebleu.sentence_chrf(t.text, [r]).score for t, r in zip(normal, ref)]
    flagged_chrf = [c for c, t in zip(chrf, normal) if t.flags]
    clean_chrf = [c for c, t in zip(chrf, normal) if not t.flags]
    bounds = translator.length_bounds(Request(""))  # the model's direction (mt.textstats)
    ref_flagged = sum(bool(flags(s, r, bounds)) for s, r in zip(src, ref))

    common.say("paragraphs")
    paras = [" ".join(src[i : i + 5]) for i in range(0, len(src) - 4, 5)]
    para_refs = [" ".join(ref[i : i + 5]) for i in range(0, len(ref) - 4, 5)]
    n_words = words(normal[: 5 * len(paras)])
    joined = [" ".join(t.text for t in normal[i : i + 5]) for i in range(0, 5 * len(paras), 5)]
    rows.append(["sentence by sentence, joined in fives", f"{bleu(joined, para_refs):.2f}", "", ""])
    whole = run(paras)
    short = sum("short" in t.flags for t in whole) / len(whole)
    split = run(paras, split=True)
    cut = [w for w, p in zip(whole, split) if len(w.text.split()) < 0.6 * len(p.text.split())]
    short_cut = sum("short" in t.flags for t in cut) / max(1, len(cut))
    for name, out in (("paragraphs, whole (today)", whole), ("paragraphs, split", split)):
        rows.append(
            [name, f"{bleu([t.text for t in out], para_refs):.2f}",
             f"{100 * words(out) / n_words:.1f}", ""]
        )  # fmt: skip

    common.say("capitals")
    for name, change in (("ALL CAPS", str.upper), ("Title Case", title)):
        changed = [change(x) for x in src]
        for how, steps in (("as is", plain), ("recased", recase)):
            out = run(changed, steps)
            rows.append([f"{name}, {how}", f"{bleu([t.text for t in out], ref):.2f}", "", ""])
    stats = translator.tokenizer.text_stats
    case_table = stats.spellings(None) if stats is not None else None
    cost = spelling_cost(translator.tokenizer)
    right = total = 0
    for line in src:
        back = WORD.findall(usual_case(line.upper(), cost, False, case_table))
        right += sum(a == b for a, b in zip(back, WORD.findall(line)))
        total += len(WORD.findall(line))
    which = "the checkpoint's" if case_table else "none (the tokenizer's guess)"
    clean_recased = run(src, recase)
    rows.append(["clean, recasing on", f"{bleu([t.text for t in clean_recased], ref):.2f}", "", ""])

    common.say("numbers")
    numbered = number_lines(src)
    no_guard = kept_rate(numbered, [t.text for t in run(numbered)])
    with_guard = kept_rate(numbered, [t.text for t in run(numbered, guard)])
    clean_guard = bleu([t.text for t in run(src, guard)], ref)
    rows.append(["numbers kept, no guard", "", "", f"{no_guard['kept']:.1f}"])
    rows.append(["numbers kept, guard", "", "", f"{with_guard['kept']:.1f}"])
    rows.append(["clean, guard on", f"{clean_guard:.2f}", "", ""])

    common.say("speed")
    texts = [t.text for t in normal]
    outputs, seconds = common.alternate(
        args.rounds,
        {
            "split": lambda: run(src, split=True),
            "recase": lambda: run(src, recase),
            "plain": lambda: run(src),
        },
    )
    start = time.perf_counter()
    for s, t in zip(src, texts):
        flags(s, t)
    flag_s = time.perf_counter() - start
    best = {k: min(v) for k, v in seconds.items()}
    table = common.markdown_table(
        ["input", "BLEU-lc", "words % of sentence by sentence", "numbers kept %"], rows, "lrrr"
    )
    report = (
        f"Model: {args.checkpoint} (beam {translator.cfg.beam}), first {len(src)} sentences of "
        f"test_2016_flickr de-en.\n\n{table}\n\n"
        f"- case table: {which}"
        f"; words whose case recasing gives back from ALL CAPS: {right:,} of {total:,} "
        f"({100 * right / total:.1f}%); length bounds {bounds[0]} / {bounds[1]}\n"
        f"- `short` on whole-paragraph outputs: {100 * short:.1f}% of {len(whole)}, and "
        f"{100 * short_cut:.1f}% of the {len(cut)} holding under 60% of the words of the "
        f"sentence-by-sentence translation\n"
        f"- any flag on normal lines: {100 * any_flag:.1f}% of {len(normal)} "
        f"({', '.join(f'{f} {n}' for f, n in by_flag.items())}); mean sentence chrF "
        f"{mean(flagged_chrf):.1f} on the flagged lines, {mean(clean_chrf):.1f} on the others; "
        f"the references flagged against the same sources: {ref_flagged} of {len(ref)}\n"
        f"- time on normal lines (best of {args.rounds}): plain {best['plain']:.2f} s, "
        f"split {best['split']:.2f} s ({100 * (best['split'] / best['plain'] - 1):+.1f}%), "
        f"recasing {best['recase']:.2f} s ({100 * (best['recase'] / best['plain'] - 1):+.1f}%); "
        f"the flags of all lines {1000 * flag_s:.1f} ms "
        f"({100 * flag_s / best['plain']:.2f}% of plain)\n\n{common.describe_machine()}\n"
    )
    print(report)
    if args.out is not None:
        common.write_text(args.out, report)


if __name__ == "__main__":
    main()

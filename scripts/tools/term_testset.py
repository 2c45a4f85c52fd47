"""A term test set from Multi30k: a glossary whose entries a model does not write unaided.

A glossary entry tests something only where the model would have written another word: an
entry the model follows anyway scores 100% with or without the glossary. So the entries are
found the way a terminologist's would be checked, against the references:

1. A bilingual lexicon from the training data: each source stem's candidate translations are
   the target stems that co-occur with it in training pairs, by Dice's coefficient (stems by
   mt.glossary.words, so a noun's forms count as one word; the most frequent stems on each
   side, the function words, are left out).
2. The model translates the test sources unaided.
3. A candidate entry (source stem, target stem) of a line: the source holds the one, the
   reference the other, a candidate translation of it, and the model's translation does not.
4. One glossary for the whole set (a glossary is not per line): for each source stem the
   target the references use most; kept when the references of the lines holding the source
   word use it in at least `--agree` of them (so forcing it agrees with the references) and
   the model misses it in at least half (so it is not what the model writes). The source
   form written is the word's shortest form in the test sources, the target form its most
   frequent one in the references: a line holding another form needs inflected matching.

Writes GLOSSARY (TSV, with a `de<TAB>en` header) and prints how many lines hold a term and how
many of the term occurrences are inflected in the source or in the reference.

    python -m scripts.tools.term_testset runs/demo/best.pt -o terms.de-en.tsv
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from pathlib import Path

from mt.glossary import Glossary, uses
from mt.glossary.words import stem_function, words
from scripts.common import multi30k_dir, read_lines, say, write_text

WORD = re.compile(r"[^\W\d_]{3,}")  # words of letters only, 3 or more: content words


def stems(text: str, stem) -> dict[str, str]:  # noqa: ANN001
    """Stem -> the first surface form of it in `text` (letter words only)."""
    out: dict[str, str] = {}
    for w in words(text, stem):
        surface = text[w.start : w.end]
        if WORD.fullmatch(surface):
            out.setdefault(w.key, surface)
    return out


def lexicon(
    src: list[str], tgt: list[str], sl: str, tl: str, skip: int, top: int
) -> dict[str, dict[str, float]]:
    """Source stem -> {target stem: Dice} for the `top` best of each, from parallel lines."""
    s_stem, t_stem = stem_function(sl), stem_function(tl)
    pairs: Counter[tuple[str, str]] = Counter()
    cs: Counter[str] = Counter()
    ct: Counter[str] = Counter()
    for x, y in zip(src, tgt):
        a, b = set(stems(x, s_stem)), set(stems(y, t_stem))
        cs.update(a)
        ct.update(b)
        pairs.update((p, q) for p in a for q in b)
    common_s = {w for w, _ in cs.most_common(skip)}
    common_t = {w for w, _ in ct.most_common(skip)}
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (p, q), n in pairs.items():
        if n >= 3 and p not in common_s and q not in common_t:
            out[p][q] = 2 * n / (cs[p] + ct[q])
    return {p: dict(sorted(c.items(), key=lambda kv: -kv[1])[:top]) for p, c in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("-o", "--output", type=Path, required=True, help="the glossary (TSV)")
    parser.add_argument("--src-lang", default="de")
    parser.add_argument("--tgt-lang", default="en")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--min-dice", type=float, default=0.15)
    parser.add_argument("--agree", type=float, default=0.6)
    parser.add_argument("--skip", type=int, default=60, help="most frequent stems left out")
    parser.add_argument(
        "--written",
        action="store_true",
        help="the opposite set: entries the model already writes in most of their lines (a "
        "glossary that mostly confirms the model, as a settled termbase does)",
    )
    args = parser.parse_args()
    from mt.translation.requests import Request
    from mt.translation.session import Session
    from mt.translation.translator import translate_stream

    data = multi30k_dir()
    sl, tl = args.src_lang, args.tgt_lang
    say("lexicon from the training pairs")
    train_s = read_lines(data / f"train.{sl}.gz")
    train_t = read_lines(data / f"train.{tl}.gz")
    lex = lexicon(train_s, train_t, sl, tl, args.skip, top=5)
    src = [x.strip() for x in read_lines(data / f"{args.split}.{sl}.gz")[: args.lines]]
    ref = [x.strip() for x in read_lines(data / f"{args.split}.{tl}.gz")[: args.lines]]
    say(f"{len(src)} lines translated unaided")
    session = Session([args.checkpoint], "cpu")
    hyp = [t.text for t in translate_stream(session.translator(), [Request(x) for x in src])]
    s_stem, t_stem = stem_function(sl), stem_function(tl)
    chosen: Counter[tuple[str, str]] = Counter()
    forms_s: dict[str, Counter[str]] = defaultdict(Counter)
    forms_t: dict[str, Counter[str]] = defaultdict(Counter)
    for x, r, h in zip(src, ref, hyp):
        a, b, c = stems(x, s_stem), stems(r, t_stem), set(stems(h, t_stem))
        for p, surface in a.items():
            forms_s[p][surface] += 1
        for q, surface in b.items():
            forms_t[q][surface] += 1
        found = [
            (d, p, q)
            for p in a
            for q, d in lex.get(p, {}).items()
            if d >= args.min_dice and q in b and (q in c) == args.written
        ]
        if found:
            _, p, q = max(found)
            chosen[(p, q)] += 1
    best: dict[str, str] = {}
    for (p, q), _ in chosen.most_common():
        best.setdefault(p, q)
    entries = []
    for p, q in best.items():
        lines = [i for i, x in enumerate(src) if p in stems(x, s_stem)]
        agree = sum(q in stems(ref[i], t_stem) for i in lines)
        missed = sum(q not in stems(hyp[i], t_stem) for i in lines)
        unaided = missed >= 0.5 * len(lines) if not args.written else missed < 0.5 * len(lines)
        if lines and agree >= args.agree * len(lines) and unaided:
            source = min(forms_s[p], key=lambda f: (len(f), -forms_s[p][f]))
            target = forms_t[q].most_common(1)[0][0]
            entries.append((source, target.lower() if tl != "de" else target))
    g = Glossary.from_pairs(entries, sl, tgt_lang=tl)
    held = inflected = terms = 0
    for x, r in zip(src, ref):
        ms = g.find(x)
        held += bool(ms)
        for m in ms:
            terms += 1
            exact_src = x[m.start : m.end].casefold() == m.entry.src.casefold()
            exact_ref = any(u.exact for u in uses(m.entry.tgt, r, tl))
            inflected += not (exact_src and exact_ref)
    write_text(
        args.output,
        f"{sl}\t{tl}\n" + "".join(f"{s}\t{t}\n" for s, t in entries),
        "glossary",
    )
    print(
        f"{len(entries)} entries; {held} of {len(src)} lines hold a term, {terms} terms "
        f"({terms / max(held, 1):.2f} a line), {inflected} ({100 * inflected / max(terms, 1):.0f}%)"
        " inflected in the source or the reference"
    )


if __name__ == "__main__":
    main()

"""Protected spans and HTML on Multi30k: kept, well-formed, well placed, and at what cost.

Spans and tags are injected into the test_2016_flickr sentences with a fixed seed, one kind
per sentence in turn (printf, brace, shell, entity, URL, e-mail, tag pairs, self-closing tags;
a second span in every other sentence, sometimes the same one twice). Reported:

- spans kept exactly: every injected span appears in the output as written and as often as in
  the source (per line), with `--protect` and with `--no-protect` for comparison;
- HTML: the output parses with the same multiset of tags (well-formed, nothing lost);
- tags around the right words: a tag pair is put around a source word from a small German-
  English list (`WORDS`), and around its translation in the reference; among outputs that
  contain that translation, how often the tag encloses it;
- BLEU of the text without the spans against `--no-protect` on the clean sentences;
- decode time: the settings take turns over `--rounds` rounds (the VM is noisy); each is
  reported by its best round.

    nice python -m scripts.bench.protect /work/runs/recipe/best.pt --threads 2
"""

from __future__ import annotations

import argparse
import os
import random
import re
from pathlib import Path

import torch

from mt.errors import MtError
from mt.metrics import bleu
from mt.spans.markup import parse_fragment
from mt.translation.requests import Plan, Request
from mt.translation.translator import Translator, translate_stream
from scripts.common import alternate, describe_machine, load_checkpoint, read_lines, timed
from tests.support.span_checks import kept
from tests.support.span_inputs import KINDS, inject_text

# Source words with one clear translation: where a tag around the first belongs in the output.
WORDS = {
    "Mann": "man", "Frau": "woman", "Hund": "dog", "Junge": "boy", "Mädchen": "girl",
    "Männer": "men", "Frauen": "women", "Hunde": "dogs", "Kinder": "children", "Kind": "child",
    "Straße": "street", "Wasser": "water", "Ball": "ball", "Hemd": "shirt", "Strand": "beach",
    "Gebäude": "building", "Auto": "car", "Baby": "baby", "Gruppe": "group", "Hut": "hat",
    "Schnee": "snow", "Gras": "grass", "Bühne": "stage", "Gitarre": "guitar", "Pferd": "horse",
    "Boot": "boat", "Kamera": "camera", "Fahrrad": "bike", "roten": "red", "blauen": "blue",
    "schwarzen": "black", "weißen": "white", "grünen": "green", "gelben": "yellow",
    "Tisch": "table", "Berg": "mountain", "Menschen": "people", "Leute": "people",
}  # fmt: skip


def inject_html(line: str, ref: str, k: int, rng: random.Random) -> tuple[str, str | None, str]:
    """An HTML fragment from `line`: a tag pair around a `WORDS` word when it has one (the
    reference gets the same pair around the translation), plus nesting, a self-closing tag,
    an attribute with a URL or a `translate="no"` element in turn. Returns (fragment, the
    expected enclosed target word or None, the tag's name)."""
    words = line.split()
    target = None
    ref_words = ref.lower().replace(".", " ").split()
    hits = [i for i, w in enumerate(words) if w in WORDS and ref_words.count(WORDS[w]) == 1]
    tag = ["b", "em", "a", "span"][k % 4]
    open_ = '<a href="https://inkscape.org/de/">' if tag == "a" else f"<{tag}>"
    if hits:
        i = rng.choice(hits)
        target = WORDS[words[i]]
    else:
        i = rng.randrange(len(words))
    words[i] = f"{open_}{words[i]}</{tag}>"
    j = rng.randrange(len(words))
    extra = k % 3
    if extra == 0 and j != i:  # nesting: an outer pair over a run holding the first
        a, b = min(i, j), max(i, j)
        words[a] = "<strong>" + words[a]
        words[b] = words[b] + "</strong>"
    elif extra == 1:
        words.insert(j, "<br/>")
    else:
        words.insert(j, '<code translate="no">Ein Hund</code>')
    return " ".join(words), target, tag


def enclosed(out: str, tag: str) -> str:
    """The lowercased text inside the first `<tag ...>...</tag>` of `out` (tags removed)."""
    m = re.search(rf"<{tag}\b[^>]*>(.*?)</{tag}>", out)
    return re.sub(r"<[^>]+>", "", m.group(1)).lower() if m else ""


def tag_list(fragment: str) -> list[str]:
    """The tags of a fragment, sorted; raises MtError when it is not well-formed."""
    parse_fragment(fragment, "output")
    return sorted(re.findall(r"<[^<>]+>", fragment))


def translate_all(tr: Translator, protect: bool, lines: list[str]) -> list[str]:
    return [
        t.text
        for t in translate_stream(
            tr, lines, Plan(protect=protect, recase=False, keep_numbers=False)
        )
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", type=Path)
    data = Path(os.environ.get("MT_DATA", "data/multi30k"))
    p.add_argument("--src", type=Path, default=data / "test_2016_flickr.de.gz")
    p.add_argument("--ref", type=Path, default=data / "test_2016_flickr.en.gz")
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    loaded = load_checkpoint(args.checkpoint, args.threads)
    src = read_lines(args.src)[: args.limit or None]
    ref = read_lines(args.ref)[: len(src)]

    def translator(protect: bool) -> tuple[Translator, bool]:
        dcfg = loaded.cfg.decode
        return Translator(loaded.model, loaded.tokenizer, dcfg, torch.device("cpu")), protect

    on, off = translator(True), translator(False)
    rng = random.Random(args.seed)
    injected = [inject_text(s, k, rng) for k, s in enumerate(src)]
    inj_src = [s for s, _ in injected]
    settings = {
        "clean, --no-protect": (off, src),
        "clean, --protect": (on, src),
        "injected, --no-protect": (off, inj_src),
        "injected, --protect": (on, inj_src),
    }
    runs = {
        name: (lambda t=tr, x=lines: translate_all(*t, x)) for name, (tr, lines) in settings.items()
    }
    outs, times = alternate(args.rounds, runs)
    print(f"{len(src):,} sentences of {args.src.name}, beam {loaded.cfg.decode.beam}, "
          f"{args.threads} threads, best of {args.rounds} rounds")  # fmt: skip
    print(f"machine: {describe_machine()}")
    print()
    print("| measure | --no-protect | --protect |")
    print("|---|---:|---:|")
    per_kind: dict[str, list[int]] = {k: [0, 0, 0] for k in KINDS}
    for k, ((line, spans), a, b) in enumerate(
        zip(injected, outs["injected, --no-protect"], outs["injected, --protect"])
    ):
        row = per_kind[KINDS[k % len(KINDS)]]
        row[0] += 1
        row[1] += kept(a, line, spans)
        row[2] += kept(b, line, spans)
    total = [sum(r[i] for r in per_kind.values()) for i in range(3)]
    print(f"| spans kept exactly, all lines | {100 * total[1] / total[0]:.1f}% "
          f"| {100 * total[2] / total[0]:.1f}% |")  # fmt: skip
    for kind, (n, a, b) in per_kind.items():
        print(f"| ... {kind} ({n} lines) | {100 * a / n:.1f}% | {100 * b / n:.1f}% |")
    same = outs["clean, --protect"] == outs["clean, --no-protect"]
    print(f"| clean lines: output identical with --protect | | {'yes' if same else 'NO'} |")
    stripped = []
    for (_, spans), out in zip(injected, outs["injected, --protect"]):
        for s in sorted(set(spans), key=len, reverse=True):
            out = out.replace(s, " ")
        stripped.append(" ".join(out.split()))
    clean_bleu = bleu(outs["clean, --no-protect"], ref)
    print(
        f"| BLEU, clean sentences | {clean_bleu:.2f} | {bleu(outs['clean, --protect'], ref):.2f} |"
    )
    raw = bleu(outs["injected, --no-protect"], ref)
    print(
        f"| BLEU, injected sentences without their spans | {raw:.2f} | {bleu(stripped, ref):.2f} |"
    )
    best = {name: min(t) for name, t in times.items()}
    for what in ("clean", "injected"):
        a, b = best[f"{what}, --no-protect"], best[f"{what}, --protect"]
        print(f"| decode time, {what} (s, best round) | {a:.1f} | {b:.1f} ({b / a - 1:+.1%}) |")
    # What protection costs: the injected lines protected against the same text without spans.
    a, b = best["clean, --no-protect"], best["injected, --protect"]
    print(f"| decode time, clean --no-protect vs injected --protect | {a:.1f} | {b:.1f} "
          f"({b / a - 1:+.1%}) |")  # fmt: skip
    # HTML
    hrng = random.Random(args.seed)
    frags = [inject_html(s, r, k, hrng) for k, (s, r) in enumerate(zip(src, ref))]
    html_out, html_s = timed(
        lambda: [
            t.text
            for t in translate_stream(
                on[0],
                [
                    Request(f, where=f"bench:{i}", plan=Plan(html=True))
                    for i, (f, _, _) in enumerate(frags, 1)
                ],
            )
        ]
    )
    ok = same_tags = placed = placeable = 0
    for (frag, target, tag), out in zip(frags, html_out):
        try:
            same_tags += tag_list(out) == tag_list(frag)
            ok += 1
        except MtError:
            pass
        if target is not None and re.search(rf"\b{target}\b", out.lower()):
            placeable += 1
            placed += bool(re.search(rf"\b{target}\b", enclosed(out, tag)))
    n = len(frags)
    print(f"| HTML: output well-formed | | {100 * ok / n:.1f}% |")
    print(f"| HTML: same tags as the input | | {100 * same_tags / n:.1f}% |")
    print(f"| HTML: tag around the right word ({placeable} lines) | | "
          f"{100 * placed / max(placeable, 1):.1f}% |")  # fmt: skip
    print(f"| HTML: decode time (s, one round) | | {html_s:.1f} |")


if __name__ == "__main__":
    main()

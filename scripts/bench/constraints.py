"""Terminology constraints on Multi30k: are they met, what do they do to BLEU, what do they cost.

The constraints are reference words that unconstrained beam search did *not* produce: a word
the model writes anyway tests nothing. Per sentence the longest such words are taken (length
stands in for rarity: long words are content words, seldom produced by chance, and they are
several pieces, so phrases are tracked across tokens); sentences whose output already has
every reference word get none. Only whole words with a space on both sides are taken, so
that the phrase's pieces are those of the word inside a sentence (`phrase_ids`).

Three searches run over the same sentences, in the same batches: plain beam search, and
constrained beam search with one and with two constraints per sentence. The VM is shared and
noisy, so they take turns for `--rounds` rounds; each is reported by its best round (slowest
beside it), and speed ratios compare best rounds.

    python -m scripts.bench.constraints /work/runs/recipe_s4/best.pt --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

from mt.batching import pad, token_batches
from mt.config import DecodeConfig
from mt.metrics import score
from mt.search.beam import beam_search
from mt.search.constrained import constrained_beam_search
from mt.search.phrases import phrase_ids
from mt.search.steps import Hypothesis
from scripts.common import alternate, describe_machine, load_checkpoint, markdown_table, read_lines

WORD = re.compile(r"[A-Za-z]+")


def missing_words(ref: str, hyp: str, n: int) -> list[str]:
    """The `n` longest distinct reference words (space on both sides) not in `hyp`."""
    produced = set(WORD.findall(hyp))
    words = [w for w in ref.split()[1:-1] if WORD.fullmatch(w) and w not in produced]
    return sorted(dict.fromkeys(words), key=len, reverse=True)[:n]


def contains(seq: list[int], part: list[int]) -> bool:
    return any(seq[i : i + len(part)] == part for i in range(len(seq) - len(part) + 1))


def search_all(
    model, ids: list[list[int]], cons: list[list[list[int]]] | None, args: argparse.Namespace
) -> list[Hypothesis]:
    """Best hypothesis per sentence (input order), batched as the translator batches
    (length-sorted token-budget batches)."""
    cfg = args.search
    out: list[Hypothesis | None] = [None] * len(ids)
    for batch in token_batches([len(x) for x in ids], args.max_tokens):
        rows = batch.tolist()
        src = pad([ids[r] for r in rows])
        if cons is None:
            res = beam_search(model, src, cfg)
        else:
            res = constrained_beam_search(model, src, [cons[r] for r in rows], cfg)
        for r, hyps in zip(rows, res):
            out[r] = hyps[0]
    return [h for h in out if h is not None]


def percent(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def table_row(r: dict) -> tuple:
    return (
        r["search"], r["constraints"], percent(r["met_tokens"]), percent(r["met_text"]),
        f"{r['bleu']:.2f}", f"{r['sent_per_s']:.1f}", f"{r['sent_per_s_slowest']:.1f}",
        f"{r['slowdown']:.2f}x", f"{r['mean_len']:.2f}",
    )  # fmt: skip


def main() -> None:
    data = Path(os.environ.get("MT_DATA", "data/multi30k"))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", nargs="?", default="/work/runs/recipe_s4/best.pt")
    p.add_argument("--src", default=str(data / "test_2016_flickr.de.gz"))
    p.add_argument("--ref", default=str(data / "test_2016_flickr.en.gz"))
    p.add_argument("--limit", type=int, default=0, help="first N sentences (0: all)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=0, help="0: the checkpoint's decode setting")
    args = p.parse_args()
    load_start = os.getloadavg()[0]
    loaded = load_checkpoint(args.checkpoint, args.threads)
    tok, model, dcfg = loaded.tokenizer, loaded.model, loaded.cfg.decode
    # Plain beam search with the checkpoint's length settings (its other options left out).
    args.search = DecodeConfig(
        beam=args.beam, alpha=dcfg.alpha, max_len_a=dcfg.max_len_a, max_len_b=dcfg.max_len_b
    )
    args.max_tokens = args.max_tokens or dcfg.max_tokens
    src_lines = read_lines(Path(args.src))[: args.limit or None]
    refs = read_lines(Path(args.ref))[: len(src_lines)]
    ids = tok.encode_src(src_lines)

    # Untimed first pass (also the warm-up): the plain output the constraints are chosen against.
    plain = search_all(model, ids, None, args)
    plain_text = [tok.decode_tgt(h.tokens) for h in plain]
    words = {n: [missing_words(r, h, n) for r, h in zip(refs, plain_text)] for n in (1, 2)}
    cons = {n: [[phrase_ids(tok, w) for w in ws] for ws in words[n]] for n in (1, 2)}

    modes: dict[str, list[list[list[int]]] | None] = {"plain": None, "1 term": cons[1]}
    modes["2 terms"] = cons[2]
    runs = {name: (lambda c=c: search_all(model, ids, c, args)) for name, c in modes.items()}
    outputs, times = alternate(args.rounds, runs)

    n = len(ids)
    rows = []
    for name, c in modes.items():
        texts = [tok.decode_tgt(h.tokens) for h in outputs[name]]
        s = score(texts, refs)
        total = met_ids = met_text = same = free = 0
        if c is not None:
            for h, q, phrases in zip(outputs[name], outputs["plain"], c):
                if not phrases:  # no constraint: must be plain beam search's output
                    free += 1
                    same += h.tokens == q.tokens
            n_words = words[1] if name == "1 term" else words[2]
            for h, text, phrases, ws in zip(outputs[name], texts, c, n_words):
                total += len(phrases)
                met_ids += sum(contains(h.tokens, ph) for ph in phrases)
                met_text += sum(w in text for w in ws)
        best, worst = min(times[name]), max(times[name])
        rows.append(
            {
                "search": name,
                "constraints": total,
                "sentences_constrained": sum(1 for x in (c or []) if x),
                "met_tokens": met_ids / total if total else None,
                "met_text": met_text / total if total else None,
                "unconstrained_same_as_plain": f"{same}/{free}" if c is not None else None,
                "bleu": round(s.bleu, 2),
                "sent_per_s": round(n / best, 1),
                "sent_per_s_slowest": round(n / worst, 1),
                "slowdown": round(best / min(times["plain"]), 2),
                "mean_len": round(sum(len(h.tokens) for h in outputs[name]) / n, 2),
            }
        )

    print(f"{n} sentences, beam {args.beam}, {args.threads} threads, {args.rounds} rounds")
    print(f"machine: {describe_machine()}")
    print(
        f"load average (1 min): {load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end"
    )
    header = ("search", "constraints", "met", "in text", "BLEU", "sent/s", "slowest", "x plain")
    print(markdown_table((*header, "len"), [table_row(r) for r in rows]))
    for r in rows[1:]:
        print(
            f"{r['search']}: unconstrained sentences as plain: {r['unconstrained_same_as_plain']}"
        )
    print(f"BLEU signature: {s.bleu_signature}")
    print(
        json.dumps(
            {
                "checkpoint": str(args.checkpoint),
                "sentences": n,
                "beam": args.beam,
                "threads": args.threads,
                "rounds": args.rounds,
                "loadavg_1min": [load_start, os.getloadavg()[0]],
                "results": rows,
            }
        )
    )


if __name__ == "__main__":
    main()

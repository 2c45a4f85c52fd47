"""Is an imported model exactly HF's? Output and scores of `mt` against transformers on Multi30k.

Builds the small models the import tests build (scripts/hf_models.py: a Marian de-en, an
M2M-100 with fairseq's dictionary, an M2M-100 with NLLB-200's tokenizer), trained for
`--steps` Adam steps on a Multi30k slice so that their outputs vary, imports each with
`mt import`, and compares on the first `--lines` test_2016_flickr sentences (German in), at
each folder's own generation config (4 beams, `max_length` 64: 61-62 new tokens, so that
searches that part late are seen, not cut off at HF's default of 20):

- `mt translate --greedy` against HF `generate(num_beams=1)`, and `mt translate` with no search
  flag (the checkpoint carries the folder's rules) against `generate()` with none (for M2M and
  NLLB with `forced_bos_token_id` = the target language's token): identical lines counted, for
  each `--dtypes` entry: `auto` (no `--dtype`: what this CPU's default gives a user), `fp32`,
  `bf16` (how far a bf16 copy strays);
- `mt score` against HF's log-probabilities (the tokens after the forced language token) on
  every pair of a source with its reference and with HF's greedy output, for each dtype: the
  largest relative difference, and how many pairs are within 1e-4.

    OMP_NUM_THREADS=1 python -m scripts.bench.import_parity --data $MT_DATA --lines 200

Every `mt` command runs as a user runs it (`python -m mt ...` in a child process, the CPU's own
flags). Numbers are kept by default (`mt translate`'s guard); the sentences compared are
translated with `--no-keep-numbers` as well, and a line where the two differ is counted apart
(`guard_changed`): there the model dropped a number and `mt` put it back, which HF does not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from scripts.common import describe_machine, machine, markdown_table, read_lines, say, write_text
from tests.support.hf_models import NLLB_LANGS, build_m2m, build_marian, build_nllb

TOLERANCE = 1e-4


@dataclass
class Target:
    """One direction of a model: mt's `--to` flag, HF's target language, the reference's."""

    to: str | None  # None: the model has one target (Marian)
    lang: str | None  # HF tokenizer's tgt_lang, whose token is forced first
    ref: str  # the Multi30k language of the reference


CASES = {
    "marian": (build_marian, [Target(None, None, "en")]),
    "m2m": (build_m2m, [Target("en", "en", "en"), Target("fr", "fr", "fr")]),
    "nllb": (
        build_nllb,
        [Target(NLLB_LANGS[x], NLLB_LANGS[x], x) for x in ("en", "fr")],
    ),
}

# The M2M tokenizer was saved without a src_lang (HF's default is then en): name it.
IMPORT_FLAGS = {"m2m": ("--src-lang", "de")}


def hf_model(name: str, folder: Path):
    """HF's model and tokenizer of the folder, the source language set as the tests set it."""
    from transformers import (
        M2M100ForConditionalGeneration,
        M2M100Tokenizer,
        MarianMTModel,
        MarianTokenizer,
        NllbTokenizer,
    )

    if name == "marian":
        return MarianMTModel.from_pretrained(folder).eval(), MarianTokenizer.from_pretrained(folder)
    model = M2M100ForConditionalGeneration.from_pretrained(folder).eval()
    if name == "m2m":
        tok = M2M100Tokenizer.from_pretrained(folder)
        tok.src_lang = "de"
    else:
        tok = NllbTokenizer.from_pretrained(folder)
        tok.src_lang = NLLB_LANGS["de"]
    return model, tok


def forced_id(tok, lang: str) -> int:
    """The id of a language's token: M2M-100's `__fr__`, NLLB's `fra_Latn`."""
    return tok.get_lang_id(lang) if hasattr(tok, "get_lang_id") else tok.convert_tokens_to_ids(lang)


def hf_generate(hf, lines: list[str], target: Target, beams: int | None, batch: int) -> list[str]:
    """HF's outputs; `beams` None: the generation config's own number of beams."""
    model, tok = hf
    out: list[str] = []
    settings = {} if beams is None else {"num_beams": beams}
    if target.lang:
        settings["forced_bos_token_id"] = forced_id(tok, target.lang)
    skip = 2 if target.lang else 0  # the decoder's start and the forced language token
    for i in range(0, len(lines), batch):
        enc = tok(lines[i : i + batch], return_tensors="pt", padding=True)
        with torch.no_grad():
            ids = model.generate(**enc, **settings)
        out += tok.batch_decode(ids[:, skip:], skip_special_tokens=True)
    return out


def hf_scores(hf, src: list[str], tgt: list[str], target: Target) -> list[float]:
    """HF's log-probability of each target given its source (after the forced token)."""
    model, tok = hf
    if target.lang:
        tok.tgt_lang = target.lang
    first = 1 if target.lang else 0
    out = []
    for s, t in zip(src, tgt):
        enc = tok([s], text_target=[t], return_tensors="pt")
        with torch.no_grad():
            logits = model(**enc).logits[0]
        labels = enc["labels"][0]
        out.append(logits.log_softmax(-1).gather(1, labels[:, None])[first:].sum().item())
    return out


def mt(*args: object) -> str:
    """One `mt` command in a child process; its stdout."""
    cmd = [sys.executable, "-m", "mt", *map(str, args)]
    result = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[2:])} failed: {result.stderr.strip()[-500:]}")
    return result.stdout


def mt_auto() -> str:
    """What `auto` decodes in on this CPU (the flags `mt` reads, MT_CPU_FLAGS where set)."""
    from mt.device import resolve_decode_dtype

    return resolve_decode_dtype("auto", torch.device("cpu")).describe()


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


DTYPE_FLAGS = {"auto": (), "fp32": ("--dtype", "fp32"), "bf16": ("--dtype", "bf16")}
SEARCHES = {"greedy": (1, ("--greedy",)), "own": (None, ())}  # own: the folder's config


def compare(name: str, ckpt: Path, hf, target: Target, data: Path, src: Path, args) -> dict:
    """Output and score parity of one model in one direction, per dtype."""
    lines = src.read_text(encoding="utf-8").splitlines()
    to = ("--to", target.to) if target.to else ()
    row: dict = {"model": name, "target": target.to or target.ref, "lines": len(lines)}
    theirs = {s: hf_generate(hf, lines, target, b, args.batch) for s, (b, _) in SEARCHES.items()}
    for search, (_, flags) in SEARCHES.items():
        row[f"{search}_distinct"] = len(set(theirs[search]))
        for dtype in args.dtypes:
            args_ = (*flags, *DTYPE_FLAGS[dtype], *to, "--input", src)
            ours = mt("translate", ckpt, *args_).splitlines()
            bare = mt("translate", ckpt, *args_, "--no-keep-numbers").splitlines()
            same = sum(a == b for a, b in zip(ours, theirs[search]))
            row[f"{search}_{dtype}_identical"] = same
            row[f"{search}_{dtype}_bare_identical"] = sum(
                a == b for a, b in zip(bare, theirs[search])
            )
            row[f"{search}_{dtype}_guard_changed"] = sum(a != b for a, b in zip(ours, bare))
            differ = [(s, a, b) for s, a, b in zip(lines, bare, theirs[search]) if a != b]
            row[f"{search}_{dtype}_first_differences"] = differ[:3]
    ref = read_lines(data / f"test_2016_flickr.{target.ref}.gz")[: len(lines)]
    src_pairs, tgt_pairs = lines + lines, ref + theirs["greedy"]
    folder = src.parent
    s = write(folder / f"{name}.{row['target']}.s", src_pairs)
    t = write(folder / f"{name}.{row['target']}.t", tgt_pairs)
    hf_lp = hf_scores(hf, src_pairs, tgt_pairs, target)
    row["score_pairs"] = len(hf_lp)
    for dtype in args.dtypes:
        out = mt("score", ckpt, "--src", s, "--tgt", t, *to, *DTYPE_FLAGS[dtype])
        ours_lp = [float(x.split("\t")[0]) for x in out.splitlines()]
        rel = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(ours_lp, hf_lp)]
        row[f"score_{dtype}_within"] = sum(r <= TOLERANCE for r in rel)
        row[f"score_{dtype}_max_rel"] = max(rel)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("MT_DATA", "data")))
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--steps", type=int, default=300, help="Adam steps of each model")
    parser.add_argument("--batch", type=int, default=25, help="HF generate's batch")
    parser.add_argument("--models", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument(
        "--dtypes", nargs="+", default=list(DTYPE_FLAGS), choices=list(DTYPE_FLAGS),
        help="auto: no --dtype, the CPU's default",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    report: dict = {"machine": machine(), "steps": args.steps, "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        src = write(
            root / "test.de", read_lines(args.data / "test_2016_flickr.de.gz")[: args.lines]
        )
        for name in args.models:
            build, targets = CASES[name]
            say(f"building {name} ({args.steps} steps)")
            folder = build(args.data, root / name, steps=args.steps)
            ckpt = root / f"{name}.pt"
            say(f"importing {name}")
            mt("import", folder, "-o", ckpt, *IMPORT_FLAGS.get(name, ()))
            hf = hf_model(name, folder)
            for target in targets:
                row = compare(name, ckpt, hf, target, args.data, src, args)
                say(json.dumps({k: v for k, v in row.items() if "differences" not in k}))
                report["rows"].append(row)
    report["machine_line"] = describe_machine(report["machine"])
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    header = ["model", "target", "dtype", "greedy identical", "own config identical",
              "guard changed", "distinct (greedy / own)", "score within 1e-4",
              "max relative difference"]  # fmt: skip
    table = [
        [r["model"], r["target"], d, f"{r[f'greedy_{d}_identical']}/{r['lines']}",
         f"{r[f'own_{d}_identical']}/{r['lines']}",
         f"{r[f'greedy_{d}_guard_changed']} / {r[f'own_{d}_guard_changed']}",
         f"{r['greedy_distinct']} / {r['own_distinct']}",
         f"{r[f'score_{d}_within']}/{r['score_pairs']}", f"{r[f'score_{d}_max_rel']:.1e}"]
        for r in report["rows"] for d in args.dtypes
    ]  # fmt: skip
    report["auto_here"] = mt_auto()
    text = json.dumps(report, indent=1, ensure_ascii=False)
    print(text)
    print(markdown_table(header, table, "lll" + "r" * 6))
    print("auto decodes here:", report["auto_here"])
    print(report["machine_line"], "load after", report["load_after"])
    if args.json:
        write_text(args.json, text + "\n")


if __name__ == "__main__":
    main()

"""`mt import` of an OPUS-MT-sized model: import time, peak memory, and decoding speed against
HF `generate` and CTranslate2 (converted by CTranslate2's own converter from the same folder).

No OPUS-MT download is possible here, so the model is built locally in OPUS-MT's base shape
(6+6 layers, d_model 512, 8 heads, FFN 2048, swish, a 58,101-piece joint vocabulary) with
random weights; its sentencepiece models are trained on Multi30k (8,000 pieces) and vocab.json
is filled up to the full size with unused pieces, so the weights have OPUS-MT's size. Random
weights write until the length limit, so every engine decodes the same number of tokens per
sentence (the generation config's max_length, 64 here): the speeds compare per-token cost.

    pip install -e '.[bench]'
    OMP_NUM_THREADS=1 python -m scripts.bench.importing --data $MT_DATA --lines 100 --rounds 2

Engines alternate over rounds (the best round is reported), one thread each. `mt` decodes as
`auto` does on a CPU (fp32), `mt-bf16` a bf16 copy (`--dtype bf16`): on a CPU with native bf16
(`avx512_bf16`, AMX) what asking for bf16 gains on an OPUS-MT-sized model.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from scripts.common import alternate, machine, print_report, read_lines, say

VOCAB = 58_101
MAX_LENGTH = 64


def build(folder: Path, data: Path) -> int:
    """The base-shape Marian folder; returns the bytes of its weights file."""
    import sentencepiece as spm
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    folder.mkdir(parents=True)
    vocab = {"</s>": 0, "<unk>": 1}
    for side, lang in (("source", "de"), ("target", "en")):
        text = folder.parent / f"{lang}.txt"
        text.write_text("\n".join(read_lines(data / f"train.{lang}.gz")) + "\n", "utf-8")
        prefix = folder.parent / side
        spm.SentencePieceTrainer.train(
            input=str(text),
            model_prefix=str(prefix),
            vocab_size=8000,
            hard_vocab_limit=False,
            minloglevel=2,
        )
        (folder / f"{side}.spm").write_bytes(prefix.with_suffix(".model").read_bytes())
        sp = spm.SentencePieceProcessor(model_file=str(prefix.with_suffix(".model")))
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
    while len(vocab) < VOCAB - 1:
        vocab[f"<unused{len(vocab)}>"] = len(vocab)
    vocab["<pad>"] = VOCAB - 1
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
    settings = {"source_lang": "de", "target_lang": "en", "separate_vocabs": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings), "utf-8")
    pad = VOCAB - 1
    config = MarianConfig(
        vocab_size=VOCAB,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        max_position_embeddings=512,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
    )
    torch.manual_seed(0)
    model = MarianMTModel(config).eval()
    model.generation_config = GenerationConfig(
        bad_words_ids=[[pad]],
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        pad_token_id=pad,
        max_length=MAX_LENGTH,
        num_beams=4,
    )
    model.save_pretrained(folder)
    return (folder / "model.safetensors").stat().st_size


# Runs a command and prints its peak resident memory (KiB) as the last line. Launched from
# here, the peak is the import's own: Linux counts the memory of the process that forks a child
# in that child's ru_maxrss (exec records the forked copy's high-water mark), and this script's
# process holds the HF model it built, which made the first figures read 3.2x for 2.3x.
PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.exit(code)\n"
)


def time_import(folder: Path, out: Path) -> dict:
    """`mt import` in a child process: wall seconds and its peak resident memory."""
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", PEAK, sys.executable, "-m", "mt", "import", str(folder)]
        + ["-o", str(out)],
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    if result.returncode:
        raise SystemExit(f"mt import failed: {result.stderr.strip()}")
    peak = int(result.stdout.strip().splitlines()[-1]) * 1024
    return {"seconds": round(seconds, 2), "peak_bytes": peak}


def engines(folder: Path, checkpoint: Path, lines: list[str], beam: int, batch: int) -> dict:
    """One decode of `lines` per engine, as callables for `alternate`."""
    import ctranslate2
    from transformers import MarianMTModel, MarianTokenizer

    from mt.translation.requests import Plan, Request
    from mt.translation.session import DecodeOptions, Session

    PLAN = Plan(protect=False, recase=False, keep_numbers=False)  # noqa: N806 - the search alone

    session = Session([checkpoint], "cpu")
    options = DecodeOptions(greedy=beam == 1, beam=beam)
    translator = session.translator(options)  # auto: fp32 on a CPU
    half = session.translator(DecodeOptions(greedy=beam == 1, beam=beam, dtype="bf16"))
    hf = MarianMTModel.from_pretrained(folder).eval()
    tok = MarianTokenizer.from_pretrained(folder)
    ct2_dir = folder.parent / "ct2"
    if not ct2_dir.exists():
        ctranslate2.converters.TransformersConverter(str(folder)).convert(str(ct2_dir))
    ct2 = ctranslate2.Translator(str(ct2_dir), device="cpu", intra_threads=1)
    ordered = sorted(lines, key=len)

    def run_mt() -> int:
        return len(translator.translate([Request(x, plan=PLAN) for x in lines]))

    def run_mt_bf16() -> int:
        return len(half.translate([Request(x, plan=PLAN) for x in lines]))

    def run_hf() -> int:
        n = 0
        for i in range(0, len(ordered), batch):
            enc = tok(ordered[i : i + batch], return_tensors="pt", padding=True)
            with torch.inference_mode():
                n += len(hf.generate(**enc, num_beams=beam, max_length=MAX_LENGTH))
        return n

    def run_ct2() -> int:
        pieces = [tok.convert_ids_to_tokens(tok(line).input_ids) for line in lines]
        found = ct2.translate_batch(
            pieces, beam_size=beam, max_batch_size=batch, max_decoding_length=MAX_LENGTH - 1
        )
        return len(found)

    return {"mt": run_mt, "mt-bf16": run_mt_bf16, "hf": run_hf, "ct2": run_ct2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("MT_DATA", "")))
    parser.add_argument("--lines", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--import-only", action="store_true", help="skip the decoding speeds")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4], help="beam sizes timed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    report: dict = {"machine": machine()}
    with tempfile.TemporaryDirectory() as tmp:
        folder, out = Path(tmp) / "opus-base", Path(tmp) / "opus-base.pt"
        say("building the base-shape Marian folder")
        weights = build(folder, args.data)
        say("importing")
        imported = time_import(folder, out)
        imported["weights_bytes"] = weights
        imported["peak_over_weights"] = round(imported["peak_bytes"] / weights, 2)
        report["import"] = imported
        say(f"import: {imported}")
        lines = read_lines(args.data / "test_2016_flickr.de.gz")[: args.lines]
        for beam in () if args.import_only else args.beams:
            runs = engines(folder, out, lines, beam, args.batch)
            _, seconds = alternate(args.rounds, runs)
            best = {name: min(s) for name, s in seconds.items()}
            report[f"beam{beam}"] = {
                name: {
                    "seconds": round(s, 2),
                    "sentences_per_s": round(len(lines) / s, 2),
                    "rounds": [round(x, 2) for x in seconds[name]],
                }
                for name, s in best.items()
            }
            say(f"beam {beam}: {report[f'beam{beam}']}")
    print_report(report, args.json)


if __name__ == "__main__":
    main()

"""End to end through the real command line: train, translate and eval as a user runs them.

Every command runs as `python -m mt ...` in a child process (the `mt_cli` fixture), so exit
codes, stdout and stderr are exactly what a shell sees. One tiny Multi30k run (`tiny_run`,
conftest.py) is trained once and shared; the copy task trains its own model to a high BLEU.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import re
from pathlib import Path

import pytest
import yaml

NBEST_LINE = re.compile(r"^(\d+) \|\|\| (.*) \|\|\| (-?\d+\.\d+)$")


def test_help_lists_the_commands(mt_process):
    """The installed entry point itself starts (a real `python -m mt`) and lists the commands."""
    result = mt_process("--help")
    assert result.rc == 0, result.err
    for command in ("train", "translate", "eval"):
        assert command in result.out


# -- a synthetic task a tiny model must learn ----------------------------------------------------


def write_copy_task(root: Path, seed: int = 0) -> None:
    """`{train,val,test}.{src,tgt}`: random sentences over 20 pseudo-words, target = source.

    The test sentences never occur in training, so a high BLEU means the model learnt to copy,
    not to remember.
    """
    rng = random.Random(seed)
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    words: set[str] = set()
    while len(words) < 20:
        words.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(2)))
    vocab = sorted(words)
    sentences: list[str] = []
    seen: set[str] = set()
    while len(sentences) < 2700:
        s = " ".join(rng.choice(vocab) for _ in range(rng.randint(3, 8)))
        if s not in seen:
            seen.add(s)
            sentences.append(s)
    splits = {"test": sentences[:100], "val": sentences[100:200], "train": sentences[200:]}
    root.mkdir(parents=True, exist_ok=True)
    for name, lines in splits.items():
        for lang in ("src", "tgt"):
            (root / f"{name}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")


COPY_CONFIG = {
    "data": {"src_lang": "src", "tgt_lang": "tgt", "test": "test", "max_valid_examples": 50},
    # 64 is more than the corpus needs: every pseudo-word becomes one piece.
    "tokenizer": {"vocab_size": 64},
    "model": {
        "d_model": 64,
        "n_heads": 4,
        "d_ff": 128,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "dropout": 0.0,
    },
    "train": {
        "device": "cpu",
        "threads": 1,
        "max_tokens": 1024,
        "schedule": "inverse_sqrt",
        "lr": 0.006,
        "warmup": 50,
        "label_smoothing": 0.0,
        "max_steps": 400,
        "log_every": 50,
        "eval_every": 200,
        "eval_bleu": False,
        "keep_last": 0,
    },
    "decode": {"beam": 2},
}


@pytest.mark.slow  # ~30 s; the README demo shows learning, quick runs stay default
def test_copy_task_trains_to_high_bleu(tmp_path, mt_cli):
    data = tmp_path / "data"
    write_copy_task(data)
    config = {**COPY_CONFIG, "data": {**COPY_CONFIG["data"], "root": str(data)}}
    config_path = tmp_path / "copy.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    run_dir = tmp_path / "run"

    trained = mt_cli("train", config_path, "--run-dir", run_dir)
    assert trained.rc == 0, trained.err
    losses = [r["loss"] for r in map(json.loads, (run_dir / "metrics.jsonl").open()) if "loss" in r]
    assert losses[-1] < losses[0] / 10

    test_src, test_ref = data / "test.src", data / "test.tgt"
    result = mt_cli("eval", run_dir / "last.pt", "--src", test_src, "--ref", test_ref, "--json")
    assert result.rc == 0, result.err
    scores = json.loads(result.out)
    assert scores["sentences"] == 100
    assert scores["bleu"] > 90, scores

    # The faster decoding options keep the learnt task: int8 Linear layers, CTranslate2's rule.
    for option in ("--int8", "--stop-early"):
        fast = mt_cli(
            "eval", run_dir / "last.pt", "--src", test_src, "--ref", test_ref, "--json", option
        )
        assert fast.rc == 0, fast.err
        assert json.loads(fast.out)["bleu"] > scores["bleu"] - 2, (option, fast.out)


# -- a tiny model on real data: the run directory and every output format ------------------------


def test_run_dir_holds_everything_a_run_makes(tiny_run):
    for name in ("spm.model", "config.yaml", "metrics.jsonl", "last.pt", "best.pt"):
        assert (tiny_run / name).is_file(), name
    config = yaml.safe_load((tiny_run / "config.yaml").read_text(encoding="utf-8"))
    assert config["train"]["max_steps"] == 60  # the resolved config, --set overrides applied
    assert config["model"]["d_model"] == 64

    records = [json.loads(line) for line in (tiny_run / "metrics.jsonl").open(encoding="utf-8")]
    train_logs = [r for r in records if "loss" in r]
    assert [r["step"] for r in train_logs] == [10, 20, 30, 40, 50, 60]
    for r in train_logs:
        assert math.isfinite(r["loss"]) and r["loss"] > 0
        assert r["lr"] > 0
    assert train_logs[-1]["loss"] < train_logs[0]["loss"]
    evals = [r for r in records if "valid_loss" in r]
    assert [r["step"] for r in evals] == [30, 60]
    assert all("dev_bleu" in r for r in evals)
    assert records[-1]["stopped"] == "max_steps"


def test_translate_gives_one_line_per_input_line(tiny_run, mt_cli):
    text = "Ein Mann fährt Fahrrad.\n\nZwei Hunde spielen im Schnee.\n"
    result = mt_cli("translate", tiny_run / "best.pt", stdin=text)
    assert result.rc == 0, result.err
    lines = result.out.split("\n")
    assert lines[-1] == "" and len(lines[:-1]) == 3, result.out
    assert lines[1] == ""  # an empty input line stays an empty output line


def test_nbest_prints_n_lines_per_input(tiny_run, mt_cli):
    text = "Ein Mann fährt Fahrrad.\n\nZwei Hunde spielen im Schnee.\n"
    result = mt_cli("translate", tiny_run / "best.pt", "--nbest", "2", "--beam", "3", stdin=text)
    assert result.rc == 0, result.err
    lines = result.out.splitlines()
    assert len(lines) == 6, result.out
    parsed = []
    for line in lines:
        match = NBEST_LINE.match(line)
        assert match, line
        assert len(line.split(" ||| ")) == 3, line  # what a script splitting the fields sees
        parsed.append((int(match[1]), match[2], float(match[3])))
    assert [i for i, _, _ in parsed] == [0, 0, 1, 1, 2, 2]
    assert parsed[2][1] == parsed[3][1] == ""  # the empty input line
    for first, second in (parsed[0:2], parsed[4:6]):
        assert first[2] >= second[2]  # best first


def test_translate_output_file(tiny_run, mt_cli, multi30k_dir, tmp_path):
    with gzip.open(multi30k_dir / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        sources = [next(f) for _ in range(7)]
    src = tmp_path / "in.de"
    src.write_text("".join(sources), encoding="utf-8")
    out = tmp_path / "out.en"
    result = mt_cli("translate", tiny_run / "best.pt", "--input", src, "--output", out)
    assert result.rc == 0, result.err
    assert result.out == ""
    assert len(out.read_text(encoding="utf-8").splitlines()) == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.de", "out.en"]  # no temp file left


def test_eval_of_the_reference_is_100_and_gates(mt_cli, tmp_path):
    ref = tmp_path / "ref.en"
    ref.write_text("A man rides a bike.\nTwo dogs play in the snow.\n", encoding="utf-8")
    result = mt_cli("eval", "--hyp", ref, "--ref", ref, "--json")
    assert result.rc == 0, result.err
    assert json.loads(result.out)["bleu"] == pytest.approx(100.0)

    above = mt_cli("eval", "--hyp", ref, "--ref", ref, "--min-bleu", "100.5")
    assert above.rc == 1
    assert "below --min-bleu" in above.err
    below = mt_cli("eval", "--hyp", ref, "--ref", ref, "--min-bleu", "99")
    assert below.rc == 0, below.err


def test_eval_of_empty_files_is_one_line_exit_2(tiny_run, mt_cli, tmp_path):
    """Exit 1 is the --min-bleu gate's "below the bar"; nothing to score is a usage error."""
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    for args in (("--hyp", empty), (tiny_run / "best.pt", "--src", empty)):
        result = mt_cli("eval", *args, "--ref", empty, "--min-bleu", "10")
        assert result.rc == 2, result.err
        assert result.err == f"mt: error: {empty} is empty: no reference lines to score against\n"
        assert result.out == ""


def test_eval_checkpoint_and_min_bleu_gate(tiny_run, mt_cli, multi30k_dir, tmp_path):
    for lang in ("de", "en"):
        with gzip.open(multi30k_dir / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            (tmp_path / f"test.{lang}").write_text("".join(next(f) for _ in range(20)))
    args = ["eval", tiny_run / "best.pt", "--src", tmp_path / "test.de", "--ref"]
    args += [tmp_path / "test.en", "--greedy"]

    passed = mt_cli(*args, "--json", "--min-bleu", "0")
    assert passed.rc == 0, passed.err
    scores = json.loads(passed.out)
    assert scores["sentences"] == 20
    assert 0 <= scores["bleu"] <= 100
    assert scores["bleu_signature"].startswith("nrefs:1|")

    failed = mt_cli(*args, "--min-bleu", str(scores["bleu"] + 1))
    assert failed.rc == 1
    assert "below --min-bleu" in failed.err
    assert "Traceback" not in failed.err


def test_alignment_pairs_each_target_token_with_a_source_token(tiny_run, mt_cli):
    lines = ["Ein Mann fährt Fahrrad.", "", "Zwei Hunde spielen im Schnee."]
    result = mt_cli("translate", tiny_run / "best.pt", "--alignment", stdin="\n".join(lines) + "\n")
    assert result.rc == 0, result.err
    out = result.out.split("\n")[:-1]
    assert len(out) == 3 and out[1] == "\t"
    import sentencepiece as spm  # the checkpoint's own tokenizer counts the tokens

    sp = spm.SentencePieceProcessor(model_file=str(tiny_run / "spm.model"))
    for src, line in zip(lines, out):
        if not src:
            continue
        text, pairs = line.split("\t")
        pairs = [tuple(map(int, p.split("-"))) for p in pairs.split()]
        assert pairs and [t for _, t in pairs] == list(range(len(pairs)))  # one per token
        assert all(0 <= s <= len(sp.encode(src)) for s, _ in pairs)  # `</s>` is the last

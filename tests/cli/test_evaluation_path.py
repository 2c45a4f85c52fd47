"""Training's dev translations go through the translator's one path, as `mt eval`'s do: spans
kept and restored, capitals handled, so dev BLEU is what `mt eval` measures."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch
from support.inprocess import run_in_process

from mt.checkpoint import load_model
from mt.spans import find_spans
from mt.train import setup
from mt.train.evaluation import DevSet
from mt.translation.session import Session

LINES = [
    "Ein Hund läuft %s über die Wiese.",
    "Zwei Männer {0} spielen <b>Fußball</b> im Park.",
    "EIN MANN FÄHRT MIT DEM FAHRRAD.",
    "Eine Frau liest ein Buch.",
]


def _spans(text: str) -> Counter:
    return Counter(s.text for s in find_spans(text))


def test_dev_translations_are_what_mt_translate_writes(
    tiny_run: Path, tmp_path, capsys, monkeypatch
):
    loaded = load_model(tiny_run / "best.pt", torch.device("cpu"))
    dev = DevSet(None, LINES, LINES)  # type: ignore[arg-type] - the loss is not asked for
    cpu = torch.device("cpu")
    evaluator = setup.evaluator(loaded.cfg, loaded.model, loaded.tokenizer, [dev], cpu, "fp32")
    # The trainer's evaluation reaches its translator through mt eval's door.
    assert isinstance(evaluator.session, Session) and evaluator.session.model is loaded.model
    hyps = evaluator.translate(LINES)
    # Every span of the source comes back, exactly as often (before, the evaluation's search
    # banned spans but never restored them: the tiny model drops or mangles them).
    for line, hyp in zip(LINES, hyps):
        assert _spans(hyp) == _spans(line), (line, hyp)
    # And the same text as `mt translate` (mt eval's path) with the evaluation's settings.
    src = tmp_path / "dev.de"
    src.write_text("".join(x + "\n" for x in LINES), encoding="utf-8")
    d = loaded.cfg.decode
    args = ["translate", tiny_run / "best.pt", "-i", src, "--greedy", "--device", "cpu"]
    args += ["--dtype", "fp32", "--max-len-a", d.max_len_a, "--max-len-b", d.max_len_b]
    rc, out, err = run_in_process(args, capsys, monkeypatch)
    assert rc == 0, err
    assert out.splitlines() == hyps

"""Numbers: every digit sequence of the source in the output; the guard and the eval rate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.inprocess import run_in_process

from mt.translation.number_guard import digits, kept, kept_rate, missing, numbers
from mt.translation.requests import Plan, Request
from mt.translation.session import Session


def test_numbers_compare_by_digits_across_separators():
    src = "Um 10:30 Uhr kamen 2.500 Menschen, 3,5 km weit."
    assert numbers(src) == ["10:30", "2.500", "3,5"]
    assert digits("2.500") == digits("2,500") == "2500"
    assert kept(src, "At 10:30, 2,500 people came 3.5 km.")
    assert missing(src, "At 10:30 people came 3.5 km.") == ["2.500"]
    assert missing("2 und 2", "2 and two") == ["2"]  # as often as the source has it
    assert kept("Ein Hund.", "A dog.")
    # Digits inside a protected span are the span's, kept whole by the protection stage.
    assert numbers("Datei {1} hat 3 Seiten, siehe %2$s oder https://x.de/7") == ["3"]
    assert kept_rate(["1 Hund", "Ein Hund", "2 Hunde"], ["1 dog", "A dog", "dogs"]) == {
        "lines": 2,
        "kept": 50.0,
    }


@pytest.fixture(scope="module")
def translator(tiny_run: Path):
    return Session([tiny_run / "best.pt"], "cpu").translator()


# Digits the tiny model's 600-piece vocabulary can spell (it has no 6, 7 or 8).
LINES = [
    "Ein Mann mit 4512 Hunden.",
    "Um 14:35 Uhr spielen 9 Kinder im Park.",
    "Im Jahr 1993 fährt eine Frau 12,5 km.",
    "Zwei Hunde spielen im Schnee.",
]


def test_the_guard_writes_lost_numbers(translator):
    off = [Request(x, plan=Plan(recase=False, keep_numbers=False)) for x in LINES]
    plain = translator.translate(off)
    assert any(not kept(s, t.text) for s, t in zip(LINES, plain))  # the tiny model loses some
    # The guard is on by default: a plan that names nothing keeps the numbers.
    guarded = translator.translate([Request(x, plan=Plan(recase=False)) for x in LINES])
    assert all(kept(s, t.text) for s, t in zip(LINES, guarded)), [t.text for t in guarded]
    assert guarded[3].text == plain[3].text  # a line without numbers is not searched again


def test_eval_check_numbers(tiny_run, tmp_path, capsys, monkeypatch):
    src, ref = tmp_path / "src.de", tmp_path / "ref.en"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    ref.write_text("A man with 4512 dogs.\nAt 14:35, 9 kids play.\nIn 1993 a woman drives "
                   "12.5 km.\nTwo dogs play in the snow.\n", encoding="utf-8")  # fmt: skip
    args = ["eval", tiny_run / "best.pt", "--src", src, "--ref", ref, "--device", "cpu"]
    off = [*args, "--json", "--check-numbers", "--no-keep-numbers"]
    rc, out, err = run_in_process(off, capsys, monkeypatch)
    assert rc == 0, err
    report = json.loads(out)
    assert report["numbers"]["lines"] == 3 and report["numbers"]["kept"] < 100
    assert report["doubt"]["lines"] == 4
    rc, out, err = run_in_process([*args, "--check-numbers"], capsys, monkeypatch)  # the default
    assert rc == 0, err
    assert "numbers kept: 100.0% of 3 lines" in out and "doubt:" in out
    rc, out, err = run_in_process(["eval", "--hyp", ref, "--ref", ref, "--check-numbers"],
                                  capsys, monkeypatch)  # fmt: skip
    assert rc == 2 and "--src" in err


def test_translate_keeps_a_lines_digits_by_default(tiny_run, mt_cli):
    """With no flag, every number comes back; `--no-keep-numbers` shows the model alone."""
    lines = ["Ein Mann mit 3 Hunden wartet seit 17 Minuten an der Haltestelle 42.", *LINES]
    text = "\n".join(lines) + "\n"
    plain = mt_cli("translate", tiny_run / "best.pt", stdin=text)
    off = mt_cli("translate", tiny_run / "best.pt", "--no-keep-numbers", stdin=text)
    assert plain.rc == off.rc == 0, plain.err
    ours, alone = plain.out.splitlines(), off.out.splitlines()
    assert len(ours) == len(alone) == len(lines)
    assert all(kept(s, t) for s, t in zip(lines, ours)), ours
    assert not all(kept(s, t) for s, t in zip(lines, alone))  # the tiny model drops some
    assert ours[-1] == alone[-1]  # a line without numbers is not searched again

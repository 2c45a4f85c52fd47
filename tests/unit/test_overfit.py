"""The overfitting note (`mt.train.stop.overfit_note`): said once, when the validation NLL has
stopped falling and risen past noise, and not for a run that keeps improving.

The two series are the validation NLLs of real 30-minute runs of `configs/multi30k_de_en.yaml`
in bf16 on a Zen 5 CPU (docs/studies/recipe-search.md, round 28): as committed (24 epochs,
lowest at step 3,500) and with `model.dropout=0.2` (falling to the end)."""

from __future__ import annotations

from dataclasses import asdict

from mt.train.state import TrainState
from mt.train.stop import overfit_note

OVERFIT = [
    (500, 2.5518),
    (1000, 1.9322),
    (1500, 1.7275),
    (2000, 1.621),
    (2500, 1.5593),
    (3000, 1.5578),
    (3500, 1.5439),
    (4000, 1.5553),
    (4500, 1.5549),
    (5000, 1.5811),
    (5500, 1.5943),
    (6000, 1.6002),
    (6408, 1.597),
]
DROPOUT = [
    (500, 2.6849),
    (1000, 2.0159),
    (1500, 1.7844),
    (2000, 1.6715),
    (2500, 1.5947),
    (3000, 1.5465),
    (3500, 1.5162),
    (4000, 1.4921),
    (4500, 1.47),
    (5000, 1.4705),
    (5500, 1.4617),
    (6000, 1.445),
    (6479, 1.4406),
]


def notes(series: list[tuple[int, float]], s: TrainState | None = None) -> list[tuple[int, str]]:
    s = s or TrainState()
    out = []
    for step, nll in series:
        s.step = step
        note = overfit_note(s, nll)
        if note:
            out.append((step, note))
    return out


def test_an_overfitting_run_is_told_once_naming_its_lowest_step():
    said = notes(OVERFIT)
    assert [step for step, _ in said] == [5000]  # 3 evaluations after 3,500, 2.4% above it
    step, text = said[0]
    assert "1.581 at step 5000" in text and "1.544 at step 3500" in text
    assert "model.dropout" in text and "\n" not in text


def test_a_run_that_keeps_improving_is_not_told():
    assert notes(DROPOUT) == []


def test_a_plateau_within_noise_is_not_overfitting():
    flat = [(i * 500, 1.50 + 0.004 * (i % 2)) for i in range(1, 20)]  # 1.500 / 1.504 forever
    assert notes(flat) == []


def test_the_note_is_not_repeated_after_a_resume():
    s = TrainState()
    assert len(notes(OVERFIT[:10], s)) == 1
    resumed = TrainState(**asdict(s))  # as `--resume` rebuilds it from last.pt
    assert resumed.best_nll_step == 3500 and resumed.overfit_noted
    assert notes(OVERFIT[10:] + [(7000, 1.70)], resumed) == []


def test_a_state_saved_before_the_watch_resumes_with_it_off():
    old = {k: v for k, v in asdict(TrainState(step=800)).items() if "nll" not in k}
    old.pop("overfit_noted")
    s = TrainState(**old)  # a last.pt written without these fields
    assert s.best_nll == float("inf") and not s.overfit_noted
    assert notes(OVERFIT, s)[0][0] == 5000

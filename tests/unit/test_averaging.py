"""Weight averaging: the EMA of `train.ema_decay` during training, and `train.average_last` at
the end (best.pt the better of the average and the best evaluation, the run's id kept)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support.inprocess import run_mt_here
from support.tasks import reverse_task_config

from mt import checkpoint
from mt.train.averaging import Ema, average_at_end
from mt.train.rotation import Checkpoints
from mt.train.state import TrainState


def test_ema_equals_its_definition_over_a_few_steps():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    decay = 0.4
    ema = Ema(model, decay)
    # By hand: the average starts at the initial weights; after step k it is
    # d_k * average + (1 - d_k) * weights with d_k = min(decay, (1 + k) / (10 + k)).
    expected = [p.detach().clone() for p in model.parameters()]
    decays = []
    for k in range(1, 7):
        loss = (model(torch.randn(5, 3)) - 1).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        ema.update(k)
        d = min(decay, (1 + k) / (10 + k))
        decays.append(d)
        expected = [d * e + (1 - d) * p.detach() for e, p in zip(expected, model.parameters())]
        for got, want in zip(ema.shadow, expected):
            torch.testing.assert_close(got, want)
    assert decays[0] == pytest.approx(2 / 11) and decays[-1] == decay  # warmed up, then fixed
    own = [p.detach().clone() for p in model.parameters()]
    assert not all(torch.equal(a, b) for a, b in zip(own, expected))
    with ema.applied():  # the model holds the average inside, its own weights after
        for p, want in zip(model.parameters(), expected):
            torch.testing.assert_close(p.detach(), want)
    for p, mine in zip(model.parameters(), own):
        assert torch.equal(p.detach(), mine)


def step_weights(run_dir: Path) -> dict[int, dict[str, torch.Tensor]]:
    return {
        int(p.stem.split("_")[1]): torch.load(p, weights_only=True)["model"]
        for p in run_dir.glob("checkpoint_*.pt")
    }


def test_the_trainer_keeps_the_ema_of_its_own_weights(tmp_path, mt_cli):
    """A run without EMA writes its raw weights after every step; the same run with EMA
    writes the average instead. Each average must be the previous one moved towards that
    step's raw weights by the definition's decay: training itself is unchanged by the EMA."""
    steps, decay = 6, 0.5
    runs = {}
    for name, ema in (("raw", 0.0), ("ema", decay)):
        config = reverse_task_config(
            tmp_path / name, max_steps=steps, eval_every=1, keep_last=steps, ema_decay=ema
        )
        result = mt_cli("train", config, "--run-dir", tmp_path / name / "run")
        assert result.rc == 0, result.err
        runs[name] = tmp_path / name / "run"
    raw, avg = step_weights(runs["raw"]), step_weights(runs["ema"])
    assert sorted(raw) == sorted(avg) == list(range(1, steps + 1))
    for k in range(2, steps + 1):
        d = min(decay, (1 + k) / (10 + k))
        for name, w in raw[k].items():
            if not w.is_floating_point():
                continue
            want = d * avg[k - 1][name] + (1 - d) * w
            torch.testing.assert_close(avg[k][name], want, rtol=1e-5, atol=1e-6, msg=name)
    # last.pt: the raw weights (training goes on from them) and the average for --resume.
    last = torch.load(runs["ema"] / "last.pt", weights_only=True)
    for name, w in raw[steps].items():
        torch.testing.assert_close(last["model"][name], w, rtol=1e-5, atol=1e-6)
    names = [n for n, _ in checkpoint.load_model(runs["ema"] / "last.pt").model.named_parameters()]
    for name, saved in zip(names, last["train_state"]["ema"], strict=True):
        torch.testing.assert_close(saved, avg[steps][name])


@pytest.fixture(scope="module")
def averaged_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("average")
    config = reverse_task_config(folder, max_steps=8, eval_every=4, keep_last=2, average_last=2)
    result = run_mt_here("train", config, "--run-dir", folder / "run")
    assert result.rc == 0, result.err
    return folder / "run"


def records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_best_is_the_better_of_the_average_and_the_best_evaluation(averaged_run):
    logged = records(averaged_run)
    evals = [r["valid_loss"] for r in logged if "valid_loss" in r]
    averaged = [r for r in logged if "averaged_valid_loss" in r]
    assert len(evals) == 2 and len(averaged) == 1
    assert logged[-1]["stopped"] == "max_steps"  # the stop record stays the last
    best = torch.load(averaged_run / "best.pt", weights_only=True)
    mean = torch.load(averaged_run / "averaged.pt", weights_only=True)
    assert mean["run_id"] == best["run_id"]
    if averaged[0]["averaged_valid_loss"] < min(evals):  # no dev BLEU: the loss decides
        assert best["averaged_from"] == mean["averaged_from"]
        chosen = mean["model"]
    else:
        assert "averaged_from" not in best
        chosen = step_weights(averaged_run)[8 if evals[1] < evals[0] else 4]
    for name, w in chosen.items():
        assert torch.equal(best["model"][name], w), name


@pytest.mark.parametrize("wins", [True, False])
def test_averaging_at_the_end_replaces_best_only_when_better(averaged_run, tmp_path, wins):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(averaged_run, run)
    before = torch.load(run / "best.pt", weights_only=True)
    loaded = checkpoint.load_model(run / "last.pt")
    run_id = before["run_id"]
    own = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    ckpts = Checkpoints(run, loaded.cfg, loaded.tokenizer, loaded.model, run_id)
    state = TrainState(step=8, best_score=50.0, run_id=run_id)
    seen: list[torch.Tensor] = []

    def evaluate() -> dict[str, float]:  # what the dev set would say of the averaged weights
        seen.append(next(iter(loaded.model.state_dict().values())).clone())
        return {"valid_loss": 1.0, "dev_bleu": 60.0 if wins else 40.0}

    metrics, better = average_at_end(ckpts, loaded.model, 2, evaluate, state)
    assert better is wins and metrics["dev_bleu"] == (60.0 if wins else 40.0)
    a, b = (step_weights(run)[k] for k in (4, 8))
    first = next(iter(a))
    torch.testing.assert_close(seen[0], (a[first] + b[first]) / 2)  # it scored the mean
    for k, v in loaded.model.state_dict().items():  # and gave the model its weights back
        assert torch.equal(v, own[k])
    after = torch.load(run / "best.pt", weights_only=True)
    assert after["run_id"] == run_id
    if wins:
        assert state.best_score == 60.0 and after["metrics"]["dev_bleu"] == 60.0
        for name, w in a.items():
            if w.is_floating_point():
                torch.testing.assert_close(after["model"][name], (w + b[name]) / 2)
    else:
        assert state.best_score == 50.0
        for name, w in before["model"].items():
            assert torch.equal(after["model"][name], w)


def test_average_last_above_keep_last_is_one_line(tmp_path, mt_cli):
    config = reverse_task_config(tmp_path, keep_last=2, average_last=3)
    result = mt_cli("train", config, "--run-dir", tmp_path / "run")
    assert result.rc == 2
    assert result.err.count("\n") == 1 and "train.average_last (3)" in result.err
    assert "train.keep_last (2)" in result.err

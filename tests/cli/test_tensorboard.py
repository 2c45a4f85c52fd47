"""TensorBoard events, read back as TensorBoard reads them (EventAccumulator): every scalar is
the metrics.jsonl value at the same step, evaluations carry texts and the attention image, a
resumed run has each step once and in order, and the setting's three values behave."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.tasks import reverse_task_config

from mt.train.tensorboard import scalars

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

EVENTS = "tensorboard"


def events(run_dir: Path) -> EventAccumulator:
    acc = EventAccumulator(
        str(run_dir / EVENTS), size_guidance={"scalars": 0, "tensors": 0, "images": 0}
    )
    acc.Reload()
    return acc


def records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def expected_scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """tag -> step -> value from metrics.jsonl (a later record of a step wins, as after a
    resume)."""
    out: dict[str, dict[int, float]] = {}
    for rec in records(run_dir):
        found = scalars(rec)
        if found is not None:
            for tag, value in found[1].items():
                out.setdefault(tag, {})[rec["step"]] = value
    return out


def train(mt_cli, config: Path, run_dir: Path, *args: str, env: dict | None = None):
    result = mt_cli("train", config, "--run-dir", run_dir, *args, env=env)
    assert result.rc == 0, result.err
    return result


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tb")
    return reverse_task_config(folder, max_steps=8, log_every=2, eval_every=4, eval_bleu=True)


def test_scalars_equal_the_metrics_log_and_evaluations_show_examples(config, tmp_path, mt_cli):
    run = tmp_path / "run"
    train(mt_cli, config, run, "--set", "train.tensorboard=true")
    acc = events(run)
    want = expected_scalars(run)
    assert {
        *("train/loss", "train/lr", "train/grad_norm", "train/tgt_tokens_per_s"),
        *("dev/loss", "dev/ppl", "dev/bleu", "dev/chrf"),
    } <= set(want)
    for tag, by_step in want.items():
        got = acc.Scalars(tag)
        assert [e.step for e in got] == sorted(by_step), tag
        for e in got:
            assert e.value == pytest.approx(by_step[e.step], rel=1e-6, abs=1e-6), (tag, e.step)
    assert [e.step for e in acc.Scalars("train/loss")] == [2, 4, 6, 8]
    assert [e.step for e in acc.Scalars("dev/bleu")] == [4, 8]

    tensors = acc.Tags()["tensors"]
    for i in (1, 2, 3):
        texts = acc.Tensors(f"dev/example_{i}/text_summary")
        assert [t.step for t in texts] == [4, 8]
        table = texts[-1].tensor_proto.string_val[0].decode()
        assert "| source |" in table and "| translation (step 8) |" in table
    assert "run/config/text_summary" in tensors and "run/parameters/text_summary" in tensors
    assert [i.step for i in acc.Images("dev/attention")] == [4, 8]
    assert acc.Images("dev/attention")[0].encoded_image_string.startswith(b"\x89PNG")
    # Each evaluation says what it and its TensorBoard extras took, so their cost shows.
    evals = [r for r in records(run) if "valid_loss" in r]
    assert [r["step"] for r in evals] == [4, 8]
    for r in evals:
        assert r["eval_seconds"] > 0 and 0 < r["tensorboard_seconds"] < 60
    assert "dev/tensorboard_seconds" in want
    # The HParams tab: the final dev scores as hparam/ scalars at the last step.
    assert acc.Scalars("hparam/bleu")[-1].value == pytest.approx(want["dev/bleu"][8], abs=1e-6)


@pytest.mark.slow
def test_resumed_run_has_each_step_once_in_order(config, tmp_path, mt_cli):
    """A run killed after writing events past its last checkpoint, then resumed: the events
    after the checkpoint's step are written again, and TensorBoard shows each step once."""
    run = tmp_path / "run"
    train(mt_cli, config, run, "--set", "train.max_steps=4")
    shutil.copy(run / "last.pt", tmp_path / "last_at_4.pt")
    train(mt_cli, config, run, "--resume", "--set", "train.max_steps=8")
    # As if killed after step 8's events but before its checkpoint: last.pt is step 4's.
    shutil.copy(tmp_path / "last_at_4.pt", run / "last.pt")
    train(mt_cli, config, run, "--resume", "--set", "train.max_steps=12")
    acc = events(run)
    want = expected_scalars(run)
    for tag in acc.Tags()["scalars"]:
        steps = [e.step for e in acc.Scalars(tag)]
        assert steps == sorted(set(steps)), (tag, steps)
        if tag in want:
            assert steps == sorted(want[tag])
            for e in acc.Scalars(tag):
                assert e.value == pytest.approx(want[tag][e.step], rel=1e-6, abs=1e-6)
    assert [e.step for e in acc.Scalars("train/loss")] == [2, 4, 6, 8, 10, 12]
    assert [i.step for i in acc.Images("dev/attention")] == [4, 8, 12]
    assert [t.step for t in acc.Tensors("run/config/text_summary")] == [0]


def test_false_writes_no_events(config, tmp_path, mt_cli):
    run = tmp_path / "run"
    train(mt_cli, config, run, "--set", "train.tensorboard=false", "--set", "train.max_steps=2")
    assert (run / "last.pt").is_file()
    assert not (run / EVENTS).exists()
    evals = [r for r in records(run) if "valid_loss" in r]
    assert evals and all("eval_seconds" in r and "tensorboard_seconds" not in r for r in evals)


def missing(tmp_path: Path, package: str) -> dict[str, str]:
    """An environment in which `import PACKAGE` fails, as when it is not installed."""
    import os

    shim = tmp_path / f"no_{package}"
    (shim / package).mkdir(parents=True)
    (shim / package / "__init__.py").write_text(
        f"raise ImportError('No module named {package} (test shim)')\n"
    )
    return {"PYTHONPATH": os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")])}


def test_true_without_the_package_is_one_line_before_any_work(config, tmp_path, mt_process):
    """A fresh interpreter whose `import tensorboard` fails (this process has it imported)."""
    env = missing(tmp_path, "tensorboard")
    run = tmp_path / "run"
    result = mt_process(
        "train", config, "--run-dir", run, "--set", "train.tensorboard=true", env=env
    )
    assert result.rc == 2
    assert result.err.strip().splitlines() == [result.err.strip()]
    assert result.err.startswith("mt: error: train.tensorboard is true but the tensorboard")
    assert not run.exists()  # nothing prepared, nothing trained
    # auto, without the package: trains, without events.
    train(mt_process, config, run, "--set", "train.max_steps=2", env=env)
    assert not (run / EVENTS).exists()


def test_without_matplotlib_no_image_and_one_note(config, tmp_path, mt_process):
    """A fresh interpreter whose `import matplotlib` fails."""
    run = tmp_path / "run"
    result = train(mt_process, config, run, env=missing(tmp_path, "matplotlib"))
    assert result.err.count("matplotlib is missing") == 1
    acc = events(run)
    assert "dev/attention" not in acc.Tags()["images"]
    assert [t.step for t in acc.Tensors("dev/example_1/text_summary")] == [4, 8]


class _Dev:
    """What the sink asks of the evaluator: the examples and the attention behind the first."""

    def examples(self, hypotheses, n):
        return [("Ein Hund.", "A dog.", "A dog.")]

    def attention_views(self, sentence, step):
        import torch

        from mt.views.attention import AttentionView

        weights = torch.rand(1, 3, 4).softmax(-1)
        return "t", [AttentionView("encoder-decoder attention", weights, list("abc"), list("wxyz"))]


def test_the_picture_drawn_on_a_thread_is_written_and_its_failure_raised(tmp_path, monkeypatch):
    """The picture is drawn while the trainer goes on; `wait` (or `close`) joins it, and an
    error while drawing reaches the trainer there instead of vanishing with the thread."""
    pytest.importorskip("matplotlib")
    import torch

    from mt.config import Config
    from mt.train import tensorboard
    from mt.train.evaluation import Evaluation

    sink = tensorboard.TensorBoardSink(tmp_path, None, Config(), torch.nn.Linear(2, 2))
    sink.show_evaluation(7, _Dev(), Evaluation({"valid_loss": 1.0}))
    sink.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [i.step for i in acc.Images("dev/attention")] == [7]

    def broken(title, views):
        raise RuntimeError("no fonts")

    monkeypatch.setattr(tensorboard, "attention_picture", broken)
    sink = tensorboard.TensorBoardSink(tmp_path / "again", None, Config(), torch.nn.Linear(2, 2))
    sink.show_evaluation(8, _Dev(), Evaluation({"valid_loss": 1.0}))
    with pytest.raises(RuntimeError, match="no fonts"):
        sink.wait()
    sink.wait()  # raised once
    sink.close()


def test_a_watched_sets_values_have_curves_under_its_name():
    record = {
        "step": 6, "valid_loss": 2.5, "dev_bleu": 10.0, "watch_bleu/general": 20.5,
        "watch_chrf/general": 40.0, "watch_loss/general": 3.1, "admitted": True,
    }  # fmt: skip
    group, values = scalars(record)
    assert group == "dev"
    assert values == {
        "dev/loss": 2.5, "dev/bleu": 10.0, "watch/general/bleu": 20.5,
        "watch/general/chrf": 40.0, "watch/general/loss": 3.1,
    }  # fmt: skip
    assert scalars({"step": 0, "best_rule": "the highest dev_bleu"}) is None  # no curve

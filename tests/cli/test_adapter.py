"""LoRA adapters through the command line (`finetune.adapter: lora`, `--adapter`,
`mt adapter merge`), on the tiny model and its two adapters (`tiny_adapters`), on an imported
Marian model, and on the reverse task for resuming.

What is checked: a run's checkpoints hold the adapter alone and the base's fingerprint;
translate, eval, score and attention with `--adapter` print what the merged checkpoint prints;
an adapter on the wrong base (or in the wrong place) is one line naming the files; a stopped
adapter run resumes exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support.tasks import TIMES, adapter_config, multi30k_slice, reverse_task_config

from mt.adapt.files import fingerprint
from mt.checkpoint import load_model
from mt.translation.session import Session

pytest_plugins = ["support.hub_models"]  # the small imported Marian model
LINES = [
    "Ein Mann fährt mit dem Fahrrad über die Brücke.",
    "Zwei Hunde spielen im Schnee.",
    "",
    "Eine Frau mit einem roten Hut sitzt auf einer Bank vor dem Haus.",
    "Kinder spielen Fußball auf der Straße.",
]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("src") / "src.de"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def merged(tiny_run: Path, tiny_adapters: dict[str, Path], tmp_path_factory, mt_cli) -> Path:
    """The "legal" adapter folded into the tiny model by `mt adapter merge`."""
    out = tmp_path_factory.mktemp("merged") / "merged.pt"
    result = mt_cli("adapter", "merge", tiny_run / "best.pt", tiny_adapters["legal"], "-o", out)
    assert result.rc == 0, result.err
    return out


def test_an_adapter_run_writes_the_adapter_alone(tiny_run, tiny_adapters):
    base = torch.load(tiny_run / "best.pt", weights_only=True)
    run = tiny_adapters["legal"]
    cfg = base["config"]["model"]
    d, f, r = cfg["d_model"], cfg["d_ff"], 4
    layer = 3 * r * 2 * d + r * 2 * d + 2 * r * (d + f)  # qkv, out, fc1 and fc2
    expected = cfg["encoder_layers"] * layer + cfg["decoder_layers"] * (layer + 4 * r * 2 * d)
    for name in ("best.pt", "last.pt", "checkpoint_10.pt"):
        data = torch.load(run / name, weights_only=True)
        assert "tokenizer" not in data and data["adapter"]["kind"] == "lora", name
        assert all(k.endswith(("lora_a", "lora_b")) for k in data["model"]), name
        assert sum(v.numel() for v in data["model"].values()) == expected, name
        assert data["adapter"]["base"] == fingerprint(base["model"], cfg), name
    values = sum(v.numel() for v in base["model"].values() if v.is_floating_point())
    assert expected / values < 0.10  # the tiny model is narrow: 9% of its values
    assert (run / "best.pt").stat().st_size < 0.10 * (tiny_run / "best.pt").stat().st_size
    # the optimizer state in last.pt covers the adapter alone
    state = torch.load(run / "last.pt", weights_only=True)["train_state"]["optimizer"]["state"]
    assert sum(s["exp_avg"].numel() for s in state.values()) == expected


def test_translate_eval_score_attention_with_an_adapter_are_the_merged_models(
    tiny_run, tiny_adapters, merged, source, mt_cli, tmp_path
):
    base, adapter = tiny_run / "best.pt", tiny_adapters["legal"] / "best.pt"
    ref = tmp_path / "ref.en"
    ref.write_text("A man rides a bike.\nTwo dogs play.\n\nA woman.\nKids play.\n", "utf-8")
    runs = {
        "translate": ("translate", "--input", source, "--beam", "2"),
        "int8": ("translate", "--input", source, "--int8", "--greedy"),
        "eval": ("eval", "--src", source, "--ref", ref, "--json"),
        "score": ("score", "--src", source, "--tgt", ref),
        "attention": ("attention", "--src", LINES[0], "--html", tmp_path / "a.html"),
    }
    for what, (command, *args) in runs.items():
        with_adapter = mt_cli(command, base, "--adapter", adapter, *args)
        folded = mt_cli(command, merged, *args)
        plain = mt_cli(command, base, *args)
        assert with_adapter.rc == folded.rc == plain.rc == 0, (what, with_adapter.err)
        assert with_adapter.out == folded.out, what
        if what in ("translate", "score"):
            assert with_adapter.out != plain.out, f"{what}: the adapter changed nothing"
    # the run directory stands for its best.pt
    via_dir = mt_cli("translate", base, "--adapter", tiny_adapters["legal"], "--input", source)
    assert via_dir.rc == 0 and via_dir.out == mt_cli("translate", merged, "--input", source).out


def test_an_adapter_of_the_tables_decodes_as_its_merged_model(
    tiny_run, tiny_adapters, source, mt_cli, tmp_path
):
    """The "ui" adapter wraps the embedding tables and the tied output layer too: merged by
    `mt adapter merge` it is a checkpoint of the base's size, and translating with it (the
    machine's own precision, and int8) prints what the merged checkpoint prints."""
    base, adapter = tiny_run / "best.pt", tiny_adapters["ui"] / "best.pt"
    data = torch.load(adapter, weights_only=True)
    assert data["adapter"]["targets"][-1] == "embed"
    assert any(k.startswith("src_embed.") for k in data["model"])
    merged = tmp_path / "ui.pt"
    assert mt_cli("adapter", "merge", base, adapter, "-o", merged).rc == 0
    plain = torch.load(base, weights_only=True)["model"]
    folded = torch.load(merged, weights_only=True)["model"]
    assert folded.keys() == plain.keys()
    assert not torch.equal(folded["src_embed.weight"], plain["src_embed.weight"])
    for flags in ((), ("--int8",)):
        args = ("translate", "--input", source, "--greedy", *flags)
        with_adapter = mt_cli(*args[:1], base, "--adapter", adapter, *args[1:])
        assert with_adapter.rc == 0, with_adapter.err
        assert with_adapter.out == mt_cli(*args[:1], merged, *args[1:]).out, flags
        assert with_adapter.out != mt_cli(*args[:1], base, *args[1:]).out, flags


def test_unmerged_scores_equal_merged_ones_within_float_rounding(tiny_run, tiny_adapters):
    """What serve decodes (the adapter beside the base) against what the CLI decodes (folded
    in): the same log-probabilities, to float rounding."""
    base = Session([tiny_run / "best.pt"], "cpu")
    unmerged = base.with_adapter(tiny_adapters["ui"] / "best.pt")
    folded = base.with_adapter(tiny_adapters["ui"] / "best.pt", merge=True)
    src, tgt = LINES[:2] + LINES[3:], ["A man.", "Two dogs.", "A woman on a bench.", "Kids."]
    a = unmerged.scorer().score_lines(src, tgt)
    b = folded.scorer().score_lines(src, tgt)
    c = base.scorer().score_lines(src, tgt)
    for x, y, z in zip(a, b, c):
        assert x.tokens == y.tokens
        assert x.logprob == pytest.approx(y.logprob, rel=1e-4, abs=1e-4)
        assert x.logprob != pytest.approx(z.logprob, abs=1e-3)
    # the unmerged copy shares the base's weights
    shared = {id(p) for p in base.model.parameters()}
    own = [p for k, p in unmerged.model.named_parameters() if "lora" not in k]
    assert own and all(id(p) in shared for p in own)


def test_an_adapter_in_the_wrong_place_is_one_line(tiny_run, tiny_adapters, mt_cli, tmp_path):
    adapter = tiny_adapters["legal"] / "best.pt"
    best = torch.load(tiny_run / "best.pt", weights_only=True)["model"]
    other = next(
        p
        for p in sorted(tiny_run.glob("checkpoint_*.pt"))
        if any(
            not torch.equal(v, best[k])
            for k, v in torch.load(p, weights_only=True)["model"].items()
        )
    )
    src = tmp_path / "s.de"
    src.write_text("Ein Hund.\n", encoding="utf-8")
    cases = [
        (("translate", other, "--adapter", adapter, "-i", src), [str(adapter), str(other)]),
        (("adapter", "merge", other, adapter, "-o", tmp_path / "m.pt"), [str(other)]),
        (("translate", adapter, "-i", src), [str(adapter), "an adapter, not a model"]),
        (("translate", tiny_run / "best.pt", "--adapter", other, "-i", src), ["not an adapter"]),
        (("translate", other, other, "--adapter", adapter, "-i", src), ["ensemble"]),
    ]
    for args, says in cases:
        result = mt_cli(*args)
        assert result.rc == 2 and not result.out, args
        lines = result.err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.err, result.err
        assert all(s in lines[0] for s in says), (lines[0], says)
    assert not (tmp_path / "m.pt").exists()


def test_adapter_settings_that_cannot_work_are_one_line(
    tiny_run, tiny_adapters, multi30k_dir, tmp_path, mt_cli
):
    data = multi30k_slice(multi30k_dir, tmp_path / "data", 10_000, 50)
    config = adapter_config(tmp_path, data)
    cases = [
        ((), "finetune.adapter needs train.init_from"),
        (("--init-from", tiny_run / "best.pt", "--set", "train.freeze=[encoder]"), "frozen base"),
        (("--init-from", tiny_run / "best.pt", "--set", "finetune.lora_rank=0"), "lora_rank"),
        (("--init-from", tiny_adapters["ui"] / "best.pt"), "an adapter, not a model"),
    ]
    for args, says in cases:
        result = mt_cli("train", config, "--run-dir", tmp_path / "run", *args)
        assert result.rc != 0 and says in result.err, result.err
        assert len(result.err.strip().splitlines()) == 1, result.err


def logged(run_dir: Path) -> list[dict]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open(encoding="utf-8")]
    return [{k: v for k, v in r.items() if k not in TIMES} for r in records if "loss" in r]


def test_an_adapter_run_resumes_exactly(tmp_path, mt_cli):
    """8 steps straight, or 4, a stop and --resume to 8: the same losses, adapter and EMA; the
    resumed run reads its base again from init_from, and refuses another one."""
    config = reverse_task_config(tmp_path / "task", max_steps=24)
    base = tmp_path / "base"
    assert mt_cli("train", config, "--run-dir", base).rc == 0
    lora = ("--init-from", base / "last.pt", "--set", "finetune.adapter=lora")
    lora = (*lora, "--set", "finetune.lora_b_lr=4")  # two groups of Adam, both resumed
    more = (
        "--set",
        "train.max_steps=8",
        "--set",
        "train.eval_every=4",
        "--set",
        "train.ema_decay=0.9",
    )
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert mt_cli("train", config, "--run-dir", straight, *lora, *more).rc == 0
    half = mt_cli("train", config, "--run-dir", resumed, *lora, *more, "--set", "train.max_steps=4")
    assert half.rc == 0, half.err
    again = mt_cli("train", config, "--run-dir", resumed, *more, "--resume")
    assert again.rc == 0, again.err
    assert logged(straight) == logged(resumed) and len(logged(straight)) == 2
    wa = torch.load(straight / "last.pt", weights_only=True)
    wb = torch.load(resumed / "last.pt", weights_only=True)
    assert wa["step"] == wb["step"] == 8 and wa["model"].keys() == wb["model"].keys()
    for name, tensor in wa["model"].items():
        torch.testing.assert_close(wb["model"][name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    groups = wb["train_state"]["optimizer"]["param_groups"]
    assert [g["lr_scale"] for g in groups] == [1.0, 4.0]
    assert groups[1]["lr"] == pytest.approx(4 * groups[0]["lr"])
    assert len(groups[1]["params"]) == sum(k.endswith("lora_b") for k in wb["model"])
    ema_a, ema_b = wa["train_state"]["ema"], wb["train_state"]["ema"]
    assert len(ema_a) == len(ema_b) == len(wa["model"])  # the adapter's tensors only
    for x, y in zip(ema_a, ema_b, strict=True):
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-6)
    # a base that changed under the run: one line naming both
    other = tmp_path / "other"
    assert mt_cli("train", config, "--run-dir", other, "--set", "train.seed=8").rc == 0
    (base / "last.pt").write_bytes((other / "last.pt").read_bytes())
    moved = mt_cli("train", config, "--run-dir", resumed, "--resume", "--set", "train.max_steps=9")
    assert moved.rc == 2 and "another model than" in moved.err and "base" in moved.err


def test_an_imported_model_is_a_base_like_any_other(imported, multi30k_dir, tmp_path, mt_cli):
    data = multi30k_slice(multi30k_dir, tmp_path / "data", 10_000, 300)
    config = adapter_config(tmp_path, data)
    run = tmp_path / "run"
    result = mt_cli("train", config, "--run-dir", run, "--init-from", imported,
                    "--set", "train.max_tokens=1024", "--set", "train.max_steps=4")  # fmt: skip
    assert result.rc == 0, result.err
    data_file = torch.load(run / "last.pt", weights_only=True)
    loaded = load_model(imported)
    assert data_file["adapter"]["base"] == fingerprint(
        loaded.data["model"], loaded.data["config"]["model"]
    )
    merged = tmp_path / "merged.pt"
    assert mt_cli("adapter", "merge", imported, run / "last.pt", "-o", merged).rc == 0
    folded = load_model(merged)
    assert torch.equal(folded.model.output_bias, loaded.model.output_bias)  # Marian's bias kept
    text = "\n".join(LINES) + "\n"
    a = mt_cli("translate", imported, "--adapter", run / "last.pt", "--greedy", stdin=text)
    b = mt_cli("translate", merged, "--greedy", stdin=text)
    c = mt_cli("translate", imported, "--greedy", stdin=text)
    assert a.rc == b.rc == c.rc == 0, a.err
    assert a.out == b.out and a.out.count("\n") == len(LINES)
    assert a.out != c.out


def test_averaging_and_tuning_work_on_adapter_files(tmp_path, mt_cli):
    """`train.average_last` averages the adapter files of the run's last steps and
    `train.tune_beam` stores its choice in the adapter's best.pt: both stay adapters."""
    config = reverse_task_config(tmp_path / "task", max_steps=24)
    base = tmp_path / "base"
    assert mt_cli("train", config, "--run-dir", base).rc == 0
    run = tmp_path / "run"
    result = mt_cli(
        "train", config, "--run-dir", run, "--init-from", base / "last.pt",
        "--set", "finetune.adapter=lora", "--set", "train.max_steps=8",
        "--set", "train.eval_every=4", "--set", "train.keep_last=2",
        "--set", "train.average_last=2", "--set", "train.eval_bleu=true",
        "--set", "train.tune_beam=[1,2]",
    )  # fmt: skip
    assert result.rc == 0, result.err
    averaged = torch.load(run / "averaged.pt", weights_only=True)
    steps = [torch.load(run / f"checkpoint_{s}.pt", weights_only=True) for s in (4, 8)]
    assert "adapter" in averaged and "tokenizer" not in averaged
    for k, v in averaged["model"].items():
        torch.testing.assert_close(v, (steps[0]["model"][k] + steps[1]["model"][k]) / 2)
    best = torch.load(run / "best.pt", weights_only=True)
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    (tuned,) = [r for r in records if "tuned_beam" in r]
    assert [t["beam"] for t in tuned["tuned_grid"]] == [1, 2]
    assert "adapter" in best and best["config"]["decode"]["beam"] == tuned["tuned_beam"]
    src = tmp_path / "task" / "data" / "val.src"
    out = mt_cli("translate", base / "last.pt", "--adapter", run, "-i", src)
    assert out.rc == 0 and out.out.count("\n") == 20, out.err


def test_the_python_api_loads_an_adapter(tiny_run, tiny_adapters):
    import mt

    with_adapter = mt.load(tiny_run / "best.pt", "cpu", adapter=tiny_adapters["ui"])
    alone = mt.load(tiny_run / "best.pt", "cpu")
    lines = [x for x in LINES if x]
    got, base = mt.translate(with_adapter, lines), mt.translate(alone, lines)
    assert len(got) == len(lines) and got != base
    assert with_adapter.adapter is not None and with_adapter.adapter.spec.rank == 4

"""The CUDA path: mixed-precision training, fp16 loss scaling, resume, decoding against the CPU
and against fp32, torch.compile, and DDP over NCCL.

Every test that needs a GPU is marked `cuda` and skips without one, so the default suite shows
them as skipped; `pytest -m cuda` runs them on a GPU (scripts/gpu_check.sh does, with the
benchmarks; docs/studies/on-a-gpu.md). Where the same code runs on the CPU, a `cpu` parameter
runs it too:
fp16 autocast with its GradScaler and bf16 autocast run on a CPU, so the update's
mixed-precision logic (the skipped overflow step, the curves against fp32) is checked there.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support import REPO
from support.tasks import TIMES, reverse_task_config

from mt.checkpoint import load_model
from mt.config_file import load_config
from mt.data.corpus import read_lines
from mt.train.trainer import Trainer
from mt.train.update import Update
from mt.translation.requests import Plan, Request
from mt.translation.translator import Translation, Translator

CUDA = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


def on_cuda(*values: object, slow: bool = False) -> object:
    """A parameter set that needs the GPU (marked `cuda`, skipped without one)."""
    return pytest.param(*values, marks=CUDA + ([pytest.mark.slow] if slow else []))


def on_cpu(*values: object, slow: bool = False) -> object:
    return pytest.param(*values, marks=[pytest.mark.slow] if slow else [])


def records(run_dir: Path, key: str) -> list[dict]:
    """metrics.jsonl records that have `key`, without the wall-clock fields."""
    out = []
    for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if key in r:
            out.append({k: v for k, v in r.items() if k not in TIMES})
    return out


def translate(
    checkpoint: Path,
    device: str,
    lines: list[str],
    beam: int,
    dtype: str = "fp32",
    protect: bool = False,
) -> tuple[list[Translation], Translator]:
    loaded = load_model(checkpoint, device)
    cfg = loaded.cfg.decode
    cfg.beam, cfg.nbest, cfg.dtype = beam, 1, dtype
    model = loaded.model
    if device == "cpu" and dtype != "fp32":
        # A CPU decodes bf16 through autocast (tests/cli/test_decode_dtype.py); the half copy
        # CUDA decodes with runs the same search on the CPU here.
        model, cfg.dtype = copy.deepcopy(model).to(HALF[dtype]), "fp32"
    translator = Translator(model, loaded.tokenizer, cfg, torch.device(device))
    plan = Plan(protect=protect, recase=False)
    out = translator.translate([Request(x, plan=plan) for x in lines])
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())  # caller's, untouched
    return out, translator


def test_gpu_recipe_loads_and_fits_one_gpu_and_ten_minutes():
    cfg = load_config(REPO / "configs" / "multi30k_de_en_gpu.yaml")
    m, t = cfg.model, cfg.train
    assert (m.d_model, m.encoder_layers, m.decoder_layers, m.dropout) == (512, 6, 6, 0.3)
    assert (t.device, t.precision, t.max_minutes, t.compile) == ("cuda", "bf16", 10, False)
    assert 8192 <= t.max_tokens * t.accum_steps <= 16384
    assert t.average_last <= t.keep_last and cfg.decode.dtype == "bf16"


@pytest.mark.slow  # a 6+6-layer model on CPU; the recipe's values are checked above
def test_gpu_recipe_trains_a_step_on_cpu(tmp_path, multi30k_dir, mt_cli):
    """The recipe as written, shrunk only where a CPU needs it: it loads, trains and saves."""
    run = tmp_path / "run"
    result = mt_cli(
        "train",
        REPO / "configs" / "multi30k_de_en_gpu.yaml",
        "--run-dir",
        run,
        *("--set", "train.device=cpu", "--set", "train.precision=fp32"),
        *("--set", "data.max_train_examples=2000", "--set", "data.max_valid_examples=4"),
        *("--set", "tokenizer.vocab_size=1000", "--set", "train.max_tokens=1024"),
        *("--set", "train.max_steps=1", "--set", "train.log_every=1", "--set", "train.threads=2"),
        *("--set", "train.loader_workers=0", "--set", "decode.max_len_b=5"),
        env={"MT_DATA": str(multi30k_dir.resolve())},
    )
    assert result.rc == 0, result.err
    assert torch.load(run / "last.pt", weights_only=True)["step"] == 1
    assert 0 < records(run, "loss")[0]["loss"] < 20


@pytest.mark.parametrize(
    ("device", "precision", "steps", "max_tokens"),
    [
        on_cuda("cuda", "bf16", 150, 2048),
        on_cuda("cuda", "fp16", 150, 2048),
        on_cpu("cpu", "bf16", 15, 1024, slow=True),  # CPU bf16 without AMX is slow: ~10-20 s
    ],
)
def test_mixed_precision_loss_falls_and_stays_finite(
    device, precision, steps, max_tokens, tmp_path, multi30k_dir, mt_cli
):
    run = tmp_path / "run"
    result = mt_cli(
        "train",
        REPO / "configs" / "tiny.yaml",
        "--run-dir",
        run,
        *("--set", f"train.device={device}", "--set", f"train.precision={precision}"),
        *("--set", f"train.max_steps={steps}", "--set", f"train.log_every={steps // 3}"),
        *("--set", f"train.eval_every={steps}", "--set", "data.max_valid_examples=40"),
        *("--set", "train.threads=1", "--set", f"train.max_tokens={max_tokens}"),
        env={"MT_DATA": str(multi30k_dir.resolve())},
    )
    assert result.rc == 0, result.err
    logs = records(run, "loss")
    losses = [r["loss"] for r in logs]
    assert len(losses) == 3 and all(x is not None and math.isfinite(x) for x in losses)
    assert losses[0] > losses[1] > losses[2] and losses[2] < losses[0] - 0.5, losses
    # fp16's scaler may skip a few early steps while it finds its scale; bf16 skips none.
    assert logs[-1]["skipped_updates"] <= (10 if precision == "fp16" else 0)
    assert math.isfinite(records(run, "valid_loss")[-1]["valid_loss"])
    weights = torch.load(run / "last.pt", weights_only=True)["model"]
    assert all(torch.isfinite(w).all() for w in weights.values() if w.is_floating_point())


def fp16_update(trainer: Trainer) -> Update:
    """The trainer's update in fp16 with its GradScaler: `mt train` allows fp16 on CUDA only,
    but torch runs fp16 autocast and the scaler on a CPU too, so the logic is tested there."""
    if trainer.precision == "fp16":
        return trainer.update
    return Update(
        trainer.cfg.train, trainer.cfg.model, trainer.model, trainer.dist, trainer.device, "fp16"
    )


@pytest.mark.parametrize("device", [on_cuda("cuda"), on_cpu("cpu")])
def test_fp16_overflow_skips_the_step_and_keeps_the_weights(device, tmp_path):
    precision = "fp16" if device == "cuda" else "fp32"
    config = reverse_task_config(tmp_path, device=device, precision=precision, loader_workers=0)
    cfg = load_config(config)
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        update = fp16_update(trainer)
        batches = trainer.train_set.epoch_batches(cfg.train.max_tokens, cfg.train.seed, 0)
        group = [trainer.train_set[batches[0]]]
        # A scale this large overflows fp16 in backward: the scaler must skip the step.
        update.scaler = torch.amp.GradScaler(device, init_scale=2.0**40)
        before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        update(group, 1)
        assert update.scaler.get_scale() == 2.0**39  # backed off by half
        assert int(update.bad_total) == 1
        for name, w in trainer.model.state_dict().items():
            assert torch.equal(w, before[name]), name
        update.scaler.update(2.0**8)  # a sane scale: the next step updates, finitely
        update(group, 2)
        after = trainer.model.state_dict()
        assert any(not torch.equal(after[k], before[k]) for k in before)
        assert all(torch.isfinite(w).all() for w in after.values() if w.is_floating_point())
        steps = {float(s["step"]) for s in update.optimizer.state.values()}
        assert steps == {1.0}  # the skipped step left Adam's step count alone
        assert int(update.bad_total) == 1
    finally:
        assert trainer.lock is not None
        trainer.lock.release()


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_precision_updates_on_the_cpu_follow_fp32(precision, tmp_path):
    """The mixed-precision update on a CPU (fp16 with its scaler, bf16 without), against fp32
    from the same weights on the same batches: the loss falls alike and no update is skipped
    once fp16's scaler has found its scale."""
    cfg = load_config(reverse_task_config(tmp_path, loader_workers=0, warmup=4))
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        batches = trainer.train_set.epoch_batches(cfg.train.max_tokens, cfg.train.seed, 0)
        groups = [[trainer.train_set[b]] for b in batches[:12]]
        start = copy.deepcopy(trainer.model.state_dict())
        losses = {}
        for name in ("fp32", precision):
            trainer.model.load_state_dict(start)
            torch.manual_seed(0)  # the same dropout masks for both
            update = Update(cfg.train, cfg.model, trainer.model, trainer.dist, trainer.device, name)
            if name == "fp16":  # a start scale fp16 can hold: no skipped step to line up
                update.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
            curve = []
            for step, group in enumerate(groups, 1):
                loss, _, ntok, norm = update(group, step)
                curve.append(float(loss) / ntok)
                assert math.isfinite(float(norm))
            losses[name] = curve
            assert int(update.bad_total) == 0, name
        ref, half = losses["fp32"], losses[precision]
        assert half[-1] < half[0] - 0.3 and ref[-1] < ref[0] - 0.3, losses
        assert half != ref and half == pytest.approx(ref, rel=0.05), losses
    finally:
        assert trainer.lock is not None
        trainer.lock.release()


@pytest.mark.parametrize(("precision", "rel"), [on_cuda("fp32", 1e-4), on_cuda("fp16", 1e-2)])
def test_resume_on_cuda_matches_the_uninterrupted_run(precision, rel, tmp_path, mt_cli):
    """tests/cli/test_resume.py on the GPU: the CUDA RNG (dropout), the scaler and the data
    position come back from last.pt. Not bit-exact: CUDA's atomics sum in any order."""
    n = 24
    config = reverse_task_config(
        tmp_path, max_steps=n, eval_every=n // 2, device="cuda", precision=precision
    )
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    first = mt_cli("train", config, "--run-dir", straight)
    assert first.rc == 0, first.err
    half = mt_cli("train", config, "--run-dir", resumed, "--set", f"train.max_steps={n // 2}")
    assert half.rc == 0, half.err
    more = mt_cli("train", config, "--run-dir", resumed, "--resume")
    assert more.rc == 0, more.err
    for key in ("loss", "valid_loss"):
        a, b = records(straight, key), records(resumed, key)
        assert [r["step"] for r in a] == [r["step"] for r in b] and a
        for ra, rb in zip(a, b):
            for k in ra:
                assert rb[k] == pytest.approx(ra[k], rel=rel, abs=1e-6), (ra["step"], k)
    wa = torch.load(straight / "last.pt", weights_only=True)["model"]
    wb = torch.load(resumed / "last.pt", weights_only=True)["model"]
    diff = sum(float((wa[k].double() - wb[k].double()).norm() ** 2) for k in wa) ** 0.5
    norm = sum(float(wa[k].double().norm() ** 2) for k in wa) ** 0.5
    assert diff <= 10 * rel * norm


@pytest.mark.parametrize("device", [on_cuda("cuda")])
def test_greedy_on_cuda_matches_cpu_on_multi30k(device, tiny_run, multi30k_dir):
    lines = read_lines(multi30k_dir / "test_2016_flickr.de.gz")[:200]
    cpu, _ = translate(tiny_run / "best.pt", "cpu", lines, beam=1)
    gpu, _ = translate(tiny_run / "best.pt", device, lines, beam=1)
    same = sum(a.text == b.text for a, b in zip(cpu, gpu))
    assert same >= len(lines) - 4, f"{same}/{len(lines)} identical"


@pytest.mark.parametrize("dtype", [on_cuda("bf16"), on_cuda("fp16")])
def test_cuda_decoding_steps_need_no_unfused_attention(dtype, tiny_run, multi30k_dir):
    """Every attention of a GPU decode (encoder, decoder self-attention over its cache, cross
    attention over the stored encoder keys, beams grouped) runs on flash or memory-efficient
    attention, the kernels mt leaves SDPA on CUDA (`planless_attention`): with the unfused
    math kernel switched off too, the whole beam search still runs. The transposed key layout
    the CPU steps read made cross attention fall back to it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    lines = read_lines(multi30k_dir / "test_2016_flickr.de.gz")[:16]
    ref, _ = translate(tiny_run / "best.pt", "cuda", lines, beam=4, dtype=dtype)
    assert not torch.backends.cuda.cudnn_sdp_enabled()  # no per-shape plans
    fused = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    with sdpa_kernel(fused):
        out, _ = translate(tiny_run / "best.pt", "cuda", lines, beam=4, dtype=dtype)
    assert [o.text for o in out] == [r.text for r in ref]


@pytest.mark.parametrize("device", [on_cuda("cuda")])
def test_protected_greedy_on_cuda_matches_cpu(device, tiny_run, multi30k_dir):
    """The span ban reads the rows on the host, in one copy per step off the GPU: protected
    outputs on CUDA, spans and all, equal the CPU's."""
    spans = ["%s", "<b>", "{0}", "$HOME", "https://example.org/a", "&amp;"]
    base = read_lines(multi30k_dir / "test_2016_flickr.de.gz")[:60]
    lines = [f"{x} {spans[i % len(spans)]}" if i % 2 else x for i, x in enumerate(base)]
    cpu, _ = translate(tiny_run / "best.pt", "cpu", lines, beam=1, protect=True)
    gpu, _ = translate(tiny_run / "best.pt", device, lines, beam=1, protect=True)
    same = sum(a.text == b.text for a, b in zip(cpu, gpu))
    assert same >= len(lines) - 2, f"{same}/{len(lines)} identical"


# Calibrated on the CPU with the 60-step tiny model (flat distributions, so many near-ties):
# bf16 kept 52% of outputs with a median score change of 0.15%, fp16 94% and 0.01%.
HALF_LIMITS = {"bf16": (0.3, 0.01, 0.05), "fp16": (0.8, 0.002, 0.01)}  # same, median, max


@pytest.mark.parametrize(
    ("device", "dtype"),
    [
        on_cuda("cuda", "bf16"),
        on_cuda("cuda", "fp16"),
        on_cpu("cpu", "bf16"),
        on_cpu("cpu", "fp16"),
    ],
)
def test_half_precision_beam_scores_stay_near_fp32(device, dtype, tiny_run, multi30k_dir):
    lines = read_lines(multi30k_dir / "test_2016_flickr.de.gz")[:100]
    ref, _ = translate(tiny_run / "best.pt", device, lines, beam=4)
    out, translator = translate(tiny_run / "best.pt", device, lines, beam=4, dtype=dtype)
    assert next(translator.model.parameters()).dtype == HALF[dtype]
    same = [i for i in range(len(lines)) if out[i].text == ref[i].text]
    rel = [
        abs(out[i].hypotheses[0].score - ref[i].hypotheses[0].score)
        / abs(ref[i].hypotheses[0].score)
        for i in same
    ]
    min_same, median, most = HALF_LIMITS[dtype]
    assert len(same) >= min_same * len(lines), f"{len(same)}/{len(lines)} identical"
    assert statistics.median(rel) <= median and max(rel) <= most, (statistics.median(rel), max(rel))


@pytest.mark.parametrize(("device", "rel"), [on_cuda("cuda", 1e-3), on_cpu("cpu", 1e-4, slow=True)])
def test_compiled_model_trains_like_the_eager_one(device, rel, tmp_path, mt_cli):
    """train.compile: two steps (the second with new shapes: a recompile), no dropout, so
    the compiled and the eager run compute the same function. On CPU compiling took ~5 min."""
    config = reverse_task_config(tmp_path, max_steps=2, eval_every=2, log_every=1, device=device)
    runs = {}
    for compiled in (False, True):
        runs[compiled] = tmp_path / f"compile-{compiled}"
        result = mt_cli(
            "train",
            config,
            "--run-dir",
            runs[compiled],
            *("--set", "model.dropout=0.0", "--set", f"train.compile={str(compiled).lower()}"),
        )
        assert result.rc == 0, result.err[-3000:]
    for key in ("loss", "valid_loss"):
        a, b = records(runs[False], key), records(runs[True], key)
        assert len(a) == len(b) > 0
        for ra, rb in zip(a, b):
            assert rb[key] == pytest.approx(ra[key], rel=rel), (ra["step"], key)


def _torchrun() -> str:
    found = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    if not Path(found).exists():
        pytest.skip("torchrun not installed")
    return found


@pytest.mark.parametrize(("device", "rel"), [on_cuda("cuda", 1e-3), on_cpu("cpu", 1e-5, slow=True)])
def test_one_process_torchrun_matches_a_plain_run(device, rel, tmp_path, mt_cli):
    """`torchrun --nproc_per_node=1` forms a process group (NCCL on CUDA, gloo on CPU) and
    trains through DDP; with one rank it must follow the plain single-process run."""
    k = 12
    config = reverse_task_config(tmp_path, max_steps=k, eval_every=k, device=device)
    plain = mt_cli("train", config, "--run-dir", tmp_path / "plain")
    assert plain.rc == 0, plain.err
    ddp = subprocess.run(
        [_torchrun(), "--standalone", "--nproc_per_node=1", "-m", "mt", "train", str(config)]
        + ["--run-dir", str(tmp_path / "ddp")],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=600,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    if device == "cuda":
        assert "device cuda:0" in ddp.stdout + ddp.stderr  # the rank's own GPU: the group path
    a, b = records(tmp_path / "plain", "loss"), records(tmp_path / "ddp", "loss")
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(4, k + 1, 4))
    for ra, rb in zip(a, b):
        assert rb["loss"] == pytest.approx(ra["loss"], rel=rel), ra["step"]

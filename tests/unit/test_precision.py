"""Precision by what the CPU computes (mt/device.py): the flags read from /proc/cpuinfo, the
choice `auto` makes for training and decoding on given flag sets, and the training start line
that says which and why. The choices are pure functions of the flags, so every case runs on
any CPU."""

from __future__ import annotations

import pytest
from support import REPO
from support.tasks import reverse_task_config

from mt import device as mt_device
from mt.config_file import load_config
from mt.device import choose_decode_dtype, choose_precision, read_cpu_flags
from mt.errors import MtError
from mt.train.trainer import Trainer

ZEN3 = {"sse4_2", "avx", "avx2", "fma"}  # AVX2 only: this project's EPYC family 25
AVX512 = ZEN3 | {"avx512f", "avx512bw", "avx512vl"}  # AVX-512 without bf16 (Skylake-SP)
ZEN4 = AVX512 | {"avx512_bf16"}  # AMD EPYC family 25 model 17+ / family 26, Cooper Lake
SAPPHIRE = ZEN4 | {"amx_tile", "amx_bf16", "amx_int8"}  # Intel Sapphire Rapids and later


def test_mt_cpu_flags_stands_for_the_cpus_own():
    assert mt_device.cpu_flags({"MT_CPU_FLAGS": "avx2 avx512_bf16"}) == {"avx2", "avx512_bf16"}
    assert mt_device.cpu_flags({"MT_CPU_FLAGS": ""}) == frozenset()
    assert mt_device.cpu_flags({}) == read_cpu_flags()  # /proc/cpuinfo's, read once


def test_flags_come_from_the_first_processor_of_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512_bf16\n\n"
        "processor\t: 1\nflags\t\t: fpu\n",
        encoding="utf-8",
    )
    assert read_cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_bf16"}
    assert read_cpu_flags(tmp_path / "missing") == frozenset()  # not Linux: nothing assumed


@pytest.mark.parametrize(
    ("flags", "want", "named"),
    [
        (ZEN3, "fp32", "no amx_bf16 or avx512_bf16"),
        (AVX512, "fp32", "no amx_bf16 or avx512_bf16"),
        (ZEN4, "bf16", "natively (avx512_bf16)"),
        (SAPPHIRE, "bf16", "natively (amx_bf16)"),
        (set(), "fp32", "no amx_bf16"),
    ],
)
def test_auto_on_a_cpu_is_bf16_only_where_it_is_native(flags, want, named):
    chosen = choose_precision("auto", "cpu", flags)
    assert chosen.name == want
    assert chosen.why.startswith("auto: ") and named in chosen.why
    assert chosen.describe() == f"{want} ({chosen.why})"


def test_auto_on_cuda_follows_the_gpu_whatever_the_cpu():
    assert choose_precision("auto", "cuda", ZEN3, cuda_bf16=True).name == "bf16"
    assert choose_precision("auto", "cuda", SAPPHIRE, cuda_bf16=False).name == "fp16"


def test_a_precision_asked_for_is_kept_and_a_slow_one_says_so():
    assert choose_precision("fp32", "cpu", SAPPHIRE).describe() == "fp32 (train.precision)"
    fast, slow = choose_precision("bf16", "cpu", ZEN4), choose_precision("bf16", "cpu", ZEN3)
    assert (fast.name, slow.name) == ("bf16", "bf16")
    assert fast.why == "train.precision" and "slower than fp32" in slow.why
    with pytest.raises(MtError, match="train.precision fp16 needs CUDA"):
        choose_precision("fp16", "cpu", SAPPHIRE)


@pytest.mark.parametrize(
    ("name", "device", "flags", "int8", "want"),
    [
        ("auto", "cpu", ZEN3, False, "fp32"),
        # a CPU decodes fp32 by default, native bf16 or not: the equalities with HF, the
        # export and `mt score` hold there (bf16 is asked for)
        ("auto", "cpu", ZEN4, False, "fp32"),
        ("auto", "cpu", SAPPHIRE, False, "fp32"),
        ("bf16", "cpu", ZEN4, False, "bf16"),
        ("bf16", "cpu", SAPPHIRE, False, "bf16"),
        ("auto", "cpu", ZEN4, True, "fp32"),  # int8 Linear layers take fp32 inputs
        ("fp32", "cpu", ZEN4, True, "fp32"),
        ("bf16", "cpu", ZEN3, False, "bf16"),  # asked for: runs, slowly
        ("auto", "cuda", ZEN3, False, "bf16"),
        ("fp16", "cuda", ZEN3, False, "fp16"),
    ],
)
def test_decode_dtype_choices(name, device, flags, int8, want):
    chosen = choose_decode_dtype(name, device, flags, cuda_bf16=True, int8=int8, option="--dtype")
    assert chosen.name == want


def test_decode_dtypes_that_cannot_run_are_one_line_naming_the_option():
    with pytest.raises(MtError, match=r"^--dtype fp16 decodes on CUDA only"):
        choose_decode_dtype("fp16", "cpu", SAPPHIRE, option="--dtype")
    with pytest.raises(MtError, match=r"^--dtype bf16 cannot be combined with int8"):
        choose_decode_dtype("bf16", "cpu", ZEN4, int8=True, option="--dtype")
    with pytest.raises(MtError, match="must be auto, fp32, bf16 or fp16, got 'fp8'"):
        choose_decode_dtype("fp8", "cpu", ZEN4)


@pytest.mark.parametrize(("flags", "want"), [(ZEN4, "bf16"), (ZEN3, "fp32")])
def test_the_start_line_names_the_precision_and_why(flags, want, tmp_path, monkeypatch, capsys):
    """The trainer reads the flags through mt.device (here: given), picks, and says so."""
    monkeypatch.setattr(mt_device, "cpu_flags", lambda: frozenset(flags))
    cfg = load_config(reverse_task_config(tmp_path, precision="auto", loader_workers=0))
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        assert trainer.precision == want
        capsys.readouterr()
        trainer._announce()
        err = capsys.readouterr().err
    finally:
        assert trainer.lock is not None
        trainer.lock.release()
    why = choose_precision("auto", "cpu", flags).why
    assert f", precision {want} ({why}), " in err


def test_mt_train_says_what_this_cpu_gives(tmp_path, monkeypatch, mt_cli):
    """The real command on this machine's own flags (not the suite's stand-in): whatever the
    CPU, the line says what the rule gives for the flags /proc/cpuinfo lists."""
    monkeypatch.delenv("MT_CPU_FLAGS", raising=False)
    config = reverse_task_config(tmp_path, max_steps=1, eval_every=1, precision="auto")
    result = mt_cli("train", config, "--run-dir", tmp_path / "run", cwd=REPO)
    assert result.rc == 0, result.err
    start = [line for line in result.err.splitlines() if line.startswith("mt train: ")]
    expected = choose_precision("auto", "cpu", read_cpu_flags()).describe()
    assert len(start) == 1 and f", precision {expected}, " in start[0], result.err


def test_cuda_attention_leaves_out_cudnn_and_a_cpu_changes_nothing():
    """cuDNN's attention builds a plan per input shape, which a decode meets every step: CUDA
    entry points switch it off, and CPU ones leave torch's setting as it was."""
    import torch

    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        mt_device.planless_attention(torch.device("cpu"))
        assert torch.backends.cuda.cudnn_sdp_enabled()
        mt_device.planless_attention(torch.device("cuda"))
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)

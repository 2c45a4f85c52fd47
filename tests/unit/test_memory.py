"""The allocator setting `mt train` applies: accepted by glibc, and memory is reused."""

from __future__ import annotations

import platform
import sys

import pytest
import torch

from mt.memory import keep_freed_memory


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="glibc's mallopt only",
)
def test_glibc_accepts_the_setting_and_large_tensors_still_work():
    assert keep_freed_memory() is True
    x = torch.ones(40 * 1024 * 1024 // 4)  # above glibc's largest mmap threshold
    assert x.sum().item() == x.numel()
    del x
    y = torch.zeros(40 * 1024 * 1024 // 4)
    assert y.abs().sum().item() == 0.0

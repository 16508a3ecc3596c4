"""Which precision a run computes in on a device: bf16 or fp16 autocast on a CUDA GPU, bf16 autocast on a CPU that
has bfloat16 instructions, fp32 everywhere else.

A CPU with bfloat16 dot-product instructions (AVX512-BF16 or AMX-BF16) runs the matmuls two to three times as fast
as fp32 (docs/benchmarks.md, "bf16 on a CPU"); without them oneDNN emulates bfloat16, slower than fp32, so such a
CPU trains in fp32. Autocast keeps the weights, the optimizer, softmax, LayerNorm and the losses in fp32.
"""

from __future__ import annotations

import contextlib
import functools
import platform
from pathlib import Path

import torch

# /proc/cpuinfo flags of the x86 instructions that make bfloat16 matmuls faster than fp32 ones.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def bf16_in_cpuinfo(cpuinfo: str) -> bool:
    """Whether /proc/cpuinfo text lists a bfloat16 matmul instruction among its first CPU's flags."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return any(flag in flags for flag in BF16_CPU_FLAGS)
    return False


@functools.lru_cache(maxsize=1)
def cpu_has_bf16() -> bool:
    """Whether this CPU has bfloat16 matmul instructions (read once from /proc/cpuinfo; False where there is no such
    file, e.g. macOS, or on an architecture not measured here)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        return bf16_in_cpuinfo(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        return False


def computes_in(device: torch.device | str, precision: str = "bf16") -> str:
    """The precision a run asked for `precision` computes in on `device`: "bf16", "fp16" or "fp32"."""
    device = torch.device(device)
    if device.type == "cuda" and precision in ("bf16", "fp16"):
        return precision
    if device.type == "cpu" and precision == "bf16" and cpu_has_bf16():
        return "bf16"
    return "fp32"


def autocast_for(device: torch.device | str, precision: str = "bf16"):
    """The autocast context a precision (train_config.PRECISIONS) gives on a device (see `computes_in`)."""
    device = torch.device(device)
    used = computes_in(device, precision)
    if used == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if used == "bf16" else torch.float16)

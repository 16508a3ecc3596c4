"""Keep freed memory in the process for reuse, so training steps stop paying the kernel for fresh pages.

glibc's malloc serves every block above a threshold (at most 32 MB) with its own `mmap` and returns it on free, so a
step whose MLM logits and their gradients exceed it had the kernel hand out and zero ~100,000 fresh pages a step.
Two `mallopt` calls (what preloading jemalloc or tcmalloc does for Intel's PyTorch CPU guide): large blocks from the
heap too (M_MMAP_MAX = 0), and up to 1 GiB of freed memory kept at the heap's top (M_TRIM_THRESHOLD). The process
then keeps its peak memory until it exits, so only processes that train call it (CLI `train`, `finetune`, `bench`,
the app's training process), never the app's server; and a process interleaving trainings of very different
buffers can lose by it (benchmarks/time_to_quality.py leaves it off). Measured: docs/benchmarks.md, "Speed paths
on the workloads people run" (+4% on a `bench` step, within 2.5% either way elsewhere).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1  # from glibc's malloc.h
_M_MMAP_MAX = -4
_KEEP_BYTES = 1 << 30
_applied = False
# CLI commands whose process trains and then exits: they keep freed memory.
TRAINING_COMMANDS = ("train", "finetune", "bench")


def keep_freed_memory() -> bool:
    """Apply the setting above to this process (glibc on Linux only); return whether it is in effect."""
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success; a C library that rejects either value leaves the default behaviour.
    _applied = mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES) == 1
    return _applied

"""Keep freed memory in the process for reuse, so training steps stop paying the kernel for fresh pages.

glibc's malloc serves every allocation above a threshold (at most 32 MB) with its own `mmap` and returns it to
the kernel with `munmap` when freed. A training step of a BERT with a real vocabulary allocates and frees several
such buffers every step (the MLM logits of `mini` at batch 32 x 128 are 608 x 30,522 floats = 74 MB, and their
softmax and gradient as many again), so every step the kernel hands out and zeroes tens of thousands of fresh
4 KB pages: on a 2-core VM that was ~100,000 page faults and ~20% of a `mini` step. This is the problem that
Intel's PyTorch CPU tuning guide solves by preloading jemalloc or tcmalloc; here two `mallopt` calls do it
without another library: serve large blocks from the heap too (M_MMAP_MAX = 0), and keep up to 1 GiB of freed
memory at the top of the heap instead of trimming it (M_TRIM_THRESHOLD). The cost is that the process keeps its
peak memory until it exits (a loop that allocates and frees one 80 MB tensor settles at ~600 MB instead of
~220 MB), which is why only the processes that train call it (CLI `train`, `finetune` and `bench`, and the app's
training process), never the app's server. It changes the process's own malloc, not its environment, and needs
no restart.

What it is worth (docs/benchmarks.md, "Speed paths"; one thread, CPU time per step): +4% on a `bench` step;
between -2.5% and +1% on the app's default run, the CLI's default recipe and fine-tuning the shipped model, whose
buffers stay under glibc's threshold. It suits a process that trains one model with steady shapes. One that interleaves trainings with very
different buffers can lose by it: in benchmarks/time_to_quality.py (ours and a `transformers` loop with
4,096 x 8,000 logits alternating in one process) our recipe made 21% fewer steps with it in 5 minutes (2,276
against 2,884; the reference 578 against 435), so that benchmark leaves it off.
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

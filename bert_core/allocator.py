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
training process), never the app's server. Measured on `tiny` with a 30,522 vocabulary, batch 32 x 128, one
thread, 300 steps: with it, memory stopped growing at 1.2 GB by step 150 and page faults stopped; without it,
42,000 page faults a step and 1.45 GB at step 250, still growing (glibc's own fragmentation); 15% more steps/s.
It suits a process that trains one model with steady shapes. One that interleaves trainings with very different
buffers can lose by it: in benchmarks/time_to_quality.py (ours and a `transformers` loop with 4,096 x 8,000
logits alternating in one process) our recipe made 21% fewer steps with it in 5 minutes (2,276 against 2,884;
the reference 578 against 435), so that benchmark leaves it off.

The same processes also ask glibc's malloc for transparent huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1,
glibc 2.35+): the heap that now holds every activation is then mapped in 2 MB pages, not 4 KB ones, and the
memory-bound half of a step misses the TLB far less. glibc reads tunables only when a process starts, so the
CLI's training commands start again once with it set (`reexec_with_huge_pages`, from `python -m bert_core`), and
the app's training process is started with it. Measured with `bench` (`mini`, 2 threads, separate processes
alternated): median step 0.553 s with it (9 runs, 0.550-0.582) against 0.583 s without (11 runs, 0.562-0.605); it
also removed most of the runs where the whole process was slow. Where the kernel's huge pages are off ("never")
or the C library is not glibc, the variable does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from typing import Mapping

_M_TRIM_THRESHOLD = -1  # from glibc's malloc.h
_M_MMAP_MAX = -4
_KEEP_BYTES = 1 << 30
_applied = False
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"
# CLI commands whose process trains and then exits: they keep freed memory and use huge pages.
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


def with_huge_pages(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of `env` whose GLIBC_TUNABLES also asks malloc for transparent huge pages (kept if already set)."""
    tunables = env.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in tunables:
        return dict(env)
    return dict(env, GLIBC_TUNABLES=":".join(t for t in (tunables, HUGE_PAGES_TUNABLE) if t))


def huge_pages_requested() -> bool:
    """Whether this process was started with the huge-page tunable (its value chosen by us or by the user)."""
    return "glibc.malloc.hugetlb" in os.environ.get("GLIBC_TUNABLES", "")


def reexec_with_huge_pages(argv: list[str]) -> None:
    """For `python -m bert_core <command> ...`: when the command trains (TRAINING_COMMANDS; not `bench
    --default-malloc`, which measures glibc's defaults) and the tunable is not set, replace this process with the
    same command line and the tunable set. Call it before importing torch: nothing done before is kept."""
    if not sys.platform.startswith("linux") or huge_pages_requested() or not hasattr(sys, "orig_argv"):
        return
    if not argv or argv[0] not in TRAINING_COMMANDS or "--default-malloc" in argv:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, with_huge_pages(os.environ))

"""The CUDA GPUs a shared server trains its runs on, and how many runs share each (`bert_core.serve.runs`).

A class's small runs are bound by the kernel launches of their one CPU thread, so several share one GPU, each in its
own process, up to `GPU_RUNS_ENV` at once (DEFAULT_GPU_RUNS measured: docs/benchmarks.md, "A class on one GPU").

Torch-free and fork-safe: no CUDA driver is initialised in the server or the launcher (the forks could not use it).
Without a GPU device node the answer comes at once; otherwise a short child interpreter asks torch via NVML, once.

A GPU that fails a run with a CUDA fault other than running out of memory (an illegal address, an ECC error, a lost
device) gets no more slots for the rest of the server process (`mark_failed`, `usable`); out of memory is the run's
own size, and fails only that run.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("bert_core.app")

GPU_RUNS_ENV = "BERT_EXPLORER_GPU_RUNS"   # runs that share one GPU at once; 0 keeps every run on the CPU
# Eight of the Train page's runs at once on one H100 finished 3.6-3.8x the runs a minute of one alone; sixteen added
# only 12-15% while each run took 1.75x as long; a run's process holds 0.8-1.1 GB, so eight fit a 16 GB card.
DEFAULT_GPU_RUNS = 8
# Device nodes of the GPU drivers torch.cuda can use (NVIDIA's, and ROCm's for AMD): without one, there is no GPU.
DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd")
PROBE_TIMEOUT_S = 60.0
_PROBE = """
import json, torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
gpus = []
for i in range(n):
    p = torch.cuda.get_device_properties(i)
    gpus.append({"name": p.name, "memory_mb": int(p.total_memory // 2**20)})
print(json.dumps(gpus))
"""


# What a CUDA fault's message starts with in torch's errors (RuntimeError or torch.AcceleratorError, as a run's failure
# message carries it: "RuntimeError: CUDA error: an illegal memory access was encountered"), cuBLAS's and cuDNN's too.
CUDA_FAULTS = ("CUDA error", "CUBLAS_STATUS_", "cuDNN error", "CUDNN_STATUS_", "CUDA driver error")
_FAILED: dict[str, str] = {}   # device -> the error that took it out of use, for the rest of this server process
_FAILED_LOCK = threading.Lock()


@dataclass(frozen=True)
class ServerGpu:
    device: str       # "cuda" for the only GPU, "cuda:0", "cuda:1"... where there are several
    name: str
    memory_mb: int
    runs: int


def gpu_runs() -> int:
    """Runs that share one GPU at once: `$BERT_EXPLORER_GPU_RUNS` (0 included), else DEFAULT_GPU_RUNS."""
    raw = os.environ.get(GPU_RUNS_ENV, "").strip()
    return int(raw) if raw.isdigit() else DEFAULT_GPU_RUNS


def _probe() -> list[dict]:
    if not any(Path(node).exists() for node in DEVICE_NODES):
        return []
    env = dict(os.environ, PYTORCH_NVML_BASED_CUDA_CHECK="1", OMP_NUM_THREADS="1")
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env,
                              timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        log.warning("could not ask torch for the GPUs (%s): runs train on the CPU", type(exc).__name__)
        return []
    return [g for g in found if isinstance(g, dict) and isinstance(g.get("name"), str)]


def server_gpus(probe=_probe) -> list[ServerGpu]:
    per_gpu = gpu_runs()
    if per_gpu == 0:
        return []
    found = probe()
    several = len(found) > 1
    return [ServerGpu(f"cuda:{i}" if several else "cuda", g["name"], int(g.get("memory_mb") or 0), per_gpu)
            for i, g in enumerate(found)]


_DETECTING = threading.Lock()


def detected_gpus() -> tuple[ServerGpu, ...]:
    """server_gpus(), once per server process; a second caller waits for the first one's answer."""
    with _DETECTING:
        return _detected()


@functools.lru_cache(maxsize=1)
def _detected() -> tuple[ServerGpu, ...]:
    gpus = tuple(server_gpus())
    for gpu in gpus:
        log.info("runs train on %s (%s, %d MB), %d at once", gpu.device, gpu.name, gpu.memory_mb, gpu.runs)
    return gpus


def detect_in_background(gpus=detected_gpus) -> None:
    """Ask for the GPUs on a thread now, so that a server's first Start does not wait for the probe."""
    threading.Thread(target=gpus, name="bert-gpu-probe", daemon=True).start()


def is_gpu_fault(error: str | None) -> bool:
    if not error or "out of memory" in error.lower():
        return False
    return any(fault in error for fault in CUDA_FAULTS)


def mark_failed(device: str, error: str) -> bool:
    """Take `device` out of use (logged once); True the first time."""
    with _FAILED_LOCK:
        if device in _FAILED:
            return False
        _FAILED[device] = error
    log.error("GPU %s failed a run (%s): it is taken out of use, and its runs train on the CPU", device, error)
    return True


def failed_gpus() -> dict[str, str]:
    with _FAILED_LOCK:
        return dict(_FAILED)


def usable(gpus) -> list:
    failed = failed_gpus()
    return [gpu for gpu in gpus if gpu.device not in failed]


def device_label(device: str | None, gpus=()) -> str:
    """Where a run trains, as a page says it: 'the GPU (NVIDIA H100 80GB HBM3)', 'GPU 1 (...)', 'the CPU'."""
    if not device or not device.startswith("cuda"):
        return "the CPU"
    gpu = next((g for g in gpus if g.device == device), None)
    name = f" ({gpu.name})" if gpu is not None else ""
    return f"GPU {device.split(':')[1]}{name}" if ":" in device else f"the GPU{name}"

"""Where a run computes: its device, its precision, and under torchrun this process's place in the job and what the
ranks exchange (the sums of a step, a fingerprint of the first batch). A plain single-process run is rank 0 of 1.

The precision: bf16 or fp16 autocast on a CUDA GPU, bf16 autocast on a CPU that has bfloat16 instructions, fp32
everywhere else. A CPU with bfloat16 dot-product instructions (AVX512-BF16 or AMX-BF16) runs the matmuls two to three
times as fast as fp32 (docs/benchmarks.md, "bf16 on a CPU"); without them oneDNN emulates bfloat16, slower than fp32,
so such a CPU trains in fp32. Autocast keeps the weights, the optimizer, softmax, LayerNorm and the losses in fp32.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from bert_core.errors import BertCoreError


@dataclass(frozen=True)
class DistInfo:
    """This process's place in a torchrun job (rank 0 of 1 when not distributed)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the one process that saves checkpoints and reports."""
        return self.rank == 0


def init_distributed(device: str = "auto") -> DistInfo:
    """Join the torchrun process group when WORLD_SIZE > 1 (nccl on GPU, gloo on CPU); a no-op otherwise."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistInfo()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and device in ("auto", "cuda")
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank)


def current_dist() -> DistInfo:
    """The DistInfo of the initialised process group, or the single-process default."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))
    return DistInfo()


def shutdown_distributed() -> None:
    """Leave the process group if one was joined."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def resolve_device(name: str, dist_info: DistInfo | None = None) -> torch.device:
    """'auto' -> CUDA when present (this rank's GPU under torchrun), else CPU; other names as given."""
    dist_info = dist_info or DistInfo()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise BertCoreError("device 'cuda' was asked for but no CUDA GPU is visible; use --device cpu or auto")
        return torch.device("cuda", dist_info.local_rank if dist_info.world_size > 1 else torch.cuda.current_device())
    try:
        return torch.device(name)
    except RuntimeError as e:
        raise BertCoreError(f"unknown device {name!r}: use auto, cpu or cuda") from e


def ddp_wrapped(model: torch.nn.Module, device: torch.device, dist_info: DistInfo) -> DistributedDataParallel | None:
    """The model wrapped for data parallelism when the job has more than one rank (its forward averages the
    gradients over ranks), else None: a single process runs the model itself."""
    if dist_info.world_size <= 1:
        return None
    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def all_reduce(t: torch.Tensor, dist_info: DistInfo, device: torch.device) -> torch.Tensor:
    """`t` summed over every rank (on the device the backend needs), or `t` itself in a single process."""
    if dist_info.world_size == 1:
        return t
    # nccl reduces only GPU tensors; gloo only CPU ones.
    moved = t.to(device) if device.type == "cuda" else t.cpu()
    dist.all_reduce(moved)
    return moved


def check_ranks_agree(batch, device: torch.device) -> None:
    """Every rank must read the same global batch; a different corpus, tokenizer or seed would silently
    train each rank on other data, so compare a fingerprint of the first batch across ranks."""
    weights = torch.arange(1, batch.input_ids.numel() + 1, dtype=torch.float64)
    fingerprint = float((batch.input_ids.flatten().to(torch.float64) * weights).sum())
    both = torch.tensor([fingerprint, -fingerprint], dtype=torch.float64)
    both = both.to(device) if device.type == "cuda" else both
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    if float(both[0]) != fingerprint or float(-both[1]) != fingerprint:
        raise BertCoreError(
            "the processes of this distributed run read different training batches: give every rank the same "
            "corpus files, tokenizer and seed"
        )


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

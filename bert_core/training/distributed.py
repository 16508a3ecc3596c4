"""A pretraining run under torchrun: this process's place in the job, its device, and what the ranks exchange (the
sums of a step, a fingerprint of the first batch). A plain single-process run is rank 0 of 1."""

from __future__ import annotations

import os
from dataclasses import dataclass

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

    is_main = property(lambda self: self.rank == 0)   # rank 0: the one process that saves checkpoints and reports


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

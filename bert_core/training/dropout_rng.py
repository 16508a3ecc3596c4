"""A run's own random stream. Dropout draws from torch's global generator; the run keeps its own copy of that state so
that a stop/resume (even through a checkpoint) replays exactly the same dropout masks."""

from __future__ import annotations

import contextlib

import torch


def run_seed(seed: int, rank: int) -> int:
    """The seed of a rank's stream: each rank of a torchrun job draws its own masks, the same ones for a seed."""
    return seed * 1_000_003 + rank


class DropoutRng:
    """The torch (and CUDA) generator state of one run's rank, installed in torch's global generators while it runs."""

    def __init__(self, seed: int, rank: int):
        self.rank = rank
        gen = torch.Generator().manual_seed(run_seed(seed, rank))
        self.state: dict = {"torch": gen.get_state()}
        if torch.cuda.is_available():
            self.state["cuda"] = None  # seeded on first run from the config seed

    @contextlib.contextmanager
    def installed(self, seed: int):
        """For the run, the run's state in torch's global generators; after it, the caller's state back in them."""
        outer_rng = torch.get_rng_state()
        outer_cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        self._install(seed)
        try:
            yield
        finally:
            self._capture()
            torch.set_rng_state(outer_rng)
            if outer_cuda is not None:
                torch.cuda.set_rng_state_all(outer_cuda)

    def current(self, running: bool) -> dict:
        """The run's state now: the global generators' while it runs (they hold it then), else the kept copy."""
        if not running:
            return self.state
        rng = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return rng

    def _install(self, seed: int) -> None:
        torch.set_rng_state(self.state["torch"])
        if torch.cuda.is_available():
            cuda_state = self.state.get("cuda")
            if cuda_state is None:
                torch.cuda.manual_seed_all(run_seed(seed, self.rank))
            else:
                torch.cuda.set_rng_state_all(cuda_state)

    def _capture(self) -> None:
        self.state = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            self.state["cuda"] = torch.cuda.get_rng_state_all()

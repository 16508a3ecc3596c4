"""Where a pretraining run's batches come from: short sequences first (TrainConfig.short_seq_length), then the full
length; under torchrun this rank's rows of the global batch; each cut into grad_accum micro-batches. The position
in both streams is part of trainer_state.json, so a resumed run reads on exactly where it stopped."""

from __future__ import annotations

import dataclasses

import torch

from bert_core.data.pretraining_data import PretrainingStream
from bert_core.training.distributed import DistInfo, check_ranks_agree
from bert_core.training.train_config import TrainConfig


def split_rows(batch, parts: int) -> list:
    """Cut a Batch into up to `parts` consecutive row ranges, each trimmed to its own longest sequence."""
    n = len(batch.input_ids)
    bounds = [round(i * n / parts) for i in range(parts + 1)]
    out = []
    for start, stop in zip(bounds, bounds[1:]):
        if stop > start:
            out.append(take_rows(batch, start, stop))
    return out


def take_rows(batch, start: int, stop: int):
    """Rows start:stop of a Batch, with padding columns beyond their longest sequence dropped."""
    width = int(batch.attention_mask[start:stop].sum(1).max()) if stop > start else 0
    changes = {}
    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        if isinstance(value, torch.Tensor):
            value = value[start:stop]
            if value.dim() == 2:
                value = value[:, :width]
        elif isinstance(value, list):
            value = value[start:stop]
        changes[f.name] = value
    return dataclasses.replace(batch, **changes)


class PretrainingBatches:
    """The training data of one run and, made from it when first needed, the data of its short-sequence phase;
    hands out each update's micro-batches. The config comes with each call: a watcher may extend the run."""

    def __init__(self, data: PretrainingStream, dist_info: DistInfo, device: torch.device):
        self.data = data
        self.dist = dist_info
        self.device = device
        # The data of the short-sequence phase (TrainConfig.short_seq_length), made from `data` when first needed.
        self.short_data: PretrainingStream | None = None
        self._data_iter = None
        self._short_iter = None
        self._ranks_checked = False

    def start(self) -> None:
        """Open the training stream where the data stands (at the start of a run, after a resume)."""
        if self._data_iter is None:
            self._data_iter = iter(self.data)

    def in_short_phase(self, config: TrainConfig, fraction_done: float) -> bool:
        """Whether the next update belongs to the short-sequence phase (TrainConfig.short_seq_length)."""
        # Once a long batch has been taken the phase is over for good: a resume that extends the budget (and so
        # lowers the fraction done) must not go back to short sequences.
        return (0 < config.short_seq_length < config.max_seq_length and fraction_done < config.short_seq_fraction
                and not self.data.started)

    def next_micro_batches(self, config: TrainConfig, fraction_done: float) -> list:
        """This rank's rows of the next global batch, cut into config.grad_accum micro-batches."""
        batch = self._next_batch(config, fraction_done)
        if self.dist.world_size > 1:
            # The data yields the global batch (the same on every rank): this rank trains on its slice of rows,
            # so N processes with batch b do exactly what one process with batch N*b does.
            if not self._ranks_checked:
                check_ranks_agree(batch, self.device)
                self._ranks_checked = True
            bounds = [round(i * len(batch) / self.dist.world_size) for i in range(self.dist.world_size + 1)]
            batch = take_rows(batch, bounds[self.dist.rank], bounds[self.dist.rank + 1])
        return split_rows(batch, config.grad_accum)

    def _next_batch(self, config: TrainConfig, fraction_done: float):
        if self.in_short_phase(config, fraction_done):
            if self._short_iter is None:
                self._short_iter = iter(self._short(config))
            return next(self._short_iter)
        return next(self._data_iter)

    def _short(self, config: TrainConfig):
        if self.short_data is None:
            # The data yields the global batch; keep its ratio to the per-process batch (the world size).
            per_process = config.short_seq_batch_size or max(
                1, config.batch_size * config.max_seq_length // config.short_seq_length)
            self.short_data = self.data.resized(config.short_seq_length,
                                                per_process * max(self.data.batch_size // config.batch_size, 1))
        return self.short_data

    def state_dict(self) -> dict:
        """The position in both streams, as trainer_state.json holds it ("data_state", "short_data_state")."""
        return {
            "data_state": self.data.state_dict(),
            "short_data_state": self.short_data.state_dict() if self.short_data is not None else None,
        }

    def load_state_dict(self, state: dict, config: TrainConfig) -> None:
        """Put both streams back where a trainer_state.json says they stood."""
        if state.get("data_state") is not None:
            self.data.load_state_dict(state["data_state"])
            self._data_iter = None
        if state.get("short_data_state") is not None:
            self._short(config).load_state_dict(state["short_data_state"])
            self._short_iter = None

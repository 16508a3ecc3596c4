"""The held-out side of a pretraining run: its fixed evaluation batches (the same masks at every evaluation), the
baselines its figures are read beside (the unigram guess, the untrained model), and an EvalEvent per evaluation."""

from __future__ import annotations

import dataclasses

import torch

from bert_core.training.evaluation import evaluate, unigram_baseline_for
from bert_core.training.pretraining_events import EvalEvent, eval_event
from bert_core.training.train_config import TrainConfig


class HeldoutEvaluation:
    """Evaluates a run's model on its held-out data (a data set, a list of batches, or None for no evaluations) and
    keeps the baselines that trainer_state.json and metrics.json report."""

    def __init__(self, eval_data):
        self.eval_data = eval_data
        self.baselines: dict = {}
        self._batches = None

    def batches(self, config: TrainConfig) -> list:
        """The fixed held-out batches (same masks at every evaluation), built once on first use."""
        if self._batches is None:
            if self.eval_data is None:
                self._batches = []
            elif isinstance(self.eval_data, (list, tuple)):
                self._batches = list(self.eval_data)
            else:
                self._batches = self.eval_data.eval_batches(config.eval_batches, seed=config.seed)
        return self._batches

    def prepare_baselines(self, data, config: TrainConfig) -> None:
        """The unigram baseline on the held-out batches, counted from the training `data` (once per run)."""
        batches = self.batches(config)
        if batches and not self.baselines:
            self.baselines = unigram_baseline_for(data, batches)

    def evaluate(self, model: torch.nn.Module, step: int, device: torch.device,
                 config: TrainConfig) -> EvalEvent | None:
        """The model's held-out figures at `step` (None without held-out data); at step 0 they are also the
        untrained baseline."""
        batches = self.batches(config)
        if not batches:
            return None
        result = evaluate(model, batches, device=device, precision=config.precision)
        event = eval_event(step, result, config.nsp)
        if step == 0 and "untrained" not in self.baselines:
            self.baselines["untrained"] = dataclasses.asdict(event)
        return event

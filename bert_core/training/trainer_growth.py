"""Starting small, then growing: the part of a pretraining run (TrainConfig.grow_fraction) that trains a smaller model
first, grows it to the run's size (bert_core.model.growth) and schedules the learning rate over both stages. A mixin of
training.trainer.Trainer, which holds the model, the config and the callbacks it reads."""

from __future__ import annotations

from bert_core.model.config import BertConfig
from bert_core.model.growth import grow_model
from bert_core.training.optimization import lr_multiplier, stage_multiplier
from bert_core.training.pretraining_events import GrowthEvent
from bert_core.training.recipes import seed_learning_rate


class TrainerGrowth:
    """Trainer's growth: `grow_to` (the size to grow into, None: the run does not grow) and `growth` (when it grew)."""

    grow_to: BertConfig | None
    growth: dict | None

    def growth_pending(self) -> bool:
        """Whether the model is still the small one of a run that grows (TrainConfig.grow_fraction)."""
        if self.grow_to is None:
            return False
        c = self.model.config
        return (c.hidden_size, c.num_hidden_layers) != (self.grow_to.hidden_size, self.grow_to.num_hidden_layers)

    def grow_if_due(self) -> bool:
        """Grow the model now if the run has reached its grow_fraction (each update checks first; *Step once* too,
        before it notes the weights); True when it grew."""
        if self.growth_pending() and self._fraction_done() >= self.config.grow_fraction:
            self._grow()
            return True
        return False

    def _learning_rate(self) -> float:
        """The rate of the next update: the schedule's, over each stage of a run that grows, to the peak in effect
        (a peak changed while the run trains scales the schedule from its step on: TrainConfig.changes)."""
        cfg = self.config.at(self.step)
        if self.grow_to is None or (self.growth is None and not self.growth_pending()):
            return cfg.learning_rate * lr_multiplier(cfg, self.step, self._elapsed_now())
        p = self._fraction_done()
        if self.growth_pending():
            c, target = self.model.config, self.grow_to
            peak = seed_learning_rate(cfg.learning_rate, target.hidden_size, target.num_hidden_layers,
                                      c.hidden_size, c.num_hidden_layers)
            return peak * stage_multiplier(cfg, p / cfg.grow_fraction)
        start = self.growth["fraction"] if self.growth else cfg.grow_fraction
        return cfg.learning_rate * stage_multiplier(cfg, (p - start) / max(1.0 - start, 1e-9))

    def _grow(self) -> None:
        """Grow the small model to the run's size (bert_core.model.growth) and train on it with a new optimizer."""
        small = self.model
        before = (small.config.num_hidden_layers, small.config.hidden_size)
        with self._step_lock:
            self._set_model(grow_model(small, self.grow_to, seed=self.config.seed), self.optimization.on_gradients)
            self.growth = {"step": self.step, "fraction": self._fraction_done(), "from_size": list(before),
                           "to_size": [self.grow_to.num_hidden_layers, self.grow_to.hidden_size]}
        event = GrowthEvent(step=self.step, fraction=self.growth["fraction"], from_size=before,
                            to_size=tuple(self.growth["to_size"]), model_config=self.grow_to.to_hf_dict())
        for callback in self.callbacks:
            callback(event)

"""Pretraining loop (MLM + NSP) that can be watched, stopped, resumed exactly and run under torchrun.

The Trainer is the loop and its bookkeeping; each part of an update is a collaborator: the batches
(pretraining_batches), the forward and backward passes, the optimizer and its schedule (optimization), held-out
evaluation (evaluation), the events it reports (pretraining_events), checkpoint I/O (trainer_checkpoint), the torchrun
job (distributed), and here the dropout RNG (DropoutRng) and growing a run that starts small (TrainerGrowth).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import torch

from bert_core.errors import BertCoreError
from bert_core.model.bert import is_causal
from bert_core.model.config import BertConfig
from bert_core.model.growth import grow_model
from bert_core.training.distributed import current_dist, ddp_wrapped, resolve_device
from bert_core.training.evaluation import HeldoutEvaluation, step_event, step_loss
from bert_core.training.optimization import GradientAccumulator, Optimization, lr_multiplier, stage_multiplier
from bert_core.training.pretraining_batches import PretrainingBatches
from bert_core.training.pretraining_events import GrowthEvent, StepEvent
from bert_core.training.recipes import seed_learning_rate
from bert_core.training.run_loop import RunLoop
from bert_core.training.train_config import TrainConfig
from bert_core.training.trainer_checkpoint import TrainerCheckpointing


# A run's own random stream. Dropout draws from torch's global generator; the run keeps its own copy of that state so
# that a stop/resume (even through a checkpoint) replays exactly the same dropout masks.
def run_seed(seed: int, rank: int) -> int:
    """The seed of a rank's stream: each rank of a torchrun job draws its own masks, the same ones for a seed."""
    return seed * 1_000_003 + rank


def global_rng_state() -> dict:
    """torch's global generator state now, and CUDA's where there is a GPU."""
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


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
        outer = global_rng_state()
        torch.set_rng_state(self.state["torch"])
        if torch.cuda.is_available():
            if self.state.get("cuda") is None:
                torch.cuda.manual_seed_all(run_seed(seed, self.rank))
            else:
                torch.cuda.set_rng_state_all(self.state["cuda"])
        try:
            yield
        finally:
            self.state = global_rng_state()
            torch.set_rng_state(outer["torch"])
            if "cuda" in outer:
                torch.cuda.set_rng_state_all(outer["cuda"])

    def current(self, running: bool) -> dict:
        """The run's state now: the global generators' while it runs (they hold it then), else the kept copy."""
        return global_rng_state() if running else self.state


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


class Trainer(TrainerGrowth, TrainerCheckpointing, RunLoop):
    """Runs BertForPreTraining updates one at a time; observable and stoppable from another thread (run_loop), and
    `run()` goes on after a stop. Growing is TrainerGrowth's; saving and resuming are TrainerCheckpointing's."""

    step_event_type = StepEvent
    # One model, kept as its checkpoint: no race's models or results inside it (the server's run_protocols.LiveView).
    tuners: tuple = ()
    results: Mapping = MappingProxyType({})

    def __init__(self, model, tokenizer, data, config: TrainConfig, eval_data=None,
                 callbacks: Sequence[Callable[[Any], None]] = (), probes=None, checkpoint_dir=None,
                 metadata: dict | None = None, grow_to: BertConfig | None = None):
        super().__init__(callbacks)
        self.config = config
        self.tokenizer = tokenizer
        self.probes = probes
        self.checkpoint_dir = checkpoint_dir
        # Free-form facts recorded in trainer_state.json (held-out split, command line, corpora...).
        self.metadata: dict = dict(metadata or {})
        self.dist = current_dist()
        self.device = resolve_device(config.device, self.dist)

        want, kind = ("causal" if config.objective == "clm" else "bidirectional"), \
            ("causal" if is_causal(model) else "bidirectional")
        if want != kind:
            raise BertCoreError(f"the {config.objective} objective trains a {want} model, and this one is {kind}")
        # A run that starts small (TrainConfig.grow_fraction) grows into this config; `growth` records when it did.
        self.grow_to = grow_to if config.grow_fraction else None
        self.growth: dict | None = None
        self._set_model(model)
        self.batches = PretrainingBatches(data, self.dist, self.device)
        self.last_batches: list = []   # the latest update's micro-batches (set in _train_step)
        self.evaluation = HeldoutEvaluation(eval_data)
        self.rng = DropoutRng(config.seed, self.dist.rank)

        self.tokens_seen = 0
        self.last_checkpoint_step: int | None = None  # the step of the newest checkpoint in checkpoint_dir
        self._last_checkpoint = time.monotonic()
        # A checkpoint that cannot be written (a full disk) ends the run, as the user who asked for checkpoints
        # expects; a server that keeps checkpoints only as its own safety net sets this False: the run goes on.
        self.checkpoint_failures_fatal = True

    def _set_model(self, model, on_gradients=None) -> None:
        """Train `model` from here on: on this device, wrapped for data parallelism, with a new optimizer (which
        calls `on_gradients` as the one before did: a grown model keeps its watcher)."""
        self.model = model.to(self.device)
        self.model.train()
        ddp = ddp_wrapped(self.model, self.device, self.dist)
        self.optimization = Optimization(self.model, self.config, self.device)
        self.optimization.on_gradients = on_gradients
        self.optimizer = self.optimization.optimizer
        self.gradients = GradientAccumulator(self.model, ddp, self.device, self.dist, self.optimization)

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the one process that saves checkpoints."""
        return self.dist.is_main

    @property
    def model_config(self) -> BertConfig:
        """The model's BertConfig as it is now (a growing run's changes size once), as its server mirror keeps it
        (serve.training_mirrors.TrainerProxy.model_config)."""
        return self.model.config

    @property
    def history_limit(self) -> int:
        """Step events kept before they are thinned (TrainConfig.history_limit)."""
        return self.config.history_limit

    @property
    def data(self):
        """The training data (its position moves with the run)."""
        return self.batches.data

    @property
    def eval_data(self):
        """The held-out data (None: no evaluations)."""
        return self.evaluation.eval_data

    @property
    def baselines(self) -> dict:
        """The figures the evaluations are read beside: "unigram" (most frequent token) and "untrained" (step 0)."""
        return self.evaluation.baselines

    @baselines.setter
    def baselines(self, value: dict) -> None:
        self.evaluation.baselines = value

    # ------------------------------------------------------------------ the loop (run_loop.RunLoop.run and its hooks)

    def _run_context(self):
        return self.rng.installed(self.config.seed)

    def _before_loop(self) -> None:
        self.batches.start()
        if self.step == 0 and not self._evals:
            self.evaluation.prepare_baselines(self.data, self.config)
            self._evaluate()
            self._snapshot_probes()
        if self.checkpoint_dir is not None and self.last_checkpoint_step is None:
            # A checkpoint before the first update (of a new run, or of a resumed one saving elsewhere): should
            # the loss turn NaN before the first timed save, there is a good state to resume from.
            self._checkpoint()

    def change(self, name: str, value) -> TrainConfig:
        """Change a setting that may change while the run trains (TrainConfig.changes) from the next update on, from
        any thread; the change is kept in the config, so a save, a resume and the command that repeats the run
        have it. Returns the new config; BertCoreError (in words a page shows) when refused."""
        with self._step_lock:
            self.config = self.config.changed(self.step, name, value)
            return self.config

    def _rate_now(self) -> float:
        return self.config.at(self.step).learning_rate

    def _train_step(self) -> StepEvent | None:
        """One optimizer update over grad_accum micro-batches; returns None (and sets error) on a non-finite loss."""
        cfg = self.config.at(self.step)   # the settings changed while it trains, in effect from their step on
        self.grow_if_due()
        t0 = time.perf_counter()
        batches = self.batches.next_micro_batches(cfg, self._fraction_done())
        self.last_batches = batches   # *Step once* shows them (bert_core.inspect.training_step)
        stats = self.gradients.accumulate(batches, cfg)
        grad_norm = self.optimization.clip_gradients(self.model, cfg.max_grad_norm)
        loss = step_loss(stats, cfg.nsp)
        if self.optimization.overflowed(loss, grad_norm):
            # An fp16 overflow, not a divergence: the scaler skips this update and halves its scale; the next
            # batch is tried, and the step count does not move.
            self.optimization.skip()
            return self._train_step()
        if not self._update_is_finite(loss, grad_norm):
            return None
        lr = self._learning_rate()
        self.optimization.step(lr)
        self.step += 1
        tokens = int(stats.tokens)
        self.tokens_seen += tokens
        dt = time.perf_counter() - t0
        return step_event(self.step, self.tokens_seen, lr, stats, cfg.nsp, grad_norm,
                          tokens_per_s=tokens / dt if dt > 0 else 0.0, elapsed_s=self._elapsed_now())

    def _after_step(self) -> None:
        cfg = self.config
        if cfg.eval_every and self.step % cfg.eval_every == 0 and not self._done():
            self._evaluate()
        if cfg.probe_every and self.step % cfg.probe_every == 0:
            self._snapshot_probes()
        if (
            self.checkpoint_dir is not None
            and cfg.checkpoint_every_s
            and time.monotonic() - self._last_checkpoint >= cfg.checkpoint_every_s
        ):
            self._checkpoint()

    def _after_loop(self, final: str) -> None:
        if final == "finished":
            if not self._evals or self._evals[-1].step != self.step:
                self._evaluate()
            if self.probes is not None and self.config.probe_every and self.step % self.config.probe_every:
                self._snapshot_probes()
        if self.checkpoint_dir is not None and self.error is None:
            self._checkpoint()

    def _after_divergence(self) -> str:
        kept = (f" ({self.checkpoint_dir}, step {self.last_checkpoint_step})"
                if self.checkpoint_dir is not None and self.last_checkpoint_step is not None else "")
        return f"lower it and resume from the last checkpoint{kept}."

    # ------------------------------------------------------------------ phases, evaluation, probes

    def heldout_batches(self) -> list:
        """The fixed held-out batches (same masks at every evaluation), built once on first use."""
        return self.evaluation.batches(self.config)

    def _evaluate(self):
        event = self.evaluation.evaluate(self.model, self.step, self.device, self.config)
        if event is None:
            return
        self.model.train()
        self._publish(event)

    def _snapshot_probes(self):
        if self.probes is None or not self.is_main:
            return
        snap = self.probes.snapshot(self.model, self.tokenizer, self.step)
        self.model.train()
        for callback in self.callbacks:
            callback(snap)


def extended_config(trainer, more_steps: int):
    """The config that lets a finished run (a Trainer or its mirror) go on: `more_steps` more steps, or a minute
    more of a spent time budget; None when the run is not at its end."""
    cfg = trainer.config
    if cfg.max_steps is not None and trainer.step >= cfg.max_steps:
        return cfg.replace(max_steps=trainer.step + int(more_steps))
    if cfg.max_steps is None and cfg.time_budget_s is not None and trainer.progress.fraction >= 1:
        return cfg.replace(time_budget_s=cfg.time_budget_s + 60.0)
    return None

"""The optimizer side of a pretraining run: BERT's AdamW, the learning-rate schedule, gradient clipping and the fp16
loss scaler. What turns the summed gradients of a step into one update, or into a skipped one."""

from __future__ import annotations

import math

import torch

from bert_core.model.bert import adamw
from bert_core.training.train_config import WSD_DECAY_FRACTION, TrainConfig

# Consecutive fp16 updates the loss scaler may skip (an overflow halves its scale) before the run counts as diverged.
MAX_SKIPPED_UPDATES = 20


def lr_multiplier(config: TrainConfig, step: int, elapsed_s: float = 0.0) -> float:
    """Fraction of the peak learning rate for the update that follows `step` completed updates.

    Step-based schedules use update number step+1 for warmup (so the first update is not wasted at lr 0) and
    never reach exactly zero; time-based progress reaches zero when elapsed_s equals the budget.
    """
    if config.schedule == "constant":
        return 1.0
    if config.schedule == "time" or config.max_steps is None:
        return stage_multiplier(config, min(max(elapsed_s / config.time_budget_s, 0.0), 1.0), floor=1e-3)
    total = config.max_steps
    warm_steps = int(round(config.warmup_ratio * total))
    if step < warm_steps:
        return (step + 1) / warm_steps
    return _decay(config, (step - warm_steps) / max(total - warm_steps, 1))


def _decay(config: TrainConfig, q: float) -> float:
    """The schedule's multiplier at fraction `q` of the part of a run after its warmup."""
    q = min(max(q, 0.0), 1.0)
    if config.schedule == "wsd":
        stable = 1.0 - WSD_DECAY_FRACTION / max(1.0 - config.warmup_ratio, 1e-9)  # of the post-warmup part
        return 1.0 if q <= stable else max(1.0 - (q - stable) / max(1.0 - stable, 1e-9), 0.0)
    if config.schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * q))
    return 1.0 - q


def stage_multiplier(config: TrainConfig, p: float, floor: float = 0.01) -> float:
    """The schedule's multiplier at fraction `p` of a run counted by time, or of one stage of a run that grows
    (TrainConfig.grow_fraction): each stage, the small model's and the grown one's, warms up and decays as a whole
    run would (the grown model starts with a new optimizer, whose first updates need the warmup again)."""
    if config.schedule == "constant":
        return 1.0
    warm = config.warmup_ratio
    if warm > 0 and p < warm:
        return max(p / warm, floor)  # a floor: at p == 0 the first update would otherwise do nothing
    return _decay(config, (p - warm) / (1.0 - warm))


class Optimization:
    """A model's optimizer and, on a GPU in fp16, its loss scaler; the config's schedule is applied at each step."""

    def __init__(self, model: torch.nn.Module, config: TrainConfig, device: torch.device):
        self.optimizer = adamw(model, config.learning_rate, config.weight_decay,
                               betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_eps)
        # float16's range is narrow: its gradients are scaled up for the backward pass and back down before the
        # update, and an update whose gradients overflowed is skipped (the scale then halves). Not checkpointed:
        # a resumed fp16 run starts again from the default scale, which it finds within a few steps.
        self.scaler = (torch.amp.GradScaler("cuda") if device.type == "cuda" and config.precision == "fp16"
                       else None)
        self.skipped_updates = 0  # in a row, since the last update that was made
        # Called with the model before the gradients are clipped (after fp16's unscaling), when set: *Step once*
        # reads each layer's gradient here (bert_core.inspect.training_step), the only moment the raw ones exist.
        self.on_gradients = None

    def backward(self, loss: torch.Tensor) -> None:
        """Add the gradients of `loss` (scaled up first under fp16)."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def clip_gradients(self, model: torch.nn.Module, max_grad_norm: float) -> float:
        """Clip the gradients to `max_grad_norm` (0: no clipping) and return their norm before clipping."""
        params = [p for p in model.parameters() if p.grad is not None]
        max_norm = max_grad_norm if max_grad_norm > 0 else float("inf")
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.on_gradients is not None:
            self.on_gradients(model)
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))

    def overflowed(self, loss: float, grad_norm: float) -> bool:
        """Whether this update is an fp16 overflow to skip (a finite loss, a gradient that is not), rather than a
        divergence; after MAX_SKIPPED_UPDATES skips in a row it no longer is."""
        return (self.scaler is not None and math.isfinite(loss) and not math.isfinite(grad_norm)
                and self.skipped_updates < MAX_SKIPPED_UPDATES)

    def skip(self) -> None:
        """Drop this update's gradients; the scaler halves its scale."""
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.skipped_updates += 1

    def step(self, lr: float) -> None:
        """Update the weights at learning rate `lr` and clear the gradients for the next step."""
        self.skipped_updates = 0
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)  # layer-wise decay (param_groups); 1 without it
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

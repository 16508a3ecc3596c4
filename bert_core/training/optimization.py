"""One pretraining update: the forward and backward passes over its micro-batches (GradientAccumulator: every
micro-batch's loss taken as its share of the mean over the whole global batch, so that accumulation and data
parallelism add up to the gradient of one big batch), then BERT's AdamW, the learning-rate schedule, gradient clipping
and the fp16 loss scaler (Optimization: what turns the summed gradients into one update, or into a skipped one)."""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from bert_core.model.bert import IGNORE_INDEX, adamw
from bert_core.training.compiled_step import CompiledTraining
from bert_core.training.distributed import DistInfo, all_reduce, autocast_for
from bert_core.training.evaluation import MlmStats, batch_stats
from bert_core.training.train_config import WSD_DECAY_FRACTION, TrainConfig

# Consecutive fp16 updates the loss scaler may skip (an overflow halves its scale) before the run counts as diverged.
MAX_SKIPPED_UPDATES = 20


def lr_multiplier(config: TrainConfig, step: int, elapsed_s: float = 0.0) -> float:
    """Fraction of the peak learning rate for the update that follows `step` completed updates. Step-based schedules
    use update number step+1 for warmup (so the first update is not wasted at lr 0) and never reach exactly zero;
    time-based progress reaches zero when elapsed_s equals the budget."""
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


class GradientAccumulator:
    """Runs a model (through DDP under torchrun) over an update's micro-batches and accumulates their gradients."""

    def __init__(self, model: torch.nn.Module, ddp: DistributedDataParallel | None, device: torch.device,
                 dist_info: DistInfo, optimization: Optimization):
        self.model = model
        self.ddp = ddp
        self.device = device
        self.dist = dist_info
        self.optimization = optimization
        self.compiled = CompiledTraining(model)   # TrainConfig.compile: the encoder compiled for training steps

    def accumulate(self, batches: list, config: TrainConfig) -> MlmStats:
        """Forward and backward through every micro-batch; returns the update's figures summed over all ranks."""
        # The loss is a mean over every masked token (and every sequence) of the *global* batch, so that
        # accumulation and data parallelism give the same gradient as one big batch. DDP averages gradients
        # over ranks, hence the world_size factor.
        counts = torch.tensor(
            [float(sum(int((b.mlm_labels != IGNORE_INDEX).sum()) for b in batches)),
             float(sum(len(b.input_ids) for b in batches))],
            dtype=torch.float64,
        )
        counts = all_reduce(counts, self.dist, self.device)
        n_masked_global, n_seq_global = max(counts[0].item(), 1.0), max(counts[1].item(), 1.0)
        world = self.dist.world_size
        forward = self.ddp if self.ddp is not None else self.model
        # One vector of sums on the device (evaluation.MlmStats), read back once per step: no host sync per
        # micro-batch on a GPU.
        totals = torch.zeros(MlmStats.size(), dtype=torch.float64, device=self.device)
        for i, batch in enumerate(batches):
            batch = self.compiled.shaped(batch.to(self.device), config, config.compile)   # fixed shapes when compiled
            sync = self.ddp is None or i == len(batches) - 1
            ctx = contextlib.nullcontext() if sync else self.ddp.no_sync()
            with ctx:
                with autocast_for(self.device, config.precision), self.compiled.forward(config.compile, self.device):
                    out = forward(**batch.model_inputs(), full_mlm_logits=False)
                logits = out.mlm_logits.float()
                # The model's mean back to a sum over this micro-batch's masked tokens (sparse logits: no grad).
                mlm_sum = out.mlm_loss * int((batch.mlm_labels != IGNORE_INDEX).sum())
                nsp_logits = out.nsp_logits.float() if out.nsp_logits is not None else None  # None: a causal LM
                if config.nsp:
                    nsp_sum = F.cross_entropy(nsp_logits, batch.next_sentence_label, reduction="sum")
                    loss = (mlm_sum / n_masked_global + nsp_sum / n_seq_global) * world
                else:
                    nsp_sum = None
                    loss = mlm_sum / n_masked_global * world
                    if nsp_logits is not None:
                        # Touch the NSP head so DDP sees every parameter take part (its gradient is zero).
                        loss = loss + 0.0 * nsp_logits.sum()
                self.optimization.backward(loss)
            totals += batch_stats(logits, batch.mlm_labels, batch.decisions, mlm_sum, nsp_logits,
                                  batch.next_sentence_label if config.nsp else None, nsp_sum, batch.attention_mask)
        return MlmStats.from_tensor(all_reduce(totals, self.dist, self.device))

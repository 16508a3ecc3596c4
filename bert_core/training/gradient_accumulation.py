"""The forward and backward passes of one pretraining update: every micro-batch's loss taken as its share of the
mean over the whole global batch, so that accumulation and data parallelism add up to the gradient of one big batch,
and the step's masked-LM and NSP figures summed on the device and read back once."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from bert_core.model.bert import IGNORE_INDEX
from bert_core.training.compiled_step import CompiledTraining
from bert_core.training.distributed import DistInfo, all_reduce
from bert_core.training.precision import autocast_for
from bert_core.training.mlm_stats import MlmStats, batch_stats
from bert_core.training.optimization import Optimization
from bert_core.training.train_config import TrainConfig


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
        # One vector of sums on the device (mlm_stats.MlmStats), read back once per step: no host sync per
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

"""What a pretraining run reports to its watchers: a StepEvent per optimizer update and an EvalEvent per held-out
evaluation (made from their figures by evaluation.step_event and eval_event). They are the run's event stream
(run_loop.RunLoop keeps and hands them on) and the entries of trainer_state.json's "history" and "evals"; torch-free,
so that the server reads them without it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StepEvent:
    """What one optimizer update did, averaged over the global batch (all ranks, all accumulation steps)."""

    step: int
    tokens_seen: int
    lr: float
    loss: float
    mlm_loss: float
    nsp_loss: float | None
    mlm_acc: float | None
    mlm_acc_masked: float | None  # tokens replaced by [MASK]
    mlm_acc_random: float | None  # tokens replaced by a random token
    mlm_acc_kept: float | None  # tokens left unchanged but still predicted
    nsp_acc: float | None
    tokens_per_s: float
    grad_norm: float
    elapsed_s: float


@dataclass
class EvalEvent:
    """A held-out evaluation at a given step (step 0 is the untrained model)."""

    step: int
    mlm_loss: float
    mlm_acc: float
    perplexity: float
    nsp_acc: float | None


@dataclass
class GrowthEvent:
    """A run that started small (TrainConfig.grow_fraction) was grown to its full size before update `step` + 1."""

    step: int
    fraction: float              # of the run, when it grew
    from_size: tuple[int, int]   # (layers, hidden) before
    to_size: tuple[int, int]     # (layers, hidden) after
    model_config: dict           # the grown model's config.json (BertConfig.to_hf_dict)

"""What a pretraining run reports to its watchers: a StepEvent per optimizer update and an EvalEvent per held-out
evaluation, and how each is made from the figures of its step or evaluation. They are the run's event stream
(run_loop.RunLoop keeps and hands them on) and the entries of trainer_state.json's "history" and "evals"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: both load torch, and the server reads these events without it (TORCH_FREE)
    from bert_core.training.evaluation import EvalResult
    from bert_core.training.mlm_stats import MlmStats


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


def step_loss(stats: MlmStats, nsp: bool) -> float:
    """The loss an update minimised (MLM, plus NSP when the run has it): what the NaN guard and the event read."""
    nsp_loss = stats.nsp_loss if nsp else None
    return stats.mlm_loss + (nsp_loss or 0.0)


def step_event(step: int, tokens_seen: int, lr: float, stats: MlmStats, nsp: bool, grad_norm: float,
               tokens_per_s: float, elapsed_s: float) -> StepEvent:
    """The StepEvent of the update that made `step` from its summed figures (`stats`, over every rank)."""
    by_decision = stats.acc_by_decision()
    return StepEvent(
        step=step,
        tokens_seen=tokens_seen,
        lr=lr,
        loss=step_loss(stats, nsp),
        mlm_loss=stats.mlm_loss,
        nsp_loss=stats.nsp_loss if nsp else None,
        mlm_acc=stats.mlm_acc,
        mlm_acc_masked=by_decision["masked"],
        mlm_acc_random=by_decision["random"],
        mlm_acc_kept=by_decision["kept"],
        nsp_acc=stats.nsp_acc if nsp else None,
        tokens_per_s=tokens_per_s,
        grad_norm=grad_norm,
        elapsed_s=elapsed_s,
    )


def eval_event(step: int, result: EvalResult, nsp: bool) -> EvalEvent:
    """The EvalEvent of a held-out evaluation at `step` (no NSP figure for a run without NSP)."""
    return EvalEvent(
        step=step,
        mlm_loss=result.mlm_loss,
        mlm_acc=result.mlm_acc,
        perplexity=result.perplexity,
        nsp_acc=result.nsp_acc if nsp else None,
    )

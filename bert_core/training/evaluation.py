"""Held-out evaluation of a pretraining model: masked-token accuracy, MLM loss and perplexity, NSP accuracy; for a
causal (GPT-style) model the same figures over next-token predictions at every position (`objective` "clm").

Figures only mean something beside baselines, so this module also gives the unigram baseline (always predict
the training corpus's most frequent token; its perplexity is that of the unigram distribution) for the same
masked tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from bert_core.errors import BertCoreError
from bert_core.model.bert import is_causal
from bert_core.training.mlm_stats import MlmStats, batch_stats
from bert_core.training.precision import autocast_for


@dataclass
class EvalResult:
    """Held-out figures over every masked token (and every sequence) of the evaluation batches. With objective
    "clm" the token figures are next-token ones: mlm_acc is next-token accuracy, num_masked the predicted tokens."""

    mlm_loss: float
    mlm_acc: float
    perplexity: float
    nsp_acc: float | None
    num_masked: int
    num_sequences: int
    acc_by_decision: dict  # "masked" / "random" / "kept" -> accuracy (None when no such token)
    objective: str = "mlm"

    def to_dict(self) -> dict:
        return asdict(self)


def evaluate(model, batches, device=None, precision: str = "bf16") -> EvalResult:
    """Evaluate `model` (BertForPreTraining, or BertLMHeadModel on next-token batches) on fixed batches; restores
    the model's train/eval mode afterwards."""
    if not batches:
        raise BertCoreError("no evaluation batches: the held-out text is too short to build one")
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    device = torch.device(device)
    autocast = autocast_for(device, precision)
    totals = torch.zeros(MlmStats.size(), dtype=torch.float64, device=device)
    has_nsp = True
    try:
        for batch in batches:
            batch = batch.to(device)
            with autocast:
                out = model(**batch.model_inputs(), full_mlm_logits=False)
            logits = out.mlm_logits.float()
            # The model has taken the mean cross-entropy over the labelled rows: scaled back to a sum, not computed
            # again (over a next-token model's every position, a second pass cost a sixth of the evaluation).
            loss_sum = out.mlm_loss.double() * logits.shape[0]
            has_nsp = has_nsp and batch.next_sentence_label is not None and out.nsp_logits is not None
            totals += batch_stats(logits, batch.mlm_labels, batch.decisions, loss_sum, out.nsp_logits,
                                  batch.next_sentence_label, None, batch.attention_mask)
    finally:
        model.train(was_training)
    stats = MlmStats.from_tensor(totals)
    if stats.masked == 0:
        raise BertCoreError("the evaluation batches hold no masked tokens; use more text or a higher mask rate")
    return EvalResult(
        mlm_loss=stats.mlm_loss,
        mlm_acc=stats.mlm_acc,
        perplexity=stats.perplexity,
        nsp_acc=stats.nsp_acc if has_nsp else None,
        num_masked=int(stats.masked),
        num_sequences=int(stats.sequences),
        acc_by_decision=stats.acc_by_decision(),
        objective="clm" if is_causal(model) else "mlm",
    )


def unigram_baseline_for(data, batches) -> dict:
    """{"unigram": accuracy/perplexity of the most-frequent-token guess on `batches`}, counts from training `data`."""
    return {"unigram": dict(data.unigram_baseline(batches))}

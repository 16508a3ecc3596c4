"""Held-out evaluation of a pretraining model: masked-token accuracy, MLM loss and perplexity, NSP accuracy.

Figures only mean something beside baselines, so this module also gives the unigram baseline (always predict
the training corpus's most frequent token; its perplexity is that of the unigram distribution) for the same
masked tokens.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from bert_core.errors import BertCoreError


@dataclass
class EvalResult:
    """Held-out figures over every masked token (and every sequence) of the evaluation batches."""

    mlm_loss: float
    mlm_acc: float
    perplexity: float
    nsp_acc: float | None
    num_masked: int
    num_sequences: int
    acc_by_decision: dict  # "masked" / "random" / "kept" -> accuracy (None when no such token)

    def to_dict(self) -> dict:
        return asdict(self)


@torch.no_grad()
def evaluate(model, batches, device=None, bf16: bool = True) -> EvalResult:
    """Evaluate `model` (BertForPreTraining) on fixed batches; restores the model's train/eval mode afterwards."""
    if not batches:
        raise BertCoreError("no evaluation batches: the held-out text is too short to build one")
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    device = torch.device(device)
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" and bf16 else contextlib.nullcontext()
    )
    loss_sum = 0.0
    masked = correct = nsp_correct = sequences = 0
    by_decision = {1: [0, 0], 2: [0, 0], 3: [0, 0]}
    has_nsp = True
    try:
        for batch in batches:
            batch = batch.to(device)
            with autocast:
                out = model(
                    input_ids=batch.input_ids,
                    attention_mask=batch.attention_mask,
                    token_type_ids=batch.token_type_ids,
                    labels=batch.mlm_labels,
                    full_mlm_logits=False,
                )
            positions = batch.mlm_labels != -100
            targets = batch.mlm_labels[positions]
            logits = out.mlm_logits.float()
            loss_sum += F.cross_entropy(logits, targets, reduction="sum").item()
            right = logits.argmax(-1) == targets
            masked += targets.numel()
            correct += int(right.sum())
            decisions = batch.decisions[positions]
            for code, tally in by_decision.items():
                sel = decisions == code
                tally[0] += int(sel.sum())
                tally[1] += int((right & sel).sum())
            labels = batch.next_sentence_label
            if labels is None:
                has_nsp = False
            else:
                nsp_correct += int((out.nsp_logits.argmax(-1) == labels.reshape(-1)).sum())
            sequences += len(batch.input_ids)
    finally:
        model.train(was_training)
    if masked == 0:
        raise BertCoreError("the evaluation batches hold no masked tokens; use more text or a higher mask rate")
    mlm_loss = loss_sum / masked
    names = {1: "masked", 2: "random", 3: "kept"}
    return EvalResult(
        mlm_loss=mlm_loss,
        mlm_acc=correct / masked,
        perplexity=math.exp(min(mlm_loss, 700.0)),
        nsp_acc=nsp_correct / sequences if has_nsp and sequences else None,
        num_masked=masked,
        num_sequences=sequences,
        acc_by_decision={names[c]: (t[1] / t[0] if t[0] else None) for c, t in by_decision.items()},
    )


def unigram_baseline_for(data, batches) -> dict:
    """{"unigram": accuracy/perplexity of the most-frequent-token guess on `batches`}, counts from training `data`."""
    return {"unigram": dict(data.unigram_baseline(batches))}

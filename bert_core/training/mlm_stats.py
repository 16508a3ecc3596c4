"""Masked-LM and NSP figures of some batches, with names: summed per batch on the device by one function, for a
training step and for a held-out evaluation alike, and read back once."""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, fields

import torch

from bert_core.data.pretraining_data import DECISION_KEYS, KEPT, MASKED, RANDOM
from bert_core.model.bert import IGNORE_INDEX


@dataclass
class MlmStats:
    """Sums over the masked tokens and the sequences of some batches."""

    mlm_loss_sum: float = 0.0
    masked: float = 0.0            # tokens chosen for prediction (labels != IGNORE_INDEX)
    correct: float = 0.0
    masked_n: float = 0.0          # chosen and replaced by [MASK]
    masked_correct: float = 0.0
    random_n: float = 0.0          # chosen and replaced by a random token
    random_correct: float = 0.0
    kept_n: float = 0.0            # chosen and left as they were
    kept_correct: float = 0.0
    nsp_loss_sum: float = 0.0
    nsp_correct: float = 0.0
    sequences: float = 0.0
    tokens: float = 0.0            # attended (non-padding) tokens

    @classmethod
    def from_tensor(cls, values: torch.Tensor) -> "MlmStats":
        """Read back the vector that `batch_stats` sums (one host sync for a whole step or evaluation)."""
        return cls(*values.detach().to("cpu", torch.float64).tolist())

    @staticmethod
    def size() -> int:
        return len(fields(MlmStats))

    def to_tensor(self, device=None) -> torch.Tensor:
        return torch.tensor(astuple(self), dtype=torch.float64, device=device)

    @property
    def mlm_loss(self) -> float:
        return self.mlm_loss_sum / max(self.masked, 1.0)

    @property
    def mlm_acc(self) -> float | None:
        return _ratio(self.correct, self.masked)

    @property
    def perplexity(self) -> float:
        return math.exp(min(self.mlm_loss, 700.0))

    @property
    def nsp_loss(self) -> float:
        return self.nsp_loss_sum / max(self.sequences, 1.0)

    @property
    def nsp_acc(self) -> float | None:
        return _ratio(self.nsp_correct, self.sequences)

    def acc_by_decision(self) -> dict[str, float | None]:
        """Accuracy on the tokens of each masking decision: {"masked": ..., "random": ..., "kept": ...}."""
        return {DECISION_KEYS[MASKED]: _ratio(self.masked_correct, self.masked_n),
                DECISION_KEYS[RANDOM]: _ratio(self.random_correct, self.random_n),
                DECISION_KEYS[KEPT]: _ratio(self.kept_correct, self.kept_n)}


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def batch_stats(mlm_logits: torch.Tensor, labels: torch.Tensor, decisions: torch.Tensor, mlm_loss_sum: torch.Tensor,
                nsp_logits: torch.Tensor | None = None, nsp_labels: torch.Tensor | None = None,
                nsp_loss_sum: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """One batch's MlmStats as a float64 vector on the logits' device (add them up, then `MlmStats.from_tensor`).

    `mlm_logits` are the sparse logits, one row per predicted position of `labels` (row-major, labels !=
    IGNORE_INDEX); `decisions` are the masking decisions of every position (pretraining_data's MASKED, RANDOM,
    KEPT). Without NSP labels the NSP sums are zero.
    """
    with torch.no_grad():
        positions = labels != IGNORE_INDEX
        targets = labels[positions]
        right = mlm_logits.argmax(-1) == targets
        chosen = decisions[positions]
        zero = torch.zeros((), dtype=torch.float64, device=mlm_logits.device)
        parts = [mlm_loss_sum.detach(), zero + targets.numel(), right.sum()]
        for code in (MASKED, RANDOM, KEPT):
            sel = chosen == code
            parts += [sel.sum(), (right & sel).sum()]
        has_nsp = nsp_logits is not None and nsp_labels is not None
        parts.append(nsp_loss_sum.detach() if has_nsp and nsp_loss_sum is not None else zero)
        parts.append((nsp_logits.argmax(-1) == nsp_labels.reshape(-1)).sum() if has_nsp else zero)
        parts.append(zero + len(labels))
        parts.append(attention_mask.sum() if attention_mask is not None else zero)
        return torch.stack([x.to(torch.float64) for x in parts])

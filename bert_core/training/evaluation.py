"""Held-out evaluation of a pretraining model: masked-token accuracy, MLM loss and perplexity, NSP accuracy; for a
causal (GPT-style) model the same figures over next-token predictions at every position (`objective` "clm").

Figures only mean something beside baselines, so this module also gives the unigram baseline (always predict
the training corpus's most frequent token; its perplexity is that of the unigram distribution) for the same
masked tokens. Also here: the step's and evaluation's sums (MlmStats, batch_stats: summed on the device, read back
once) and the events made of them (step_event, eval_event), a run's HeldoutEvaluation (fixed batches, baselines, an
EvalEvent each time) and `eval`'s figures for a checkpoint on a text file (heldout.evaluate_text_file's work).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from bert_core.data.corpora import corpus_from_file
from bert_core.data.objectives import objective_settings
from bert_core.data.pretraining_data import DECISION_KEYS, KEPT, MASKED, RANDOM, PretrainingData, unigram_baseline
from bert_core.errors import BertCoreError
from bert_core.model.bert import IGNORE_INDEX, is_causal
from bert_core.model.checkpoint import load_checkpoint
from bert_core.training.distributed import autocast_for, resolve_device
from bert_core.training.pretraining_events import EvalEvent, StepEvent
from bert_core.training.train_config import TrainConfig


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
    `mlm_logits`: the sparse logits, one row per predicted position of `labels` (row-major); `decisions`: every
    position's masking decision (pretraining_data's MASKED, RANDOM, KEPT). Without NSP labels the NSP sums are zero."""
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


def step_loss(stats: MlmStats, nsp: bool) -> float:
    """The loss an update minimised (MLM, plus NSP when the run has it): what the NaN guard and the event read."""
    return stats.mlm_loss + (stats.nsp_loss if nsp else 0.0)


def step_event(step: int, tokens_seen: int, lr: float, stats: MlmStats, nsp: bool, grad_norm: float,
               tokens_per_s: float, elapsed_s: float) -> StepEvent:
    """The StepEvent of the update that made `step` from its summed figures (`stats`, over every rank)."""
    by_decision = stats.acc_by_decision()
    return StepEvent(step=step, tokens_seen=tokens_seen, lr=lr, loss=step_loss(stats, nsp), mlm_loss=stats.mlm_loss,
                     nsp_loss=stats.nsp_loss if nsp else None, mlm_acc=stats.mlm_acc,
                     mlm_acc_masked=by_decision["masked"], mlm_acc_random=by_decision["random"],
                     mlm_acc_kept=by_decision["kept"], nsp_acc=stats.nsp_acc if nsp else None,
                     tokens_per_s=tokens_per_s, grad_norm=grad_norm, elapsed_s=elapsed_s)


def eval_event(step: int, result: EvalResult, nsp: bool) -> EvalEvent:
    """The EvalEvent of a held-out evaluation at `step` (no NSP figure for a run without NSP)."""
    return EvalEvent(step=step, mlm_loss=result.mlm_loss, mlm_acc=result.mlm_acc, perplexity=result.perplexity,
                     nsp_acc=result.nsp_acc if nsp else None)


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
    """Evaluate `model` (BertForPreTraining, or BertLMHeadModel on next-token batches) on fixed batches."""
    if not batches:
        raise BertCoreError("no evaluation batches: the held-out text is too short to build one")
    was_training = model.training
    model.eval()
    device = torch.device(device or next(model.parameters()).device)
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
    return EvalResult(mlm_loss=stats.mlm_loss, mlm_acc=stats.mlm_acc, perplexity=stats.perplexity,
                      nsp_acc=stats.nsp_acc if has_nsp else None, num_masked=int(stats.masked),
                      num_sequences=int(stats.sequences), acc_by_decision=stats.acc_by_decision(),
                      objective="clm" if is_causal(model) else "mlm")


def unigram_baseline_for(data, batches) -> dict:
    """{"unigram": accuracy/perplexity of the most-frequent-token guess on `batches`}, counts from training `data`."""
    return {"unigram": dict(data.unigram_baseline(batches))}


class HeldoutEvaluation:
    """Evaluates a run's model on its held-out data (a data set, a list of batches, or None for no evaluations) and
    keeps the baselines that trainer_state.json and metrics.json report."""

    def __init__(self, eval_data):
        self.eval_data = eval_data
        self.baselines: dict = {}
        self._batches = None

    def batches(self, config: TrainConfig) -> list:
        """The fixed held-out batches (same masks at every evaluation), built once on first use."""
        if self._batches is None:
            if self.eval_data is None:
                self._batches = []
            elif isinstance(self.eval_data, (list, tuple)):
                self._batches = list(self.eval_data)
            else:
                self._batches = self.eval_data.eval_batches(config.eval_batches, seed=config.seed)
        return self._batches

    def prepare_baselines(self, data, config: TrainConfig) -> None:
        """The unigram baseline on the held-out batches, counted from the training `data` (once per run)."""
        batches = self.batches(config)
        if batches and not self.baselines:
            self.baselines = unigram_baseline_for(data, batches)

    def evaluate(self, model: torch.nn.Module, step: int, device: torch.device,
                 config: TrainConfig) -> EvalEvent | None:
        """The model's held-out figures at `step` (None without held-out data); at step 0 they are also the
        untrained baseline."""
        batches = self.batches(config)
        if not batches:
            return None
        result = evaluate(model, batches, device=device, precision=config.precision)
        event = eval_event(step, result, config.nsp)
        if step == 0 and "untrained" not in self.baselines:
            self.baselines["untrained"] = asdict(event)
        return event


def _field(state, section: str, key: str):
    """state[section][key] when both levels are objects, else None."""
    part = state.get(section) if isinstance(state, dict) else None
    return part.get(key) if isinstance(part, dict) else None


def evaluate_checkpoint_on_text(checkpoint, text_file, seed: int, batches: int, batch_size: int, seq_len: int | None,
                                mask_rate: float, device: str) -> dict:
    """heldout.evaluate_text_file's work, here beside the rest of the held-out evaluation: it loads torch, and
    heldout.py is imported by the server without it."""
    if Path(text_file).is_dir():
        raise BertCoreError(f"--text-file {text_file} is a folder; give a plain text file")
    if not Path(text_file).is_file():
        raise BertCoreError(f"text file {text_file} does not exist")
    dev = resolve_device(device)
    ckpt = load_checkpoint(checkpoint, require_tokenizer=True)
    state = ckpt.trainer_state or {}
    # Read defensively: a Hugging Face Trainer's trainer_state.json has other keys, and eval needs only these two.
    saved_len = _field(state, "train_config", "max_seq_length")
    if seq_len is None:
        seq_len = saved_len if isinstance(saved_len, int) and not isinstance(saved_len, bool) else 128
    seq_len = max(16, min(seq_len, ckpt.model.config.max_position_embeddings, ckpt.tokenizer.model_max_length))
    # The same reader as `train`'s corpora: size-checked, UTF-8-checked, and very long lines cut into pieces.
    corpus = corpus_from_file(text_file)
    causal = is_causal(ckpt.model)  # a next-token model is scored on plain text: every position, nothing masked
    data = PretrainingData(corpus, ckpt.tokenizer, max_seq_length=seq_len, batch_size=batch_size,
                           mask_rate=mask_rate, seed=seed, **objective_settings("clm" if causal else "mlm"))
    eval_batches = data.eval_batches(batches, seed=seed)
    # On a CPU in fp32 even where bf16 autocast would be faster (training.distributed): the figures a checkpoint's
    # metrics.json quotes were computed so there, and `eval` reproduces them.
    result = evaluate(ckpt.model.to(dev), eval_batches, device=dev, precision="bf16" if dev.type == "cuda" else "fp32")
    counts_list = _field(state, "metadata", "unigram_counts")
    never = ckpt.tokenizer.special_ids - {ckpt.tokenizer.unk_id}
    if isinstance(counts_list, list) and len(counts_list) == ckpt.tokenizer.vocab_size \
            and all(isinstance(c, int) and c >= 0 for c in counts_list):
        counts, source = torch.tensor(counts_list), "the checkpoint's training text"
    else:
        counts, source = data.token_counts, "the evaluated text itself (the checkpoint records no training counts)"
    baseline = dict(unigram_baseline(counts, eval_batches, never_ids=never))
    if causal:
        figures = {"objective": "clm", "next_token_accuracy": result.mlm_acc, "next_token_loss": result.mlm_loss,
                   "perplexity": result.perplexity, "predicted_tokens": result.num_masked}
    else:
        figures = {"objective": "mlm", "masked_token_accuracy": result.mlm_acc, "mlm_loss": result.mlm_loss,
                   "perplexity": result.perplexity, "nsp_accuracy": result.nsp_acc,
                   "accuracy_by_decision": result.acc_by_decision, "masked_tokens": result.num_masked}
    return {"checkpoint": str(checkpoint), "text_file": str(text_file), "seed": seed, **figures,
            "sequences": result.num_sequences, "unigram_baseline": {**baseline, "counts_from": source}}

"""Kinds of fine-tuning: what a kind brings to the one fine-tuning loop (finetune.Finetuner), and the kind there is.

A kind is a small object holding its data, its head (the model class it trains), the collation of its batches, its
loss and its metrics. The loop asks it for batches, for the loss of a training batch and for the figures of a
validation pass, and knows nothing else about it. `SentenceLabels` is the one kind today: a label per sentence (or
sentence pair) for BertForSequenceClassification. Token tags (BertForTokenClassification) and answer spans
(BertForQuestionAnswering) are further FinetuneTasks, run by the same loop.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

from bert_core.data.classification_data import ClassificationData, encode_examples, eval_batches, train_batches
from bert_core.errors import BertCoreError
from bert_core.model.bert import BertForSequenceClassification

__all__ = ["FinetuneTask", "StepLoss", "Evaluation", "Misclassified", "SentenceLabels", "label_metrics",
           "confusion_matrix", "macro_f1"]


@dataclass
class Misclassified:
    """A validation example the classifier got wrong, with how sure it was."""

    text: str
    true_label: str
    predicted_label: str
    confidence: float


@dataclass
class StepLoss:
    """A training batch through the model: the loss to backpropagate, the batch's score for the step's event (a 0-d
    tensor, read only after the update so the step does not wait on it) and how many examples the batch holds."""

    loss: torch.Tensor
    score: torch.Tensor
    examples: int


@dataclass
class Evaluation:
    """A validation pass: the kind's two headline figures (drawn as the curve) and its loss, then the final result's
    details (a kind without labels leaves them empty)."""

    accuracy: float
    macro_f1: float
    loss: float
    confusion: list[list[int]] = field(default_factory=list)  # rows: true label, columns: predicted label
    label_names: list[str] = field(default_factory=list)
    misclassified: list[Misclassified] = field(default_factory=list)


class FinetuneTask(abc.ABC):
    """One kind of fine-tuning with its training and validation data: everything the loop (finetune.Finetuner) asks
    of a kind. Batches are anything with `.to(device)`; the loop moves them and passes them back unopened."""

    head: type = torch.nn.Module  # the model class this kind fine-tunes (sentence labels: what classifier_from_* build)

    @abc.abstractmethod
    def check(self, model) -> None:
        """Raise BertCoreError when `model`'s head does not fit this data (called before anything runs)."""

    @abc.abstractmethod
    def prepare(self, tokenizer, max_length: int) -> None:
        """Encode the training and validation examples with the model's tokenizer, once, before the first step."""

    @abc.abstractmethod
    def train_batches(self, batch_size: int, seed: int) -> Iterator:
        """Endless seeded training batches (the same seed gives the same batches)."""

    @abc.abstractmethod
    def eval_batches(self, batch_size: int) -> Iterable:
        """One pass over the validation examples."""

    @abc.abstractmethod
    def step_loss(self, model, batch) -> StepLoss:
        """`batch` (on the model's device) through `model` in training mode: the loss and score of one step."""

    @abc.abstractmethod
    def predict(self, model, batch):
        """One validation batch's predictions, in whatever form `metrics` reads (called without gradients)."""

    @abc.abstractmethod
    def metrics(self, predictions: list, num_misclassified: int) -> Evaluation:
        """The figures of a validation pass from its `predict` outputs, keeping up to `num_misclassified` mistakes."""

    @torch.no_grad()
    def evaluate(self, model, device, batch_size: int, num_misclassified: int = 0) -> Evaluation:
        """`metrics` over one pass of `predict` in eval mode; the model's train/eval mode is put back after."""
        was_training = model.training
        model.eval()
        predictions = [self.predict(model, batch.to(device)) for batch in self.eval_batches(batch_size)]
        model.train(was_training)
        return self.metrics(predictions, num_misclassified)


# ---------------------------------------------------------------------------------------------- sentence labels


class SentenceLabels(FinetuneTask):
    """A label per sentence (or sentence pair): BertForSequenceClassification's [CLS] (or last-token) head trained
    with cross-entropy, scored by accuracy, macro-F1, the confusion matrix and the most confident mistakes."""

    head = BertForSequenceClassification

    def __init__(self, train: ClassificationData, val: ClassificationData):
        if train.label_names != val.label_names:
            raise BertCoreError("train and validation sets have different label names; split one dataset")
        self.train_data, self.val_data = train, val
        self._pad_id = 0
        self._train_encoded: list[dict] | None = None
        self._val_encoded: list[dict] | None = None

    def check(self, model) -> None:
        """Refuse a classifier whose output count is not the data's label count."""
        if model.num_labels != self.train_data.num_labels:
            raise BertCoreError(f"the classifier has {model.num_labels} outputs but the data has "
                                f"{self.train_data.num_labels} labels")

    def prepare(self, tokenizer, max_length: int) -> None:
        """Tokenize both sets to `[CLS] a [SEP] (b [SEP])` (one set given as both is encoded once)."""
        self._pad_id = tokenizer.pad_id
        self._train_encoded = encode_examples(self.train_data, tokenizer, max_length)
        same = self.val_data is self.train_data
        self._val_encoded = self._train_encoded if same else encode_examples(self.val_data, tokenizer, max_length)

    def train_batches(self, batch_size: int, seed: int) -> Iterator:
        """classification_data.train_batches: seeded epochs, length-grouped, padded per batch."""
        return train_batches(self._train_encoded, self.train_data.labels, batch_size, seed, self._pad_id)

    def eval_batches(self, batch_size: int) -> Iterable:
        """classification_data.eval_batches over the validation set."""
        return eval_batches(self._val_encoded, self.val_data.labels, batch_size, self._pad_id)

    def step_loss(self, model, batch) -> StepLoss:
        """The classifier's cross-entropy over the batch's labels; the score is the batch's accuracy."""
        out = model(batch.input_ids, batch.attention_mask, batch.token_type_ids, labels=batch.labels)
        accuracy = (out.logits.argmax(-1) == batch.labels).float().mean()
        return StepLoss(out.loss, accuracy, len(batch.labels))

    def predict(self, model, batch) -> tuple[list[int], list[int], torch.Tensor, float]:
        """(dataset rows, true labels, class probabilities on the CPU, summed cross-entropy) of one batch."""
        logits = model(batch.input_ids, batch.attention_mask, batch.token_type_ids).logits.float()
        loss = torch.nn.functional.cross_entropy(logits, batch.labels, reduction="sum").item()
        return batch.indices.tolist(), batch.labels.tolist(), logits.softmax(-1).cpu(), loss

    def metrics(self, predictions: list, num_misclassified: int) -> Evaluation:
        """Accuracy, macro-F1, mean loss, confusion and the most confident mistakes over the validation set."""
        rows, truth, probs, loss_sum = [], [], [], 0.0
        for batch_rows, batch_truth, batch_probs, batch_loss in predictions:
            rows.extend(batch_rows)
            truth.extend(batch_truth)
            probs.append(batch_probs)
            loss_sum += batch_loss
        p = torch.cat(probs) if probs else torch.zeros(0, self.val_data.num_labels)
        return label_metrics(self.val_data, rows, truth, p.argmax(-1).tolist(), lambda i, y: float(p[i, y]),
                             loss_sum / max(len(truth), 1), num_misclassified)


# ---------------------------------------------------------------------------------------------- label metrics


def label_metrics(data: ClassificationData, rows: Sequence[int], truth: Sequence[int], predicted: Sequence[int],
                  confidence: Callable[[int, int], float], loss: float, num_misclassified: int) -> Evaluation:
    """The Evaluation of label predictions on `data` (`rows` index it; `confidence(i, label)` is the i-th prediction's
    probability of `label`), shared by a fine-tuned classifier and the bag-of-words baseline."""
    confusion = confusion_matrix(truth, predicted, data.num_labels)
    wrong = []
    if num_misclassified:  # the validation passes that draw the curve need no mistakes
        wrong = [Misclassified(data.example_text(r), data.label_names[t], data.label_names[p], confidence(i, p))
                 for i, (r, t, p) in enumerate(zip(rows, truth, predicted)) if t != p]
        wrong.sort(key=lambda m: -m.confidence)
    accuracy = sum(t == p for t, p in zip(truth, predicted)) / max(len(truth), 1)
    return Evaluation(accuracy, macro_f1(confusion), loss, confusion, list(data.label_names),
                      wrong[:num_misclassified])


def confusion_matrix(truth: Sequence[int], predicted: Sequence[int], num_labels: int) -> list[list[int]]:
    """K x K counts, rows = true label, columns = predicted label."""
    m = [[0] * num_labels for _ in range(num_labels)]
    for t, p in zip(truth, predicted):
        m[t][p] += 1
    return m


def macro_f1(confusion: list[list[int]]) -> float:
    """Unweighted mean over classes of F1 (a class never predicted nor present scores 0, as sklearn does)."""
    k = len(confusion)
    scores = []
    for c in range(k):
        tp = confusion[c][c]
        predicted = sum(confusion[r][c] for r in range(k))
        actual = sum(confusion[c])
        scores.append(2 * tp / (predicted + actual) if predicted + actual else 0.0)
    return sum(scores) / k

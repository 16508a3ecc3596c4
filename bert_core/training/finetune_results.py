"""What fine-tuning reports: the records of a run (each step, each validation pass, the final result) and the
figures of label predictions.

Every kind reports two headline figures in the fields `accuracy` and `macro_f1`, named for the kind by its
`metric_names`, so that curves, tables and the race treat every kind alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from bert_core.data.classification_data import ClassificationData

LABEL_METRICS = ("accuracy", "macro-F1")  # the names of a sentence-label run's two figures


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
    details: dict = field(default_factory=dict)  # a kind's further figures (per-type F1, baselines...), JSON-able


@dataclass
class FinetuneStep:
    """One optimizer update."""

    step: int
    examples_seen: int
    lr: float
    loss: float
    train_acc: float
    grad_norm: float
    elapsed_s: float  # training seconds so far (validation time excluded)


@dataclass
class FinetuneEval:
    """A pass over the validation set (step 0 = the fresh head, before any update)."""

    step: int
    elapsed_s: float
    accuracy: float
    macro_f1: float
    loss: float


@dataclass
class FinetuneStage:
    """A stage of a curriculum begins (finetune_tasks.FinetuneTask.drills, then the task's own data): handed to the
    run's callbacks, and kept in Finetuner.stages and FinetuneResult.stages."""

    step: int        # the updates made before it
    elapsed_s: float
    index: int
    count: int       # stages in all
    name: str
    # How well the stage before this one was learnt: its last (up to finetune.MASTERY_STEPS) training steps' mean
    # score (answer spans: the share of windows with both ends right); None for the first stage.
    previous_score: float | None = None


@dataclass
class FinetuneResult:
    """Final validation metrics, curves and the trained model of one run."""

    name: str
    accuracy: float
    macro_f1: float
    loss: float
    confusion: list[list[int]]  # rows: true label, columns: predicted label
    label_names: list[str]
    evals: list[FinetuneEval]
    history: list[FinetuneStep]
    misclassified: list[Misclassified]
    steps: int
    train_seconds: float
    state: str
    model: torch.nn.Module | None = field(default=None, repr=False)
    tokenizer: object | None = field(default=None, repr=False)
    kind: str = "labels"  # the task kind: "labels", "tags" or "spans" (finetune_tasks.FinetuneTask.kind)
    metric_names: tuple[str, str] = LABEL_METRICS  # what `accuracy` and `macro_f1` measure for this kind
    details: dict = field(default_factory=dict)  # the kind's further figures (Evaluation.details)
    best_step: int | None = None  # with keep_best: the step whose weights were kept (None: the last step's)
    stages: list[FinetuneStage] = field(default_factory=list)  # a curriculum's stages as they began (else one)
    # The step budget it was given (None: a time budget, or a baseline). A finished run with fewer steps than this
    # was cut short by its time cap: a slow or busy machine, and a figure of fewer steps than asked for.
    steps_asked: int | None = None

    @property
    def cut_short(self) -> bool:
        """True when its time cap ended it before the steps it was given were done."""
        return self.steps_asked is not None and self.steps < self.steps_asked and self.state == "finished"

    def to_dict(self, with_history: bool = False) -> dict:
        """JSON-able summary (the model is left out; the per-step history only when asked)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("model", "tokenizer")}
        out.update({name: [dataclasses.asdict(e) for e in out[name]] for name in _RECORDS})
        out["metric_names"] = list(self.metric_names)
        if not with_history:
            del out["history"]
        return out

    @classmethod
    def from_dict(cls, d: dict, **objects) -> FinetuneResult:
        """A result from its to_dict (one without history: none), with `objects` (its model, tokenizer)."""
        d = {**d, **{name: [record(**e) for e in d.get(name, [])] for name, record in _RECORDS.items()}}
        return cls(**{**d, "metric_names": tuple(d["metric_names"])}, **objects)


# The fields of a FinetuneResult that hold records, with the record each holds (to_dict, from_dict).
_RECORDS = {"evals": FinetuneEval, "history": FinetuneStep, "misclassified": Misclassified, "stages": FinetuneStage}


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

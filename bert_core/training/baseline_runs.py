"""Baselines as runs of a race: lines a fine-tuned model has to beat, fitted on the same split in seconds, with no
steps and no curve (one validation result, drawn as a level line). Each is shaped like a Finetuner, so that a race
and the app's training process carry it unchanged: `BagOfWordsRun` (TF-IDF + logistic regression) for sentence
labels; `MajorityTagRun` (each word's, or each part-of-speech tag's, most frequent training tag, the CoNLL-2000
chunking task's classic baselines) for token tags.
"""

from __future__ import annotations

import abc
import math
import time
from collections.abc import Callable, Sequence

from bert_core.data.classification_data import ClassificationData
from bert_core.data.token_tags_data import majority_baseline
from bert_core.errors import BertCoreError
from bert_core.training.bag_of_words import fit_bag_of_words, texts_of
from bert_core.training.finetune_results import (
    LABEL_METRICS,
    Evaluation,
    FinetuneEval,
    FinetuneResult,
    label_metrics,
)
from bert_core.training.run_loop import Progress

BASELINE_NAME = "tfidf"  # the bag-of-words run of a comparison; drawn as a level line


class LevelRun(abc.ABC):
    """A baseline run: `fit` once, then one validation result (FinetuneResult with no steps and no history)."""

    budgeted = False  # fitting takes seconds, not a share of the comparison's budget: left out of its progress
    kind, metric_names = "labels", LABEL_METRICS
    stages = ()       # one stage, no curriculum (a Finetuner's stages)

    def __init__(self, name: str, callbacks: Sequence[Callable[[object], None]] = ()):
        self.name = name
        self.callbacks = list(callbacks)
        self.state, self.step, self.evals = "idle", 0, []
        self.error: str | None = None
        self.result: FinetuneResult | None = None
        self._seconds = 0.0
        self._stopped = False

    @property
    def progress(self) -> Progress:
        done = self.state in ("finished", "stopped", "failed")
        return Progress(fraction=1.0 if done else 0.0, eta_s=0.0 if done else None, step=0, elapsed_s=self._seconds)

    def stop(self) -> None:
        self._stopped = True

    @abc.abstractmethod
    def fit(self) -> object:
        """Fit on the training split; return the fitted model (timed: a neural run counts training time only)."""

    @abc.abstractmethod
    def score(self, model) -> Evaluation:
        """The fitted model's Evaluation on the validation split."""

    def run(self) -> FinetuneResult | None:
        """Fit and evaluate; never raises (a failure sets `error` and state 'failed')."""
        if self._stopped:
            self.state = "stopped"
            return None
        self.state = "running"
        start = time.perf_counter()
        try:
            model = self.fit()
            self._seconds = time.perf_counter() - start
            ev = self.score(model)
        except BertCoreError as exc:
            self.error, self.state = str(exc), "failed"
            return None
        self.evals.append(FinetuneEval(0, self._seconds, ev.accuracy, ev.macro_f1, ev.loss))
        self.result = FinetuneResult(
            name=self.name, accuracy=ev.accuracy, macro_f1=ev.macro_f1, loss=ev.loss, confusion=ev.confusion,
            label_names=ev.label_names, evals=self.evals, history=[], misclassified=ev.misclassified, steps=0,
            train_seconds=self._seconds, state="finished", model=model, kind=self.kind,
            metric_names=self.metric_names, details=ev.details)
        self.state = "finished"
        for callback in self.callbacks:
            callback(self.evals[-1])
        return self.result


class BagOfWordsRun(LevelRun):
    """The bag-of-words baseline (bag_of_words: TF-IDF + logistic regression): fitted on `train`, evaluated once on
    `val`; its result's `model` is the BagOfWordsClassifier."""

    def __init__(self, train: ClassificationData, val: ClassificationData, seed: int = 0, name: str = BASELINE_NAME,
                 num_misclassified: int = 20, callbacks: Sequence[Callable[[object], None]] = ()):
        super().__init__(name, callbacks)
        self.train_data, self.val_data, self.seed = train, val, seed
        self.num_misclassified = num_misclassified

    def fit(self):
        return fit_bag_of_words(self.train_data, self.seed)

    def score(self, model) -> Evaluation:
        probs = model.probabilities(texts_of(self.val_data))
        data = self.val_data
        pred = [max(range(len(p)), key=p.__getitem__) for p in probs]
        loss = -sum(math.log(max(p[t], 1e-12)) for p, t in zip(probs, data.labels)) / max(len(data), 1)
        return label_metrics(data, range(len(data)), data.labels, pred, lambda i, y: probs[i][y], loss,
                             self.num_misclassified)


class MajorityTagRun(LevelRun):
    """A token-tag baseline: each validation word gets the tag most often seen in training with its key ("word":
    the word itself; "pos": its part-of-speech tag), unseen keys the most frequent tag; scored like the taggers."""

    kind = "tags"

    def __init__(self, task, key: str, name: str, callbacks: Sequence[Callable[[object], None]] = ()):
        super().__init__(name, callbacks)
        self.task, self.key = task, key
        self.metric_names = task.metric_names

    def fit(self):
        return majority_baseline(self.task.train_data, self.task.val_data, key=self.key)

    def score(self, predicted) -> Evaluation:
        return self.task.score_words(predicted, loss=float("nan"))

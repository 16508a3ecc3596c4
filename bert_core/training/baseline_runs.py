"""Baselines as runs of a race: lines a fine-tuned model has to beat, fitted on the same split in seconds, with no
steps and no curve (one validation result, drawn as a level line). Each is shaped like a Finetuner, so that a race
and the app's training process carry it unchanged: `bag_of_words_run` (TF-IDF + logistic regression) for sentence
labels; `majority_tag_run` (each word's, or each part-of-speech tag's, most frequent training tag, the CoNLL-2000
chunking task's classic baselines) for token tags.
"""

from __future__ import annotations

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


class LevelRun:
    """A baseline run: `fit()` once, then `score(model)` (an Evaluation): one validation result (FinetuneResult with
    no steps and no history). `fit` is timed: a neural run counts training time only."""

    budgeted = False  # fitting takes seconds, not a share of the comparison's budget: left out of its progress
    stages = ()       # one stage, no curriculum (a Finetuner's stages)

    def __init__(self, name: str, fit: Callable[[], object], score: Callable[[object], Evaluation],
                 callbacks: Sequence[Callable[[object], None]] = (), kind: str = "labels",
                 metric_names: tuple[str, str] = LABEL_METRICS):
        self.name, self.fit, self.score, self.kind, self.metric_names = name, fit, score, kind, metric_names
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


def bag_of_words_run(train: ClassificationData, val: ClassificationData, seed: int = 0, name: str = BASELINE_NAME,
                     num_misclassified: int = 20, callbacks: Sequence[Callable[[object], None]] = ()) -> LevelRun:
    """The bag-of-words baseline (bag_of_words: TF-IDF + logistic regression): fitted on `train`, evaluated once on
    `val`; its result's `model` is the BagOfWordsClassifier."""
    def score(model) -> Evaluation:
        probs = model.probabilities(texts_of(val))
        pred = [max(range(len(p)), key=p.__getitem__) for p in probs]
        loss = -sum(math.log(max(p[t], 1e-12)) for p, t in zip(probs, val.labels)) / max(len(val), 1)
        return label_metrics(val, range(len(val)), val.labels, pred, lambda i, y: probs[i][y], loss, num_misclassified)

    return LevelRun(name, lambda: fit_bag_of_words(train, seed), score, callbacks)


def majority_tag_run(task, key: str, name: str, callbacks: Sequence[Callable[[object], None]] = ()) -> LevelRun:
    """A token-tag baseline: each validation word gets the tag most often seen in training with its key ("word":
    the word itself; "pos": its part-of-speech tag), unseen keys the most frequent tag; scored like the taggers."""
    return LevelRun(name, lambda: majority_baseline(task.train_data, task.val_data, key=key),
                    lambda predicted: task.score_words(predicted, loss=float("nan")), callbacks, "tags",
                    task.metric_names)

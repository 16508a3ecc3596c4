"""The line a student who knows some ML will ask about: TF-IDF + logistic regression on the same split.

A bag of words ignores word order and needs no pretraining; with a few thousand labelled sentences it is a strong
baseline, and a tiny BERT or GPT fine-tuned for a minute does not always beat it (docs/benchmarks.md, "BERT or
GPT?"). `BagOfWordsRun` has the shape of a `finetune.Finetuner` (name, state, step, evals, callbacks, progress,
run, stop, result) so that a `FinetuneComparison` and the app's training process run and show it beside the
neural runs. scikit-learn is imported only when a baseline runs: the app's startup does not pay for it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from bert_core.classification_data import PAIR_JOINER, ClassificationData
from bert_core.errors import BertCoreError
from bert_core.finetune import FinetuneEval, FinetuneResult, Misclassified, confusion_matrix, macro_f1
from bert_core.run_loop import Progress

__all__ = ["BASELINE_NAME", "BagOfWordsClassifier", "BagOfWordsRun", "fit_bag_of_words"]

BASELINE_NAME = "tfidf"
# Not tuned on the validation set (that would flatter it): word unigrams and bigrams with sublinear term
# frequency, and scikit-learn's default L2 strength (C=1), a common first choice for short texts.
NGRAMS = (1, 2)
C = 1.0
MAX_ITER = 2000


def _texts(data: ClassificationData) -> list[str]:
    if data.texts_b is None:
        return list(data.texts)
    return [a + PAIR_JOINER + b for a, b in zip(data.texts, data.texts_b)]


class BagOfWordsClassifier:
    """A fitted TF-IDF + logistic-regression pipeline with the task's label names."""

    def __init__(self, pipeline, label_names: Sequence[str]):
        self.pipeline = pipeline
        self.label_names = list(label_names)

    def probabilities(self, texts: Sequence[str]) -> list[list[float]]:
        """Class probabilities in label-id order for each text (a class missing from training gets 0)."""
        raw = self.pipeline.predict_proba(list(texts))
        classes = [int(c) for c in self.pipeline.classes_]
        out = []
        for row in raw:
            probs = [0.0] * len(self.label_names)
            for c, p in zip(classes, row):
                probs[c] = float(p)
            out.append(probs)
        return out


def fit_bag_of_words(train: ClassificationData, seed: int = 0) -> BagOfWordsClassifier:
    """TF-IDF (unigrams + bigrams, sublinear tf) + logistic regression fitted on `train`, seeded."""
    try:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
    except ImportError:
        raise BertCoreError("the bag-of-words baseline needs scikit-learn: pip install -r requirements.txt") from None
    if len(set(train.labels)) < 2:
        raise BertCoreError("the training split holds a single label; the baseline needs examples of two or more")
    pipeline = make_pipeline(TfidfVectorizer(ngram_range=NGRAMS, sublinear_tf=True),
                             LogisticRegression(C=C, max_iter=MAX_ITER, random_state=seed))
    try:
        pipeline.fit(_texts(train), list(train.labels))
    except ValueError as exc:  # e.g. every text empty after tokenising: "empty vocabulary"
        raise BertCoreError(f"the bag-of-words baseline could not be fitted: {exc}") from None
    return BagOfWordsClassifier(pipeline, train.label_names)


def evaluate_bag_of_words(model: BagOfWordsClassifier, data: ClassificationData,
                          num_misclassified: int = 20) -> dict:
    """Accuracy, macro-F1, mean cross-entropy, confusion and the most confident mistakes, as finetune reports them."""
    probs = model.probabilities(_texts(data))
    pred = [max(range(len(p)), key=p.__getitem__) for p in probs]
    confusion = confusion_matrix(data.labels, pred, data.num_labels)
    loss = -sum(math.log(max(p[t], 1e-12)) for p, t in zip(probs, data.labels)) / max(len(data), 1)
    wrong = [Misclassified(data.example_text(i), data.label_names[t], data.label_names[y], probs[i][y])
             for i, (t, y) in enumerate(zip(data.labels, pred)) if t != y]
    wrong.sort(key=lambda m: -m.confidence)
    accuracy = sum(t == y for t, y in zip(data.labels, pred)) / max(len(data), 1)
    return dict(accuracy=accuracy, macro_f1=macro_f1(confusion), loss=loss, confusion=confusion,
                misclassified=wrong[:num_misclassified])


class BagOfWordsRun:
    """The baseline as one run of a comparison: fit on `train`, one evaluation on `val`, its result a
    FinetuneResult whose `model` is the BagOfWordsClassifier (no steps, no curve: a level line)."""

    budgeted = False  # seconds, not a share of the comparison's budget: its progress is not averaged in

    def __init__(self, train: ClassificationData, val: ClassificationData, seed: int = 0,
                 name: str = BASELINE_NAME, num_misclassified: int = 20,
                 callbacks: Sequence[Callable[[object], None]] = ()):
        self.train_data, self.val_data, self.seed, self.name = train, val, seed, name
        self.num_misclassified = num_misclassified
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
            model = fit_bag_of_words(self.train_data, self.seed)
            self._seconds = time.perf_counter() - start  # fitting time, as a neural run counts training time only
            m = evaluate_bag_of_words(model, self.val_data, self.num_misclassified)
        except BertCoreError as exc:
            self.error, self.state = str(exc), "failed"
            return None
        self.evals.append(FinetuneEval(0, self._seconds, m["accuracy"], m["macro_f1"], m["loss"]))
        self.result = FinetuneResult(
            name=self.name, accuracy=m["accuracy"], macro_f1=m["macro_f1"], loss=m["loss"], confusion=m["confusion"],
            label_names=list(self.train_data.label_names), evals=self.evals, history=[],
            misclassified=m["misclassified"], steps=0, train_seconds=self._seconds, state="finished", model=model)
        self.state = "finished"
        for callback in self.callbacks:
            callback(self.evals[-1])
        return self.result

"""Baselines as runs of a race: lines a fine-tuned model has to beat, fitted on the same split in seconds, with no
steps and no curve (one validation result, drawn as a level line). Each is shaped like a Finetuner, so that a race
and the app's training process carry it unchanged: `bag_of_words_run` for sentence labels; `majority_tag_run` (each
word's, or each part-of-speech tag's, most frequent training tag, the CoNLL-2000 chunking task's classic baselines)
for token tags.

The bag of words (TF-IDF + logistic regression) is the line a student who knows some ML will ask about: it ignores
word order and needs no pretraining; with a few thousand labelled sentences it is a strong baseline, and a tiny BERT
or GPT fine-tuned for a minute does not always beat it (docs/benchmarks.md, "BERT or GPT?"). scikit-learn is
imported only when a baseline is fitted or read back: the app's startup does not pay for it. A kept race keeps the
fitted baseline as JSON and safetensors, never a pickle.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from bert_core.data.classification_data import PAIR_JOINER, ClassificationData
from bert_core.data.token_tags_data import majority_baseline
from bert_core.errors import BertCoreError
from bert_core.model.files import read_json, write_json
from bert_core.training.finetune_results import (
    LABEL_METRICS,
    Evaluation,
    FinetuneEval,
    FinetuneResult,
    label_metrics,
)
from bert_core.training.run_loop import Progress

BASELINE_NAME = "tfidf"  # the bag-of-words run of a comparison; drawn as a level line
BAG_OF_WORDS_FILE = "bag_of_words.json"   # beside bag_of_words.safetensors in a kept baseline's folder
_TENSORS = "bag_of_words.safetensors"
_FORMAT = 1

# Not tuned on the validation set (that would flatter it): word unigrams and bigrams with sublinear term
# frequency, and scikit-learn's default L2 strength (C=1), a common first choice for short texts.
NGRAMS = (1, 2)
C = 1.0
MAX_ITER = 2000


def texts_of(data: ClassificationData) -> list[str]:
    """Each example as one string (the two texts of a sentence pair joined with PAIR_JOINER)."""
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

    def save(self, folder) -> Path:
        """Write the fitted pipeline to `folder` as JSON and safetensors (load_bag_of_words reads it back)."""
        vectorizer, regression = self.pipeline[0], self.pipeline[-1]
        terms = [""] * len(vectorizer.vocabulary_)
        for term, index in vectorizer.vocabulary_.items():
            terms[index] = term
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / BAG_OF_WORDS_FILE, {
            "format": _FORMAT, "label_names": self.label_names, "classes": [int(c) for c in regression.classes_],
            "ngram_range": list(vectorizer.ngram_range), "sublinear_tf": bool(vectorizer.sublinear_tf),
            "C": float(regression.C), "terms": terms})
        save_file({"idf": np.ascontiguousarray(vectorizer.idf_), "coef": np.ascontiguousarray(regression.coef_),
                   "intercept": np.ascontiguousarray(regression.intercept_)}, str(folder / _TENSORS))
        return folder


def _sklearn():
    """scikit-learn's vectorizer, regression and pipeline maker, imported here: the second it takes to import is
    paid only where a baseline is used."""
    try:   # a second of import, paid only where a baseline is used
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
    except ImportError:
        raise BertCoreError("the bag-of-words baseline needs scikit-learn: pip install -r requirements.txt") from None
    return TfidfVectorizer, LogisticRegression, make_pipeline


def fit_bag_of_words(train: ClassificationData, seed: int = 0) -> BagOfWordsClassifier:
    """TF-IDF (unigrams + bigrams, sublinear tf) + logistic regression fitted on `train`, seeded."""
    TfidfVectorizer, LogisticRegression, make_pipeline = _sklearn()
    if len(set(train.labels)) < 2:
        raise BertCoreError("the training split holds a single label; the baseline needs examples of two or more")
    pipeline = make_pipeline(TfidfVectorizer(ngram_range=NGRAMS, sublinear_tf=True),
                             LogisticRegression(C=C, max_iter=MAX_ITER, random_state=seed))
    try:
        pipeline.fit(texts_of(train), list(train.labels))
    except ValueError as exc:  # e.g. every text empty after tokenising: "empty vocabulary"
        raise BertCoreError(f"the bag-of-words baseline could not be fitted: {exc}") from None
    return BagOfWordsClassifier(pipeline, train.label_names)


def load_bag_of_words(folder) -> BagOfWordsClassifier:
    """A baseline that BagOfWordsClassifier.save wrote, rebuilt as the same scikit-learn pipeline (the same
    probabilities for every text); a damaged folder is a BertCoreError."""
    TfidfVectorizer, LogisticRegression, make_pipeline = _sklearn()
    folder = Path(folder)
    try:
        meta, tensors = read_json(folder / BAG_OF_WORDS_FILE), load_file(str(folder / _TENSORS))
        if meta.get("format") != _FORMAT:
            raise ValueError(f"format {meta.get('format')!r}")
        terms = meta["terms"]
        vectorizer = TfidfVectorizer(ngram_range=tuple(meta["ngram_range"]), sublinear_tf=meta["sublinear_tf"],
                                     vocabulary={t: i for i, t in enumerate(terms)})
        vectorizer.idf_ = tensors["idf"]
        regression = LogisticRegression(C=meta["C"])
        regression.classes_ = np.array(meta["classes"])
        regression.coef_, regression.intercept_ = tensors["coef"], tensors["intercept"]
        regression.n_features_in_ = len(terms)
        if regression.coef_.shape[1] != len(terms) or len(vectorizer.idf_) != len(terms):
            raise ValueError("its weights and its terms differ in number")
        return BagOfWordsClassifier(make_pipeline(vectorizer, regression), meta["label_names"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, SafetensorError) as exc:
        raise BertCoreError(f"the bag-of-words baseline kept in {folder} cannot be read ({exc})") from None


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

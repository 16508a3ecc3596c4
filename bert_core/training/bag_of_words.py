"""The line a student who knows some ML will ask about: TF-IDF + logistic regression on the same split.

A bag of words ignores word order and needs no pretraining; with a few thousand labelled sentences it is a strong
baseline, and a tiny BERT or GPT fine-tuned for a minute does not always beat it (docs/benchmarks.md, "BERT or
GPT?"). scikit-learn is imported only when a baseline is fitted or read back: the app's startup does not pay for it.
A kept race keeps the fitted baseline as JSON and safetensors, never a pickle.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from bert_core.data.classification_data import PAIR_JOINER, ClassificationData
from bert_core.errors import BertCoreError
from bert_core.model.files import read_json, write_json

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

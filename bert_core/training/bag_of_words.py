"""The line a student who knows some ML will ask about: TF-IDF + logistic regression on the same split.

A bag of words ignores word order and needs no pretraining; with a few thousand labelled sentences it is a strong
baseline, and a tiny BERT or GPT fine-tuned for a minute does not always beat it (docs/benchmarks.md, "BERT or
GPT?"). `finetune.BagOfWordsRun` runs it as one run of a comparison, beside the neural ones. scikit-learn is
imported only when a baseline is fitted: the app's startup does not pay for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from bert_core.data.classification_data import PAIR_JOINER, ClassificationData
from bert_core.errors import BertCoreError

__all__ = ["BagOfWordsClassifier", "fit_bag_of_words", "texts_of"]

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


def fit_bag_of_words(train: ClassificationData, seed: int = 0) -> BagOfWordsClassifier:
    """TF-IDF (unigrams + bigrams, sublinear tf) + logistic regression fitted on `train`, seeded."""
    try:   # scikit-learn takes a second to import, and only this baseline needs it: imported when it is fitted
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
        pipeline.fit(texts_of(train), list(train.labels))
    except ValueError as exc:  # e.g. every text empty after tokenising: "empty vocabulary"
        raise BertCoreError(f"the bag-of-words baseline could not be fitted: {exc}") from None
    return BagOfWordsClassifier(pipeline, train.label_names)

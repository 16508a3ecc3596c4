"""Kinds of fine-tuning: what a kind brings to the one fine-tuning loop (finetune.Finetuner), and sentence labels.

A kind holds its data, its head (the model class it trains), its batches, its loss, its metrics and its baseline
lines; the loop knows nothing else about it. Three kinds, as in the BERT paper's fine-tuning figure: SentenceLabels
(here), token_tagging.TokenTags and answer_spans.AnswerSpans.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from bert_core.data.batching import eval_batches, train_batches
from bert_core.data.classification_data import ClassificationData, encode_examples, split_train_val
from bert_core.errors import BertCoreError
from bert_core.model.bert import BertForSequenceClassification
from bert_core.model.checkpoint import check_tokenizer_fits
from bert_core.model.hf import load_pretrained
from bert_core.model.tokenization import BertTokenizer
from bert_core.training.baseline_runs import bag_of_words_run
from bert_core.training.finetune_results import LABEL_METRICS, Evaluation, StepLoss, label_metrics


@contextlib.contextmanager
def evaluating(model):
    """`model` in eval mode without gradients for the block; its train/eval mode is put back after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


@contextlib.contextmanager
def seeded(seed: int):
    """Run under a private copy of torch's global generator, seeded (a head's initialisation, a run's dropout
    masks), leaving the caller's intact."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def copy_encoder(source, target) -> None:
    """Copy `source.bert`'s weights into `target.bert`; the pooler only when the target has one (a tagger or an
    answer-span head reads the tokens, not the pooled [CLS])."""
    wanted = target.bert.state_dict()
    state = {k: v for k, v in source.bert.state_dict().items() if k in wanted}
    missing = [k for k in wanted if k not in state and not k.startswith("pooler.")]
    if missing:
        raise BertCoreError(f"the pretrained model lacks {len(missing)} encoder weight(s), e.g. {missing[0]}")
    target.bert.load_state_dict(state, strict=False)


def tokenizer_of(folder: Path, config) -> BertTokenizer:
    """The tokenizer a checkpoint folder was pretrained with (fine-tuning needs that one), checked against its model."""
    if not ((folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file()):
        raise BertCoreError(f"{folder} has no tokenizer (tokenizer.json or vocab.txt); fine-tuning needs the one "
                            "the model was pretrained with")
    tokenizer = BertTokenizer.load(folder)
    check_tokenizer_fits(tokenizer, config, folder)
    return tokenizer


class FinetuneTask(abc.ABC):
    """One kind of fine-tuning with its training and validation data, encoded once by `prepare`. Batches are anything
    with `.to(device)`; the loop moves them and passes them back unopened."""

    head: type = torch.nn.Module  # the model class this kind fine-tunes (sentence labels: what classifier_from_* build)
    kind = "labels"               # "labels", "tags" or "spans": what the app and the CLI show
    metric_names = LABEL_METRICS  # what Evaluation.accuracy and .macro_f1 measure for this kind
    primary = 0                   # which of the two figures ranks the runs of a race (0: accuracy, 1: macro_f1)

    label_names: list[str] | None = None   # the names a saved head's id2label holds (None: a head without labels)
    eval_by_length = False                 # validation batches sorted by length (less padding)
    _pad_id = 0
    _train_encoded: list | None = None
    _val_encoded: list | None = None

    def head_kwargs(self) -> dict:
        """What the head's constructor needs beside the config (e.g. the label count)."""
        return {}

    def new_head(self, config, seed: int = 0):
        """A randomly initialised head of `config` (the from-scratch run), seeded."""
        with seeded(seed):
            return self.head(config, **self.head_kwargs())

    def head_from_model(self, pretrained, seed: int = 0):
        """A fresh head (seeded) on a copy of `pretrained`'s encoder, e.g. the app's active model."""
        model = self.new_head(pretrained.config, seed)
        copy_encoder(pretrained, model)
        return model

    def head_from_checkpoint(self, folder, seed: int = 0):
        """(head, tokenizer) from a checkpoint folder: its encoder, and its head when the folder is a head of this
        kind with the same labels, else a fresh one (seeded)."""
        folder = Path(folder)
        with seeded(seed):
            model = load_pretrained(folder, model_class=self.head, **self.head_kwargs())
        return model, tokenizer_of(folder, model.config)

    def baselines(self, seed: int, num_misclassified: int = 20, callbacks=()) -> list:
        """Runs that draw this kind's baseline lines in a race (shaped like a Finetuner; see baseline_runs)."""
        return []

    # The kind's seeded split (data, train_size, val_size, seed=, val_fraction=) -> (train, val), as split_task uses.
    split = None
    # Simpler tasks trained first, in order, before the task's own data (a curriculum: the toy QA stories'
    # toy_qa_drills): each has a `name`, takes at most its `share` of the run's budget and ends once its training
    # score reaches its `mastery` (None: never early). Validation is always on `val_data`.
    drills: tuple = ()

    def drill_batches(self, index: int, batch_size: int, seed: int) -> Iterator:
        """Endless seeded training batches of drill `index` (a kind with drills defines it)."""
        raise BertCoreError(f"{self.kind} fine-tuning has no drills")

    def with_data(self, train, val) -> "FinetuneTask":
        """The same kind (and settings) over other data."""
        return type(self)(train, val)

    def hold_back(self, fraction: float, seed: int) -> tuple["FinetuneTask", "FinetuneTask"]:
        """(this task less a seeded `fraction` of its training data, a task that validates on that part): the
        held-back part picks a run's best step (Finetuner's keep_best), so the validation set stays unseen."""
        train, selection = type(self).split(self.train_data, seed=seed, val_fraction=fraction)
        return self.with_data(train, self.val_data), self.with_data(train, selection)

    @abc.abstractmethod
    def check(self, model) -> None:
        """Raise BertCoreError when `model`'s head does not fit this data (called before anything runs)."""

    def encode(self, data, tokenizer, max_length: int) -> list:
        """`data`'s examples encoded with the model's tokenizer, as the batches take them (a kind that batches its
        own way overrides `prepare` and the batches instead)."""
        raise NotImplementedError(f"{type(self).__name__} defines neither encode nor its own prepare and batch makers")

    def prepare(self, tokenizer, max_length: int) -> None:
        """Encode the training and validation examples, once, before the first step (one set given as both: once)."""
        self._pad_id = tokenizer.pad_id
        self._train_encoded = self.encode(self.train_data, tokenizer, max_length)
        same = self.val_data is self.train_data
        self._val_encoded = self._train_encoded if same else self.encode(self.val_data, tokenizer, max_length)

    def train_batches(self, batch_size: int, seed: int) -> Iterator:
        """batching.train_batches: endless seeded epochs (the same seed gives the same batches), padded per batch."""
        return train_batches(self._train_encoded, batch_size, seed, self._pad_id)

    def eval_batches(self, batch_size: int) -> Iterable:
        """One pass over the validation examples (batching.eval_batches)."""
        return eval_batches(self._val_encoded, batch_size, self._pad_id, by_length=self.eval_by_length)

    @abc.abstractmethod
    def step_loss(self, model, batch) -> StepLoss:
        """`batch` (on the model's device) through `model` in training mode: the loss and score of one step."""

    @abc.abstractmethod
    def predict(self, model, batch):
        """One validation batch's predictions, in whatever form `metrics` reads (called without gradients)."""

    @abc.abstractmethod
    def metrics(self, predictions: list, num_misclassified: int) -> Evaluation:
        """The figures of a validation pass from its `predict` outputs, keeping up to `num_misclassified` mistakes."""

    def evaluate(self, model, device, batch_size: int, num_misclassified: int = 0) -> Evaluation:
        """`metrics` over one pass of `predict` in eval mode."""
        with evaluating(model):
            predictions = [self.predict(model, batch.to(device)) for batch in self.eval_batches(batch_size)]
        return self.metrics(predictions, num_misclassified)


# ---------------------------------------------------------------------------------------------- sentence labels


class SentenceLabels(FinetuneTask):
    """A label per sentence (or sentence pair): BertForSequenceClassification's [CLS] (or last-token) head trained
    with cross-entropy, scored by accuracy, macro-F1, the confusion matrix and the most confident mistakes."""

    head = BertForSequenceClassification
    eval_by_length = True

    def __init__(self, train: ClassificationData, val: ClassificationData, pooling: str | None = None):
        if train.label_names != val.label_names:
            raise BertCoreError("train and validation sets have different label names; split one dataset")
        self.train_data, self.val_data = train, val
        self.pooling = pooling  # the heads' reading (model.POOLING_KINDS); None: each model's default

    split = staticmethod(split_train_val)

    def with_data(self, train, val) -> "SentenceLabels":
        return SentenceLabels(train, val, self.pooling)

    def head_kwargs(self) -> dict:
        return {"num_labels": self.train_data.num_labels, **({"pooling": self.pooling} if self.pooling else {})}

    @property
    def label_names(self) -> list[str]:
        return list(self.train_data.label_names)

    def baselines(self, seed: int, num_misclassified: int = 20, callbacks=()) -> list:
        """The bag-of-words line (TF-IDF + logistic regression) on the same split."""
        return [bag_of_words_run(self.train_data, self.val_data, seed, num_misclassified=num_misclassified,
                                 callbacks=callbacks)]

    def check(self, model) -> None:
        """Refuse a classifier whose output count is not the data's label count."""
        if model.num_labels != self.train_data.num_labels:
            raise BertCoreError(f"the classifier has {model.num_labels} outputs but the data has "
                                f"{self.train_data.num_labels} labels")

    def encode(self, data, tokenizer, max_length: int) -> list:
        """Each example as `[CLS] a [SEP] (b [SEP])`."""
        return encode_examples(data, tokenizer, max_length)

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



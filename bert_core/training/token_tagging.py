"""Token tags: the fine-tuning kind that gives every word a tag (chunks, entities, parts of speech).

BertForTokenClassification reads each word's first WordPiece (data.token_tags_data puts the tag there and -100 on
the rest), so a word's tag comes from its first piece's final hidden state, as in the BERT paper's CoNLL-2003
experiment and Hugging Face's run_ner. Span tags (IOB: chunks, entities) are scored by span F1 as conlleval does;
plain tags (parts of speech) by macro-F1 over the tags. The baselines are the CoNLL-2000 task's own: each word's,
and each part-of-speech tag's, most frequent training tag (baseline_runs.majority_tag_run).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F

from bert_core.data.batching import eval_batches
from bert_core.data.token_tags_data import (
    TaggedSentences,
    encode_tagged,
    span_scores,
    split_sentences,
    token_accuracy,
    words_predictions,
)
from bert_core.errors import BertCoreError
from bert_core.model.bert import IGNORE_INDEX, BertForTokenClassification
from bert_core.training.baseline_runs import majority_tag_run
from bert_core.training.finetune_results import Evaluation, StepLoss, confusion_matrix, macro_f1
from bert_core.training.finetune_tasks import FinetuneTask, evaluating

SPAN_METRICS = ("token accuracy", "chunk F1")
PLAIN_METRICS = ("token accuracy", "macro-F1 over tags")


class TokenTags(FinetuneTask):
    """A tag per word: BertForTokenClassification trained with cross-entropy on each word's first piece, scored by
    token accuracy and span F1 (IOB tags) or macro-F1 over tags (plain tags), on whole validation sentences (a
    sentence split to fit the model is put back together before it is scored)."""

    head = BertForTokenClassification
    split = staticmethod(split_sentences)
    kind = "tags"

    def __init__(self, train: TaggedSentences, val: TaggedSentences):
        if train.tag_names != val.tag_names:
            raise BertCoreError("train and validation sets have different tag names; split one dataset")
        self.train_data, self.val_data = train, val
        self.metric_names = SPAN_METRICS if train.scheme == "iob" else PLAIN_METRICS
        self.primary = 1 if train.scheme == "iob" else 0  # chunk F1 ranks span taggers, as CoNLL ranked them

    def head_kwargs(self) -> dict:
        return {"num_labels": self.train_data.num_tags}

    @property
    def label_names(self) -> list[str]:
        return list(self.train_data.tag_names)

    def baselines(self, seed: int, num_misclassified: int = 20, callbacks=()) -> list:
        """Each word's most frequent training tag, and each part-of-speech tag's when the data has that column."""
        runs = [majority_tag_run(self, "word", "word-majority", callbacks)]
        if self.val_data.pos is not None and self.train_data.pos is not None:
            runs.append(majority_tag_run(self, "pos", "pos-majority", callbacks))
        return runs

    def check(self, model) -> None:
        if model.num_labels != self.train_data.num_tags:
            raise BertCoreError(f"the tagger has {model.num_labels} outputs but the data has "
                                f"{self.train_data.num_tags} tags")

    def encode(self, data, tokenizer, max_length: int) -> list:
        return encode_tagged(data, tokenizer, max_length)

    def step_loss(self, model, batch) -> StepLoss:
        """Cross-entropy over the labelled pieces; the score is the batch's accuracy on them."""
        out = model(batch.input_ids, batch.attention_mask, batch.token_type_ids, labels=batch.labels)
        scored = batch.labels != IGNORE_INDEX
        accuracy = (out.logits.argmax(-1) == batch.labels)[scored].float().mean()
        return StepLoss(out.loss, accuracy, len(batch.indices))

    def predict(self, model, batch) -> tuple[list[int], list[list[int]], float, int]:
        """(example indices, each example's predicted tag ids at its labelled pieces, summed loss, labelled count)."""
        logits = model(batch.input_ids, batch.attention_mask, batch.token_type_ids).logits.float()
        scored = batch.labels != IGNORE_INDEX
        loss = F.cross_entropy(logits[scored], batch.labels[scored], reduction="sum").item()
        predicted = logits.argmax(-1).cpu()
        scored = scored.cpu()
        rows = [predicted[r][scored[r]].tolist() for r in range(len(batch.indices))]
        return batch.indices.tolist(), rows, loss, int(scored.sum())

    def metrics(self, predictions: list, num_misclassified: int) -> Evaluation:
        by_example: dict[int, list[int]] = {}
        loss_sum, count = 0.0, 0
        for indices, rows, loss, n in predictions:
            by_example.update(zip(indices, rows))
            loss_sum += loss
            count += n
        predicted = words_predictions(self.val_data, self._val_encoded, by_example)
        return self.score_words(predicted, loss_sum / max(count, 1))

    def score_words(self, predicted: list[list[int]], loss: float) -> Evaluation:
        """The Evaluation of per-word tag predictions for the validation sentences (a tagger's or a baseline's)."""
        data = self.val_data
        gold = [data.tag_strings(i) for i in range(len(data))]
        guessed = [[data.tag_names[t] for t in sentence] for sentence in predicted]
        accuracy = token_accuracy(gold, guessed)
        if data.scheme == "iob":
            spans = span_scores(gold, guessed)
            return Evaluation(accuracy, spans["f1"], loss, label_names=list(data.tag_names),
                              details={"precision": spans["precision"], "recall": spans["recall"],
                                       "per_type": spans["per_type"]})
        truth = [t for sentence in data.tags for t in sentence]
        flat = [t for sentence in predicted for t in sentence]
        confusion = confusion_matrix(truth, flat, data.num_tags)
        return Evaluation(accuracy, macro_f1(confusion), loss, confusion, list(data.tag_names))


# ---------------------------------------------------------------------------------------------- inference


@dataclass
class TaggedWord:
    """A word of a typed sentence with its predicted tag, how sure the tagger is, and where it sits in the text."""

    word: str
    tag: str
    probability: float
    start: int  # character offsets into the typed text
    end: int


def split_words(tokenizer, text: str) -> list[tuple[str, tuple[int, int]]]:
    """The words of typed text as a tagger's training data has them: split on spaces and punctuation, as BERT's
    pre-tokenizer splits (CoNLL files hold "does" "n't" and "." as words too; close enough to show), with offsets."""
    return tokenizer.tokenizer.pre_tokenizer.pre_tokenize_str(text)


def tag_words(model, tokenizer, text_or_words, tag_names: list[str], max_length: int = 128) -> list[TaggedWord]:
    """Tag each word of a typed sentence (or of a list of words) with `model`: its most likely tag and that tag's
    probability. A sentence longer than `max_length` is split as the training data was."""
    if isinstance(text_or_words, str):
        if not text_or_words.strip():
            raise BertCoreError("type a sentence to tag")
        pieces = split_words(tokenizer, text_or_words)
        words = [w for w, _ in pieces]
        spans = [span for _, span in pieces]
    else:
        words = [str(w) for w in text_or_words]
        if not words:
            raise BertCoreError("give at least one word to tag")
        spans = [(0, 0)] * len(words)
    if len(tag_names) != model.num_labels:
        raise BertCoreError(f"{len(tag_names)} tag names for a tagger with {model.num_labels} tags")
    one = TaggedSentences([words], [[0] * len(words)], list(tag_names), "plain")
    examples = encode_tagged(one, tokenizer, max_length)
    device = next(model.parameters()).device
    best: dict[int, list[int]] = {}
    probs: list[float] = []
    with evaluating(model):
        for e, batch in enumerate(eval_batches(examples, 1, tokenizer.pad_id)):
            batch = batch.to(device)
            p = model(batch.input_ids, batch.attention_mask, batch.token_type_ids).logits.float().softmax(-1)[0]
            scored = batch.labels[0] != IGNORE_INDEX
            top = p[scored].max(-1)
            best[e] = top.indices.tolist()
            probs += top.values.tolist()
    tags = words_predictions(one, examples, best)[0]
    return [TaggedWord(w, tag_names[t], p, s, end) for w, t, p, (s, end) in zip(words, tags, probs, spans)]

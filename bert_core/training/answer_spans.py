"""Answer spans: the fine-tuning kind that finds a question's answer as a span of its passage (SQuAD v1.1).

BertForQuestionAnswering scores every token as the answer's start and as its end; the input is `[CLS] question
[SEP] passage [SEP]`, a long passage cut into overlapping windows (data.answer_spans_data.encode_qa), as in the
BERT paper's SQuAD experiment and Hugging Face's run_qa. An answer is the best start <= end pair of passage tokens
over all of a question's windows, mapped back to the passage's characters, and is scored by SQuAD's own exact
match and F1. Windows are compared by log-probabilities (each window's start and end scores softmaxed), so that a
window's score does not depend on its length; exp(score) is then the span's probability within its window, the
confidence the app shows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from bert_core.data.answer_spans_data import (
    QAData,
    QAExample,
    best_answers,
    drill_data,
    encode_qa,
    split_by_passage,
    squad_metrics,
)
from bert_core.data.batching import eval_batches, train_batches
from bert_core.errors import BertCoreError
from bert_core.model.bert import BertForQuestionAnswering
from bert_core.training.finetune_results import Evaluation, Misclassified, StepLoss
from bert_core.training.finetune_tasks import FinetuneTask, evaluating

SPAN_ANSWER_METRICS = ("exact match", "F1")


def doc_stride_for(max_length: int) -> int:
    """How many tokens consecutive windows of a long passage share: a quarter of the window, as Hugging Face's
    run_qa defaults do (128 of 384, rounded down here)."""
    return max(1, max_length // 4)


def window_log_probs(logits: torch.Tensor, attention_mask: torch.Tensor) -> list[list[float]]:
    """Each window's start (or end) log-probabilities over its own tokens, padding left out (module docstring)."""
    log_probs = logits.float().masked_fill(attention_mask == 0, -1e9).log_softmax(-1).cpu()
    return [log_probs[r, :n].tolist() for r, n in enumerate(attention_mask.sum(-1).tolist())]


class AnswerSpans(FinetuneTask):
    """The answer to a question as a span of its passage: BertForQuestionAnswering trained with the mean of the
    start and end cross-entropies, scored by SQuAD exact match and F1 over the validation questions."""

    head = BertForQuestionAnswering
    kind = "spans"
    split = staticmethod(split_by_passage)
    metric_names = SPAN_ANSWER_METRICS
    primary = 1

    def __init__(self, train: QAData, val: QAData, drills: tuple = ()):
        self.train_data, self.val_data = train, val
        self.drills = tuple(drills)  # toy_qa_drills.Drill: trained first, in order (the toy stories' curriculum)
        self._drill_features: list = []

    def with_data(self, train, val) -> "AnswerSpans":
        return AnswerSpans(train, val, self.drills)

    def check(self, model) -> None:
        if not isinstance(model, BertForQuestionAnswering):
            raise BertCoreError(f"answer spans need a BertForQuestionAnswering, not a {type(model).__name__}")

    def encode(self, data, tokenizer, max_length: int) -> list:
        return encode_qa(data, tokenizer, max_length, doc_stride_for(max_length))

    def prepare(self, tokenizer, max_length: int) -> None:
        super().prepare(tokenizer, max_length)
        self._drill_features = [self.encode(drill_data(drill), tokenizer, max_length) for drill in self.drills]

    def drill_batches(self, index: int, batch_size: int, seed: int) -> Iterator:
        return train_batches(self._drill_features[index], batch_size, seed, self._pad_id)

    def step_loss(self, model, batch) -> StepLoss:
        """The mean start and end cross-entropy; the score is the share of windows with both ends right."""
        out = model(batch.input_ids, batch.attention_mask, batch.token_type_ids,
                    start_positions=batch.start_positions, end_positions=batch.end_positions)
        both = ((out.start_logits.argmax(-1) == batch.start_positions)
                & (out.end_logits.argmax(-1) == batch.end_positions)).float().mean()
        return StepLoss(out.loss, both, len(batch.indices))

    def predict(self, model, batch) -> tuple[list[int], list[list[float]], list[list[float]], float]:
        """(feature indices, each window's start and end log-probabilities over its own tokens, summed loss)."""
        out = model(batch.input_ids, batch.attention_mask, batch.token_type_ids,
                    start_positions=batch.start_positions, end_positions=batch.end_positions)
        starts = window_log_probs(out.start_logits, batch.attention_mask)
        ends = window_log_probs(out.end_logits, batch.attention_mask)
        return batch.indices.tolist(), starts, ends, float(out.loss) * len(starts)

    def metrics(self, predictions: list, num_misclassified: int) -> Evaluation:
        starts: dict[int, list[float]] = {}
        ends: dict[int, list[float]] = {}
        loss_sum, count = 0.0, 0
        for indices, s, e, loss in predictions:
            starts.update(zip(indices, s))
            ends.update(zip(indices, e))
            loss_sum += loss
            count += len(indices)
        features = self._val_encoded
        order = range(len(features))
        answers = best_answers(self.val_data, features, [starts[i] for i in order], [ends[i] for i in order])
        texts = {qid: a["text"] for qid, a in answers.items()}
        scores = squad_metrics(self.val_data, texts)
        wrong = []
        if num_misclassified:
            for ex in self.val_data.examples:
                got = answers.get(ex.id)
                if got is not None and got["text"] not in ex.answers:
                    wrong.append(Misclassified(ex.question, ex.answers[0] if ex.answers else "",
                                               got["text"], math.exp(got["score"])))
            wrong.sort(key=lambda m: -m.confidence)
        return Evaluation(scores["exact_match"], scores["f1"], loss_sum / max(count, 1),
                          misclassified=wrong[:num_misclassified])


# ---------------------------------------------------------------------------------------------- inference


@dataclass
class Answer:
    """A model's answer to a typed question: the span (characters of the passage), its probability in the window
    it came from, and that window's tokens with each one's start and end probability (for the figure)."""

    text: str
    start_char: int
    end_char: int
    probability: float
    tokens: list[str]
    start_probs: list[float]
    end_probs: list[float]
    passage_token: list[bool]  # which of `tokens` belong to the passage (the question and specials do not)


def answer_question(model, tokenizer, question: str, passage: str, max_length: int = 256) -> Answer:
    """`model`'s answer to `question` from `passage` (windows as in training, the best span over all of them)."""
    if not question.strip():
        raise BertCoreError("type a question")
    if not passage.strip():
        raise BertCoreError("give a passage to find the answer in")
    data = QAData([QAExample("typed", question, passage, [], [])], source="typed")
    features = encode_qa(data, tokenizer, max_length, doc_stride_for(max_length))
    device = next(model.parameters()).device
    starts, ends = [], []
    with evaluating(model):
        for batch in eval_batches(features, 8, tokenizer.pad_id):
            batch = batch.to(device)
            out = model(batch.input_ids, batch.attention_mask, batch.token_type_ids)
            starts += window_log_probs(out.start_logits, batch.attention_mask)
            ends += window_log_probs(out.end_logits, batch.attention_mask)
    best = best_answers(data, features, starts, ends)["typed"]
    # The window the answer came from: the one whose offsets hold its first character (the first such window).
    window = next((i for i, f in enumerate(features)
                   if any(o is not None and o[0] == best["start_char"] for o in f.offsets)), 0)
    f = features[window]
    return Answer(best["text"], best["start_char"], best["end_char"], math.exp(best["score"]),
                  tokenizer.convert_ids_to_tokens(f.input_ids), [math.exp(v) for v in starts[window]],
                  [math.exp(v) for v in ends[window]], [o is not None for o in f.offsets])

"""The seam between the fine-tuning loop and a task kind: the Finetuner asks the task for its batches, each batch's
loss and the validation figures, and nothing else, so a kind defined here (the sign of a sum of four numbers, a
linear head) trains and is evaluated by the same loop as sentence labels."""

import dataclasses
import itertools
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from bert_core.data.classification_data import split_train_val
from bert_core.errors import BertCoreError
from bert_core.model.config import BertConfig
from bert_core.model.tokenization import train_tokenizer
from bert_core.training.finetune import Finetuner, classifier_from_scratch
from bert_core.data.classification_data import toy_topic_task
from bert_core.training.finetune_settings import FinetuneConfig
from bert_core.training.finetune_tasks import SentenceLabels
from bert_core.training.finetune_results import Evaluation, StepLoss
from bert_core.training.finetune_tasks import FinetuneTask


class LinearHead(torch.nn.Module):
    """Four numbers in, two logits out; zero weights, so the fresh head predicts class 0 for everything."""

    def __init__(self):
        super().__init__()
        self.config = SimpleNamespace(num_hidden_layers=0)   # no encoder: its one layer is the head (param_groups)
        self.classifier = torch.nn.Linear(4, 2)
        torch.nn.init.zeros_(self.classifier.weight)
        torch.nn.init.zeros_(self.classifier.bias)

    def forward(self, x):
        return self.classifier(x)


@dataclass
class VectorBatch:
    x: torch.Tensor
    y: torch.Tensor

    def to(self, device) -> "VectorBatch":
        return VectorBatch(self.x.to(device), self.y.to(device))


class SignOfSum(FinetuneTask):
    """Is the sum of four random numbers positive? A kind with no tokens, recording what the loop asks of it."""

    head = LinearHead

    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.train_x, self.val_x = torch.randn(256, 4, generator=g), torch.randn(64, 4, generator=g)
        self.train_data = self.val_data = SimpleNamespace(source="four random numbers")   # what a task holds
        self.calls = []

    @staticmethod
    def _batch(x) -> VectorBatch:
        return VectorBatch(x, (x.sum(-1) > 0).long())

    def check(self, model):
        self.calls.append(("check",))
        if not isinstance(model, self.head):
            raise BertCoreError(f"the sign of a sum needs a {self.head.__name__}")

    def prepare(self, tokenizer, max_length):
        self.calls.append(("prepare", tokenizer, max_length))

    def train_batches(self, batch_size, seed):
        self.calls.append(("train_batches", batch_size, seed))
        g = torch.Generator().manual_seed(seed)
        return (self._batch(self.train_x[torch.randperm(256, generator=g)[:batch_size]]) for _ in itertools.count())

    def eval_batches(self, batch_size):
        return [self._batch(self.val_x[i:i + batch_size]) for i in range(0, len(self.val_x), batch_size)]

    def step_loss(self, model, batch):
        self.calls.append(("step_loss",))
        assert model.training
        logits = model(batch.x)
        return StepLoss(torch.nn.functional.cross_entropy(logits, batch.y),
                        (logits.argmax(-1) == batch.y).float().mean(), len(batch.y))

    def predict(self, model, batch):
        assert not model.training and not torch.is_grad_enabled()
        logits = model(batch.x)
        loss = torch.nn.functional.cross_entropy(logits, batch.y, reduction="sum").item()
        return logits.argmax(-1).tolist(), batch.y.tolist(), loss

    def metrics(self, predictions, num_misclassified):
        self.calls.append(("metrics", num_misclassified))
        pairs = [(p, t) for predicted, truth, _ in predictions for p, t in zip(predicted, truth)]
        accuracy = sum(p == t for p, t in pairs) / len(pairs)
        loss = sum(loss for _, _, loss in predictions) / len(pairs)
        return Evaluation(accuracy, accuracy, loss, label_names=["negative", "positive"])


def test_a_task_kind_of_its_own_trains_and_is_evaluated_through_the_finetuner():
    task = SignOfSum()
    config = FinetuneConfig(max_steps=40, time_budget_s=None, batch_size=16, learning_rate=0.1, warmup_ratio=0.0,
                            eval_points=4, num_misclassified=3, seed=1, device="cpu")
    tuner = Finetuner(LinearHead(), "the tokenizer", task=task, config=config, name="sign")
    result = tuner.run()
    assert tuner.error is None and tuner.state == "finished" and tuner.progress.fraction == 1.0
    # Checked, prepared with the tokenizer, its batches asked for once; a validation pass before the first step.
    assert task.calls[:4] == [("check",), ("prepare", "the tokenizer", config.max_length), ("train_batches", 16, 1),
                              ("metrics", 0)]
    assert task.calls.count(("step_loss",)) == result.steps == len(result.history) == 40
    assert tuner.examples_seen == 40 * 16
    # The curve's passes keep no mistakes; the final one keeps the config's number.
    passes = [call[1] for call in task.calls if call[0] == "metrics"]
    assert passes == [0] * (len(result.evals) - 1) + [3] and len(result.evals) == 5
    assert [e.step for e in result.evals] == [0, 10, 20, 30, 40]
    labels = (task.val_x.sum(-1) > 0).long()
    assert result.evals[0].accuracy == pytest.approx((labels == 0).float().mean().item())  # the zero head: class 0
    assert result.accuracy == result.evals[-1].accuracy > 0.9
    assert result.label_names == ["negative", "positive"] and result.model is tuner.model
    assert 0 <= result.history[-1].train_acc <= 1


def test_a_model_the_task_refuses_stops_the_finetuner_before_anything_runs():
    task = SignOfSum()
    with pytest.raises(BertCoreError, match="needs a LinearHead"):
        Finetuner(torch.nn.Linear(4, 2), None, task=task, config=FinetuneConfig(max_steps=1, device="cpu"))
    assert task.calls == [("check",)]


def test_sentence_labels_is_the_kind_of_train_and_val_data_and_gives_the_same_run_as_an_explicit_task():
    train, val = split_train_val(toy_topic_task(seed=0, num_examples=200), 120, 40, seed=0)
    tokenizer = train_tokenizer(train.texts, vocab_size=300)
    config = FinetuneConfig(max_steps=3, time_budget_s=None, batch_size=16, max_length=32, eval_points=1,
                            device="cpu")

    def model():
        return classifier_from_scratch(BertConfig.preset("nano", vocab_size=tokenizer.vocab_size), train.num_labels)

    implicit = Finetuner(model(), tokenizer, train, val, config)
    assert isinstance(implicit.task, SentenceLabels)
    assert implicit.task.train_data is train and implicit.task.val_data is val
    explicit = Finetuner(model(), tokenizer, task=SentenceLabels(train, val), config=config)
    a, b = implicit.run(), explicit.run()
    assert [h.loss for h in a.history] == [h.loss for h in b.history] and a.confusion == b.confusion
    with pytest.raises(BertCoreError, match="not both"):
        Finetuner(model(), tokenizer, train, val, config, task=SentenceLabels(train, val))
    with pytest.raises(BertCoreError, match="needs training and validation data"):
        Finetuner(model(), tokenizer, train, config=config)
    with pytest.raises(BertCoreError, match="different label names"):
        SentenceLabels(train, dataclasses.replace(val, label_names=val.label_names[::-1]))

"""Fine-tuning BERT for sequence classification: the [CLS] classifier, from a pretrained checkpoint or from scratch.

The lesson the app shows: the same architecture, the same data and the same budget, with and without pretraining.
`Finetuner` is the one fine-tuning loop: it asks a task kind (finetune_tasks.FinetuneTask; today SentenceLabels)
for batches, losses and metrics, so token tags or answer spans need a kind, not a second loop. It is observable and
stoppable from another thread like `training.Trainer` and reuses its schedule (`lr_multiplier`), device choice and
AdamW parameter groups; the budget counts training time only, so the validation passes that draw the accuracy
curve do not eat into it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bert_core.data.classification_data import (
    ClassificationData,
    load_classification_csv,
    split_train_val,
    toy_topic_task,
)
from bert_core.errors import BertCoreError
from bert_core.model.bert import adamw
from bert_core.model.checkpoint import check_tokenizer_fits, save_checkpoint
from bert_core.model.hf import load_pretrained
from bert_core.model.tokenization import BertTokenizer, train_tokenizer
from bert_core.training.bag_of_words import fit_bag_of_words, texts_of
from bert_core.training.finetune_tasks import (
    FinetuneTask,
    Misclassified,
    SentenceLabels,
    confusion_matrix,
    label_metrics,
    macro_f1,
)
from bert_core.training.run_loop import Progress, RunLoop
from bert_core.training.trainer import TrainConfig, lr_multiplier, resolve_device

__all__ = [
    "FinetuneConfig", "FinetuneStep", "FinetuneEval", "FinetuneResult", "Finetuner", "finetune",
    "FinetuneTask", "SentenceLabels", "Misclassified", "confusion_matrix", "macro_f1",
    "classifier_from_checkpoint", "classifier_from_model", "classifier_from_scratch", "set_dropout",
    "FinetuneComparison", "BagOfWordsRun", "BASELINE_NAME", "classify_text", "result_probabilities",
    "evaluate_classifier", "comparison_config", "build_comparison", "scratch_twin", "tokenizer_for_scratch",
    "load_task", "load_classification_csv", "split_train_val", "toy_topic_task", "save_classifier",
]

log = logging.getLogger(__name__)
RESULT_FILE = "finetune_result.json"
BASELINE_NAME = "tfidf"  # the bag-of-words run of a comparison (BagOfWordsRun); drawn as a level line


@dataclass(frozen=True)
class FinetuneConfig:
    """Knobs of one fine-tuning run; the pretrained and the from-scratch run of a comparison share one."""

    batch_size: int = 32
    learning_rate: float = 1e-4
    warmup_ratio: float = 0.1
    max_steps: int | None = None
    time_budget_s: float | None = 60.0
    weight_decay: float = 0.01
    adam_eps: float = 1e-6
    max_grad_norm: float = 1.0
    max_length: int = 128
    # Hidden and attention dropout while fine-tuning; None keeps the model's own setting. BERT fine-tuned with 0.1,
    # but our pretraining recipe turns dropout off, and on the shipped checkpoint 0.1 helped the from-scratch
    # twin more than the pretrained model (docs/benchmarks.md), so the default keeps the checkpoint's.
    dropout: float | None = None
    eval_points: int = 10  # validation passes spread over the budget (plus one before the first step)
    eval_batch_size: int = 128
    num_misclassified: int = 20
    seed: int = 0
    device: str = "auto"

    def __post_init__(self):
        self.train_config()  # validates the shared fields with TrainConfig's messages
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise BertCoreError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.eval_points < 1:
            raise BertCoreError(f"eval_points must be at least 1, got {self.eval_points}")

    def train_config(self) -> TrainConfig:
        """The pretraining TrainConfig with the same schedule, used for its learning-rate schedule."""
        return TrainConfig(
            batch_size=self.batch_size, learning_rate=self.learning_rate, warmup_ratio=self.warmup_ratio,
            max_steps=self.max_steps, time_budget_s=self.time_budget_s, schedule="linear",
            weight_decay=self.weight_decay, adam_eps=self.adam_eps, max_grad_norm=self.max_grad_norm,
            max_seq_length=self.max_length, seed=self.seed, device=self.device,
        )

    def replace(self, **changes) -> "FinetuneConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


@dataclass
class FinetuneStep:
    """One optimizer update."""

    step: int
    examples_seen: int
    lr: float
    loss: float
    train_acc: float
    grad_norm: float
    elapsed_s: float  # training seconds so far (validation time excluded)


@dataclass
class FinetuneEval:
    """A pass over the validation set (step 0 = the fresh head, before any update)."""

    step: int
    elapsed_s: float
    accuracy: float
    macro_f1: float
    loss: float


@dataclass
class FinetuneResult:
    """Final validation metrics, curves and the trained model of one run."""

    name: str
    accuracy: float
    macro_f1: float
    loss: float
    confusion: list[list[int]]  # rows: true label, columns: predicted label
    label_names: list[str]
    evals: list[FinetuneEval]
    history: list[FinetuneStep]
    misclassified: list[Misclassified]
    steps: int
    train_seconds: float
    state: str
    model: torch.nn.Module | None = field(default=None, repr=False)
    tokenizer: object | None = field(default=None, repr=False)

    def to_dict(self, with_history: bool = False) -> dict:
        """JSON-able summary (the model is left out; the per-step history only when asked)."""
        out = {
            "name": self.name, "accuracy": self.accuracy, "macro_f1": self.macro_f1, "loss": self.loss,
            "confusion": self.confusion, "label_names": self.label_names, "steps": self.steps,
            "train_seconds": self.train_seconds, "state": self.state,
            "evals": [dataclasses.asdict(e) for e in self.evals],
            "misclassified": [dataclasses.asdict(m) for m in self.misclassified],
        }
        if with_history:
            out["history"] = [dataclasses.asdict(e) for e in self.history]
        return out


# ---------------------------------------------------------------------------------------------- models


@contextlib.contextmanager
def _seeded(seed: int):
    """Run under a private copy of torch's global generator, seeded (model construction, a run's dropout masks),
    leaving the caller's intact."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def classifier_from_checkpoint(folder, num_labels: int, seed: int = 0):
    """(classifier, tokenizer) from a pretraining or classifier checkpoint folder: its encoder (+ pooler), a fresh
    head; a causal (GPT-style) folder gives a classifier reading the last token (model.LAST_TOKEN_POOLING)."""
    folder = Path(folder)
    with _seeded(seed):
        model = load_pretrained(folder, model_class=SentenceLabels.head, num_labels=num_labels)
    if not ((folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file()):
        raise BertCoreError(f"{folder} has no tokenizer (tokenizer.json or vocab.txt); fine-tuning needs the one "
                            "the model was pretrained with")
    tokenizer = BertTokenizer.load(folder)
    check_tokenizer_fits(tokenizer, model.config, folder)
    return model, tokenizer


def classifier_from_model(pretrained, num_labels: int, seed: int = 0):
    """A classifier whose encoder (+ pooler) are copies of `pretrained.bert` (e.g. the app's active model), fresh
    head; reading the last token when `pretrained` is causal (model.LAST_TOKEN_POOLING), so GPT fine-tunes too."""
    with _seeded(seed):
        model = SentenceLabels.head(pretrained.config, num_labels)
    model.bert.load_state_dict(pretrained.bert.state_dict())
    return model


def set_dropout(model, p: float) -> None:
    """Set every dropout of `model` (hidden, attention, classifier) to `p`, and its config to match, so a saved
    classifier's config.json says what it was trained with."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p
        if hasattr(module, "config") and hasattr(module.config, "hidden_dropout_prob"):
            module.config = module.config.replace(hidden_dropout_prob=p, attention_probs_dropout_prob=p)


def classifier_from_scratch(config, num_labels: int, seed: int = 0):
    """A randomly initialised classifier of the given BertConfig: the no-pretraining baseline."""
    with _seeded(seed):
        return SentenceLabels.head(config, num_labels)


def save_classifier(result: FinetuneResult, folder) -> Path:
    """Write the fine-tuned classifier as a Hugging Face folder (+ tokenizer, label names, finetune_result.json),
    atomically: a failed write (full disk, read-only folder) leaves what was there whole."""
    if result.model is None:
        raise BertCoreError("this result holds no model to save")
    return save_checkpoint(folder, result.model, tokenizer=result.tokenizer, label_names=result.label_names,
                           extra={RESULT_FILE: result.to_dict()})


# ---------------------------------------------------------------------------------------------- inference


def evaluate_classifier(model, tokenizer, data: ClassificationData, max_length: int = 128, batch_size: int = 128,
                        device="cpu", num_misclassified: int = 20) -> dict:
    """Accuracy, macro-F1, loss, confusion matrix and the most confident mistakes of `model` on `data`."""
    task = SentenceLabels(data, data)
    task.prepare(tokenizer, max_length)
    ev = task.evaluate(model, torch.device(device), batch_size, num_misclassified)
    return dict(accuracy=ev.accuracy, macro_f1=ev.macro_f1, loss=ev.loss, confusion=ev.confusion,
                misclassified=ev.misclassified)


@torch.no_grad()
def classify_text(model, tokenizer, text: str, text_b: str | None = None, max_length: int = 128) -> list[float]:
    """Class probabilities for one text (or sentence pair), in label-id order."""
    if not text or not text.strip():
        raise BertCoreError("type a sentence to classify")
    enc = tokenizer.encode_pair(text, text_b, max_length)
    device = next(model.parameters()).device
    ids = torch.tensor([enc["input_ids"]], device=device)
    types = torch.tensor([enc["token_type_ids"]], device=device)
    was_training = model.training
    model.eval()
    logits = model(ids, torch.ones_like(ids), types).logits.float()
    model.train(was_training)
    return logits.softmax(-1)[0].tolist()


def result_probabilities(result: FinetuneResult, text: str, max_length: int = 128) -> list[float]:
    """Class probabilities for one typed text from any run's result: a fine-tuned model, or the bag-of-words
    baseline (bag_of_words.BagOfWordsClassifier), whose model takes raw text and has no tokenizer."""
    if result.model is None:
        raise BertCoreError(f"the run {result.name!r} kept no model to classify with")
    if hasattr(result.model, "probabilities"):
        if not text or not text.strip():
            raise BertCoreError("type a sentence to classify")
        return result.model.probabilities([text])[0]
    return classify_text(result.model, result.tokenizer, text, max_length=max_length)


# ---------------------------------------------------------------------------------------------- the loop


class Finetuner(RunLoop):
    """Fine-tunes `model` on one task kind (finetune_tasks.FinetuneTask): SentenceLabels over `train` and `val`, or
    the given `task`; observable and stoppable from any thread (run_loop), run once.

    The loop talks to the task only: it prepares the task's data with `tokenizer`, asks it for training batches and
    each batch's loss, and for the figures of the validation passes. Another thread may read `state`, `history`,
    `evals`, `progress`, `error` and `result` at any time and call `stop()`; the run then ends at the next step
    boundary with a final validation pass.
    """

    step_event_type = FinetuneStep
    times_only_steps = True   # the budget is training time: the validation passes that draw the curve are free
    rerunnable = False
    run_name = "fine-tuning"

    def __init__(self, model, tokenizer, train: ClassificationData | None = None, val: ClassificationData | None = None,
                 config: FinetuneConfig = FinetuneConfig(), name: str = "run",
                 callbacks: Sequence[Callable[[object], None]] = (), *, task: FinetuneTask | None = None):
        self.task = _task_of(train, val, task)
        self.task.check(model)
        super().__init__(callbacks)
        self.config = config
        self.name = name
        self.tokenizer = tokenizer
        self.device = resolve_device(config.device)
        if config.dropout is not None:
            set_dropout(model, config.dropout)
        self.model = model.to(self.device)
        self._train_config = config.train_config()
        self.optimizer = adamw(self.model, config.learning_rate, config.weight_decay, eps=config.adam_eps)
        self.examples_seen = 0
        self.result: FinetuneResult | None = None
        self._batches = None
        self._next_eval = 1
        self._step_seconds: list[float] = []
        self._elapsed_before_step = 0.0

    def run(self) -> FinetuneResult | None:
        """Train until the budget or stop(); never raises: a failure sets `error` and state 'failed'."""
        super().run()
        return self.result

    # ------------------------------------------------------------------ the loop's hooks (run_loop.RunLoop.run)

    def _run_context(self):
        return _seeded(self.config.seed)  # dropout masks repeat with the seed; the caller's RNG state comes back

    def _before_loop(self) -> None:
        cfg = self.config
        self.task.prepare(self.tokenizer, cfg.max_length)
        self._batches = self.task.train_batches(cfg.batch_size, cfg.seed)
        self.model.train()
        self._evaluate()

    def _after_step(self) -> None:
        self._step_seconds.append(self.elapsed_s - self._elapsed_before_step)
        self._elapsed_before_step = self.elapsed_s
        points = self.config.eval_points
        if self._next_eval < points and self._fraction_done() >= self._next_eval / points:
            self._next_eval = math.floor(self._fraction_done() * points) + 1
            if not self._done():
                self._evaluate()

    def _done(self) -> bool:
        if super()._done():
            return True
        # The time budget is a hard limit: a step that would end after it (at the recent pace) is not begun.
        budget, recent = self.config.time_budget_s, self._step_seconds[-5:]
        return bool(budget and recent and self.elapsed_s + sum(recent) / len(recent) > budget)

    def _after_loop(self, final: str) -> None:
        cfg = self.config
        ev = self.task.evaluate(self.model, self.device, cfg.eval_batch_size, cfg.num_misclassified)
        self._publish(FinetuneEval(self.step, self.elapsed_s, ev.accuracy, ev.macro_f1, ev.loss))
        self.model.eval()
        self.result = FinetuneResult(
            name=self.name, accuracy=ev.accuracy, macro_f1=ev.macro_f1, loss=ev.loss, confusion=ev.confusion,
            label_names=ev.label_names, evals=self.evals, history=self.history, misclassified=ev.misclassified,
            steps=self.step, train_seconds=self.elapsed_s, state=final, model=self.model, tokenizer=self.tokenizer,
        )

    def _after_run(self, final: str) -> None:
        if self.result is not None:
            self.result.state = final

    def _after_divergence(self) -> str:
        # As in Trainer: the update is refused, but the weights that gave this loss are already the previous
        # update's, so nothing of this run is worth keeping; the checkpoint it started from is untouched.
        return "lower it and start again (the checkpoint it started from is unchanged, and nothing was saved)."

    def _train_step(self) -> FinetuneStep | None:
        cfg = self.config
        batch = next(self._batches).to(self.device)
        out = self.task.step_loss(self.model, batch)
        out.loss.backward()
        max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))
        loss = out.loss.item()
        if not self._update_is_finite(loss, grad_norm):
            return None
        lr = cfg.learning_rate * lr_multiplier(self._train_config, self.step, self._elapsed_now())
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.examples_seen += out.examples
        return FinetuneStep(self.step, self.examples_seen, lr, loss, out.score.item(), grad_norm, self._elapsed_now())

    def _evaluate(self) -> None:
        ev = self.task.evaluate(self.model, self.device, self.config.eval_batch_size)
        self._publish(FinetuneEval(self.step, self.elapsed_s, ev.accuracy, ev.macro_f1, ev.loss))


def _task_of(train: ClassificationData | None, val: ClassificationData | None,
             task: FinetuneTask | None) -> FinetuneTask:
    """The task a Finetuner runs: the one given, or sentence labels over `train` and `val`."""
    if task is None:
        if train is None or val is None:
            raise BertCoreError("fine-tuning needs training and validation data, or a task holding them")
        return SentenceLabels(train, val)
    if train is not None or val is not None:
        raise BertCoreError("give the training and validation data or a task holding them, not both")
    return task


def finetune(model, tokenizer, train: ClassificationData, val: ClassificationData,
             config: FinetuneConfig = FinetuneConfig(), name: str = "run", callbacks=()) -> FinetuneResult:
    """Fine-tune `model` in this thread and return its result; a failure raises BertCoreError."""
    tuner = Finetuner(model, tokenizer, train, val, config, name=name, callbacks=callbacks)
    result = tuner.run()
    if tuner.error is not None or result is None:
        raise BertCoreError(tuner.error or "fine-tuning produced no result")
    return result


# ---------------------------------------------------------------------------------------------- comparisons


class BagOfWordsRun:
    """The bag-of-words baseline (bag_of_words: TF-IDF + logistic regression) as one run of a comparison: fitted on
    `train`, evaluated once on `val`; its result a FinetuneResult whose `model` is the BagOfWordsClassifier (no
    steps, no curve: a level line). Shaped like a Finetuner (name, state, step, evals, callbacks, progress, run,
    stop, error, result) so that FinetuneComparison and the app's training process carry it unchanged."""

    budgeted = False  # fitting takes seconds, not a share of the comparison's budget: left out of its progress

    def __init__(self, train: ClassificationData, val: ClassificationData, seed: int = 0, name: str = BASELINE_NAME,
                 num_misclassified: int = 20, callbacks: Sequence[Callable[[object], None]] = ()):
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
            self._seconds = time.perf_counter() - start  # fitting time: a neural run counts training time only
            probs = model.probabilities(texts_of(self.val_data))
        except BertCoreError as exc:
            self.error, self.state = str(exc), "failed"
            return None
        data = self.val_data
        pred = [max(range(len(p)), key=p.__getitem__) for p in probs]
        loss = -sum(math.log(max(p[t], 1e-12)) for p, t in zip(probs, data.labels)) / max(len(data), 1)
        ev = label_metrics(data, range(len(data)), data.labels, pred, lambda i, y: probs[i][y], loss,
                           self.num_misclassified)
        self.evals.append(FinetuneEval(0, self._seconds, ev.accuracy, ev.macro_f1, ev.loss))
        self.result = FinetuneResult(
            name=self.name, accuracy=ev.accuracy, macro_f1=ev.macro_f1, loss=ev.loss, confusion=ev.confusion,
            label_names=ev.label_names, evals=self.evals, history=[], misclassified=ev.misclassified, steps=0,
            train_seconds=self._seconds, state="finished", model=model)
        self.state = "finished"
        for callback in self.callbacks:
            callback(self.evals[-1])
        return self.result


class FinetuneComparison:
    """Several fine-tuning runs ("pretrained", then "scratch", or a race of pretrained models) with one config, one
    after the other on this thread; with `baseline`, the bag-of-words line (BagOfWordsRun) first,
    on the same split.

    Observable and stoppable like a Trainer: `state`, `error`, `progress`, `stop()`, and `tuners` for the curves.
    """

    def __init__(self, runs: Sequence[tuple[str, torch.nn.Module, object]], train: ClassificationData,
                 val: ClassificationData, config: FinetuneConfig, callbacks=(), baseline: bool = False):
        self.train_data, self.val_data, self.config = train, val, config
        names = [name for name, _, _ in runs]
        if len(set(names)) != len(names):
            raise BertCoreError(f"two runs of a comparison share a name: {', '.join(names)}")
        self.tuners = [Finetuner(m, tok, train, val, config, name=name, callbacks=callbacks) for name, m, tok in runs]
        if baseline:
            self.tuners.insert(0, BagOfWordsRun(train, val, config.seed, num_misclassified=config.num_misclassified,
                                                callbacks=callbacks))
        self.error: str | None = None
        self._stop = threading.Event()
        self._started = False

    @property
    def step(self) -> int:
        return sum(t.step for t in self.tuners)

    @property
    def state(self) -> str:
        states = [t.state for t in self.tuners]
        if self.error is not None or "failed" in states:
            return "failed"
        if "running" in states or (self._started and "idle" in states and not self._stop.is_set()):
            return "running"
        if all(s == "finished" for s in states):
            return "finished"
        return "stopped" if self._started else "idle"

    @property
    def progress(self) -> Progress:
        """Overall fraction over the budgeted runs (the baseline's seconds are not a share); eta from their pace."""
        parts = [t.progress for t in self.tuners if getattr(t, "budgeted", True)]
        fraction = sum(p.fraction for p in parts) / len(parts)
        elapsed = sum(p.elapsed_s for p in parts)
        eta = elapsed * (1 - fraction) / fraction if 0 < fraction < 1 else (0.0 if fraction >= 1 else None)
        return Progress(fraction=fraction, eta_s=eta, step=self.step, elapsed_s=elapsed)

    @property
    def results(self) -> dict[str, FinetuneResult]:
        """Finished (or stopped) runs' results by name."""
        return {t.name: t.result for t in self.tuners if t.result is not None}

    def stop(self) -> None:
        """Stop the running run at its next step and skip the ones not started."""
        self._stop.set()
        for t in self.tuners:
            t.stop()

    def run(self) -> None:
        """Run each fine-tuning in turn; never raises (a failure sets `error`)."""
        self._started = True
        for tuner in self.tuners:
            if self._stop.is_set():
                break
            tuner.run()
            if tuner.error is not None:
                self.error = f"{tuner.name}: {tuner.error}"
                break


def comparison_config(settings: dict) -> FinetuneConfig:
    """The Fine-tune page's settings (budget, lr, batch, maxlen, seed) as a FinetuneConfig (validated); an optional
    "steps" replaces the time budget (a step budget is the same on a busy machine, for benchmarks and tests)."""
    steps = settings.get("steps")
    return FinetuneConfig(time_budget_s=None if steps else float(settings["budget"]), max_steps=steps or None,
                          learning_rate=settings["lr"],
                          batch_size=settings["batch"], max_length=settings["maxlen"], seed=settings["seed"],
                          device="cpu", eval_points=10)


def build_comparison(data: ClassificationData, model, tokenizer, settings: dict, others=(),
                     baseline: bool = False) -> "FinetuneComparison":
    """The Fine-tune page's runs: split `data`, copy `model` into a classifier ("pretrained") and make its
    from-scratch twin ("scratch"), each for the same time budget; `others` ((name, model, tokenizer) of more
    pretrained models, e.g. a GPT-style one beside a BERT) race from their own weights with the same data, budget
    and seed, and `baseline` adds the bag-of-words line. `settings`: train, val (sizes), seed, budget (s), lr, batch,
    maxlen. Module-level so that it can run in the app's training process."""
    train, val = split_train_val(data, settings["train"], settings["val"], seed=settings["seed"])
    config = comparison_config(settings)
    pre = classifier_from_model(model, data.num_labels, settings["seed"])
    runs = [("pretrained", pre, tokenizer)]
    runs += [(name, classifier_from_model(m, data.num_labels, settings["seed"]), tok) for name, m, tok in others]
    runs.append(("scratch", scratch_twin(pre, data.num_labels, settings["seed"]), tokenizer))
    return FinetuneComparison(runs, train, val, config, baseline=baseline)


def scratch_twin(model, num_labels: int, seed: int = 0):
    """A from-scratch classifier with the same BertConfig as `model`: the baseline of the pretraining lesson."""
    return classifier_from_scratch(model.config, num_labels, seed)


def tokenizer_for_scratch(train: ClassificationData, vocab_size: int = 8000):
    """A WordPiece tokenizer trained on the training texts, for a from-scratch model: no checkpoint lends it one."""
    texts = list(train.texts) + list(train.texts_b or [])
    return train_tokenizer(texts, vocab_size=vocab_size)


def load_task(csv=None, task: str | None = None, text_columns=None, label_column=None, as_pair=False,
              drop_empty=False, seed: int = 0) -> ClassificationData:
    """The labelled data for a run: a CSV file, or the built-in toy topic task when `task == "toy"`."""
    if csv is not None and task is not None:
        raise BertCoreError("give a CSV file or a built-in task, not both")
    if csv is not None:
        return load_classification_csv(csv, text_columns, label_column, as_pair=as_pair, drop_empty=drop_empty)
    if task in (None, "toy"):
        return toy_topic_task(seed)
    raise BertCoreError(f"unknown task {task!r}; the built-in task is 'toy' (or give --csv FILE)")

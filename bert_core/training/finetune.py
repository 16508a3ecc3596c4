"""Fine-tuning BERT: sentence labels, token tags or answer spans, from a pretrained checkpoint or from scratch.

The lesson the app shows: the same architecture, the same data and the same budget, with and without pretraining.
`Finetuner` is the one fine-tuning loop: it asks a task kind (finetune_tasks.FinetuneTask: SentenceLabels,
token_tagging.TokenTags, answer_spans.AnswerSpans) for batches, losses and metrics, and knows nothing else of it.
It is observable and stoppable from another thread like `training.Trainer` and reuses its schedule
(`lr_multiplier`), device choice, precision and AdamW parameter groups; the budget counts training time only, so
the validation passes that draw the accuracy curve do not eat into it.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import math
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from bert_core.data.answer_spans_data import QAData, load_squad, split_by_passage, toy_qa_task
from bert_core.data.classification_data import (
    ClassificationData,
    load_classification_csv,
    split_train_val,
    toy_order_task,
    toy_topic_task,
)
from bert_core.data.task_downloads import TASKS, fetch_task_csv
from bert_core.data.token_tags_data import TaggedSentences, read_conll, split_sentences
from bert_core.errors import BertCoreError
from bert_core.model.bert import BertModel, ModelParts, adamw
from bert_core.model.checkpoint import save_checkpoint
from bert_core.model.files import read_json
from bert_core.model.growth import grown_pretraining_rate
from bert_core.model.hf import load_pretrained
from bert_core.model.tokenization import train_tokenizer
from bert_core.training.answer_spans import AnswerSpans
from bert_core.training.baseline_runs import BagOfWordsClassifier
from bert_core.training.distributed import autocast_for, resolve_device
from bert_core.training.finetune_checkpoint import FinetuneCheckpointing
from bert_core.training.finetune_results import FinetuneEval, FinetuneResult, FinetuneStage, FinetuneStep
from bert_core.training.finetune_settings import BUILT_IN_TASKS, SELECTION_FRACTION, FinetuneConfig
from bert_core.training.finetune_spec import FinetuneSpec, RaceData
from bert_core.training.finetune_tasks import FinetuneTask, SentenceLabels, evaluating, seeded, tokenizer_of
from bert_core.training.optimization import lr_multiplier
from bert_core.training.run_builder import pretraining_rate_of
from bert_core.training.run_loop import Progress, RunLoop
from bert_core.training.token_tagging import TokenTags

RESULT_FILE = "finetune_result.json"


# Each kind's rate against the size rule's (finetune_learning_rate). Answer spans: half: on the toy QA task the
# shipped mini learnt at 2.5e-4 where the rule's 5e-4 did not (docs/benchmarks.md, "Token tags and answer spans").
KIND_RATE_SCALE: dict[str, float] = {"labels": 1.0, "tags": 1.0, "spans": 0.5}


def finetune_learning_rate(config, pretraining_rate: float | None = None, kind: str = "labels") -> float:
    """The peak fine-tuning rate that suits a model, kept within [2e-5, 1e-3], scaled by its `kind` (KIND_RATE_SCALE).

    With the peak rate a checkpoint was pretrained at (pretraining_rate_of; a `grow` folder: its source's), that
    rate x 128 / hidden (muP's rule for Adam: a weight matrix's update falls with its fan-in); measured best for the
    shipped tiny and the grown mini (docs/benchmarks.md, "Fine-tuning the grown mini"). Without it (a Hugging Face
    BERT), 1e-3 x (128 / hidden)^2: 2.8e-5 at BERT-base's 768, inside the paper's 2e-5 to 5e-5, and 2.5e-4 at 256,
    inside the 1e-4 to 3e-4 Turc et al. (2019) found for small BERTs."""
    if kind not in KIND_RATE_SCALE:
        raise BertCoreError(f"unknown kind of task {kind!r}; the kinds are {', '.join(KIND_RATE_SCALE)}")
    if pretraining_rate is not None and math.isfinite(pretraining_rate) and pretraining_rate > 0:
        rate = pretraining_rate * 128 / config.hidden_size
    else:
        rate = 1e-3 * (128 / config.hidden_size) ** 2
    return min(1e-3, max(2e-5, rate)) * KIND_RATE_SCALE[kind]


def checkpoint_pretraining_rate(folder: str | Path) -> float | None:
    """pretraining_rate_of the folder's trainer_state.json, or a `grow` folder's growth.json rate; None when it has
    neither or they cannot be read (the size rule then applies)."""
    path = Path(folder) / "trainer_state.json"
    if not path.is_file():
        return grown_pretraining_rate(folder)
    try:
        return pretraining_rate_of(read_json(path))
    except BertCoreError:
        return None


def classifier_from_checkpoint(folder, num_labels: int, seed: int = 0):
    """(classifier, tokenizer) from a checkpoint folder: its encoder (+ pooler), a fresh seeded head (reading the
    last token for a causal folder)."""
    folder = Path(folder)
    with seeded(seed):
        model = load_pretrained(folder, model_class=SentenceLabels.head, num_labels=num_labels)
    return model, tokenizer_of(folder, model.config)


def set_dropout(model, p: float) -> None:
    """Set every dropout of `model` to `p`, and its config to match (a saved config.json says what it trained with)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p
        elif isinstance(module, (BertModel, ModelParts)):   # the modules that keep the model's config
            module.config = module.config.replace(hidden_dropout_prob=p, attention_probs_dropout_prob=p)


def classifier_from_scratch(config, num_labels: int, seed: int = 0):
    """A seeded, randomly initialised classifier of `config`: the no-pretraining baseline."""
    with seeded(seed):
        return SentenceLabels.head(config, num_labels)


def save_classifier(result: FinetuneResult, folder) -> Path:
    """Write the fine-tuned classifier as a Hugging Face folder (+ tokenizer, label names, finetune_result.json),
    atomically (a failed write leaves what was there whole)."""
    if result.model is None:
        raise BertCoreError("this result holds no model to save")
    return save_checkpoint(folder, result.model, tokenizer=result.tokenizer, label_names=result.label_names or None,
                           extra={RESULT_FILE: result.to_dict()})


def classify_text(model, tokenizer, text: str, text_b: str | None = None, max_length: int = 128) -> list[float]:
    """Class probabilities for one text (or sentence pair), in label-id order."""
    if not text or not text.strip():
        raise BertCoreError("type a sentence to classify")
    enc = tokenizer.encode_pair(text, text_b, max_length)
    device = next(model.parameters()).device
    ids = torch.tensor([enc["input_ids"]], device=device)
    types = torch.tensor([enc["token_type_ids"]], device=device)
    with evaluating(model):
        logits = model(ids, torch.ones_like(ids), types).logits.float()
    return logits.softmax(-1)[0].tolist()


def result_probabilities(result: FinetuneResult, text: str, max_length: int = 128) -> list[float]:
    """Class probabilities for one typed text from any run's result, the bag-of-words baseline's (raw text) too."""
    if result.model is None:
        raise BertCoreError(f"the run {result.name!r} kept no model to classify with")
    if isinstance(result.model, BagOfWordsClassifier):
        if not text or not text.strip():
            raise BertCoreError("type a sentence to classify")
        return result.model.probabilities([text])[0]
    return classify_text(result.model, result.tokenizer, text, max_length=max_length)


class Finetuner(FinetuneCheckpointing, RunLoop):
    """Fine-tunes `model` on one task kind: SentenceLabels over `train` and `val`, or the given `task`, which alone
    knows its batches, losses and figures. Observable and stoppable from any thread (run_loop), run once; a stop
    ends it at the next step with a final validation pass. With `checkpoint_dir` it writes checkpoints a run built
    alike goes on from exactly (finetune_checkpoint)."""

    step_event_type = FinetuneStep
    budgeted = True           # a share of its race's budget (a baseline's seconds are not: baseline_runs.LevelRun)
    times_only_steps = True   # the budget is training time: the validation passes that draw the curve are free
    rerunnable = False
    run_name = "fine-tuning"

    def __init__(self, model, tokenizer, train: ClassificationData | None = None, val: ClassificationData | None = None,
                 config: FinetuneConfig = FinetuneConfig(), name: str = "run",
                 callbacks: Sequence[Callable[[object], None]] = (), *, task: FinetuneTask | None = None):
        if task is None:
            if train is None or val is None:
                raise BertCoreError("fine-tuning needs training and validation data, or a task holding them")
            task = SentenceLabels(train, val)
        elif train is not None or val is not None:
            raise BertCoreError("give the training and validation data or a task holding them, not both")
        self.task = task
        self.selection: FinetuneTask | None = None
        if config.keep_best:
            self.task, self.selection = self.task.hold_back(SELECTION_FRACTION, config.seed)
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
        self.optimizer = self._new_optimizer()
        self.examples_seen = 0
        self.result: FinetuneResult | None = None
        self._batches = None
        self._next_eval = 1
        self._step_seconds: list[float] = []
        self._elapsed_before_step = 0.0
        self._best: tuple[float, int, dict] | None = None  # (selection score, step, the weights on the CPU)
        self._plan = _stage_plan(self.task)
        self.stages: list[FinetuneStage] = []  # as they began
        self._stage_config = self._train_config
        self._stage_origin = (0, 0.0)  # (step, training seconds) where the stage in training began
        self._stage_scores: collections.deque = collections.deque(maxlen=MASTERY_STEPS)  # its last steps' scores

    def run(self) -> FinetuneResult | None:
        """Train until the budget or stop(); never raises: a failure sets `error` and state 'failed'."""
        super().run()
        return self.result

    # ------------------------------------------------------------------ the loop's hooks (run_loop.RunLoop.run)

    def _run_context(self):
        return seeded(self.config.seed)  # dropout masks repeat with the seed; the caller's RNG state comes back

    def _before_loop(self) -> None:
        cfg = self.config
        self.task.prepare(self.tokenizer, cfg.max_length)
        if self.selection is not None:
            self.selection.prepare(self.tokenizer, cfg.max_length)
        self.model.train()
        if self._resumed is not None:
            self._take_up()   # a checkpoint's run: its stage, batches and random state; its first pass was made
            return
        if not self.stages:
            self._enter_stage(0)
        self._evaluate()

    def _new_optimizer(self):
        cfg = self.config
        return adamw(self.model, cfg.learning_rate, cfg.weight_decay, eps=cfg.adam_eps, layer_decay=cfg.layer_decay)

    def _enter_stage(self, index: int) -> None:
        """Train on stage `index` from the next step: its batches, and (after the first) a new optimizer and a
        schedule of its own. A drill's holds the peak rate up to its deadline (wsd: it decays only if the drill
        takes all it may); the task's own data gets the run's schedule over the budget that is left."""
        cfg, drills = self.config, self.task.drills
        self._batches = self._stage_batches(index)
        if not drills:
            self._stage_config = self._train_config
        elif index < len(drills):
            # A drill may run to its deadline, where the shares so far add up: a drill that clicks early passes
            # its rest on to one that needs longer. Its warmup stays the length its own share would give it.
            own, deadline = self._plan[index][1], sum(share for _, share, _ in self._plan[:index + 1])
            steps = seconds = None
            if cfg.max_steps:
                own_steps = max(1, round(own * cfg.max_steps))
                steps = max(own_steps, round(deadline * cfg.max_steps) - self.step)
            if cfg.time_budget_s:
                own_seconds = own * cfg.time_budget_s
                seconds = max(own_seconds, deadline * cfg.time_budget_s - self.elapsed_s)
            warmup = own_steps / steps if steps else own_seconds / seconds
            self._stage_config = dataclasses.replace(
                self._train_config, schedule="wsd", max_steps=steps, time_budget_s=seconds,
                warmup_ratio=self._train_config.warmup_ratio * warmup)
        else:
            self._stage_config = dataclasses.replace(
                self._train_config, max_steps=max(1, cfg.max_steps - self.step) if cfg.max_steps else None,
                time_budget_s=max(cfg.time_budget_s - self.elapsed_s, 1e-3) if cfg.time_budget_s else None)
        self._stage_origin = (self.step, self.elapsed_s)
        if index:
            self.optimizer = self._new_optimizer()
        scores, self._stage_scores = self._stage_scores, collections.deque(maxlen=MASTERY_STEPS)
        event = FinetuneStage(self.step, self.elapsed_s, index, len(self._plan), self._plan[index][0],
                              sum(scores) / len(scores) if scores else None)
        self.stages.append(event)
        for callback in self.callbacks:
            callback(event)

    def _stage_batches(self, index: int):
        cfg = self.config
        return (self.task.drill_batches(index, cfg.batch_size, cfg.seed) if index < len(self.task.drills)
                else self.task.train_batches(cfg.batch_size, cfg.seed))

    def _after_step(self) -> None:
        self._step_seconds.append(self.elapsed_s - self._elapsed_before_step)
        self._elapsed_before_step = self.elapsed_s
        evaluated = False
        if len(self.stages) < len(self._plan) and self._stage_over():
            self._enter_stage(len(self.stages))
            if not self._done():
                self._evaluate()  # the validation figure each stage ends with: a point of the curve
                evaluated = True
        points, done = self.config.eval_points, self._eval_fraction()
        if self._next_eval < points and done >= self._next_eval / points:
            self._next_eval = math.floor(done * points) + 1
            if not self._done() and not evaluated:
                self._evaluate()
        self._checkpoint_if_due()

    def _eval_fraction(self) -> float:
        """How far the run is, for placing its validation passes: by steps when it has a step budget (so a busy
        machine draws the same curve as a quiet one), else by its budget."""
        cfg = self.config
        return self.step / cfg.max_steps if cfg.max_steps else self._fraction_done()

    def _done(self) -> bool:
        if super()._done():
            return True
        # The time budget is a hard limit: a step that would end after it (at the recent pace) is not begun.
        budget, recent = self.config.time_budget_s, self._step_seconds[-5:]
        return bool(budget and recent and self.elapsed_s + sum(recent) / len(recent) > budget)

    def _after_loop(self, final: str) -> None:
        cfg = self.config
        if final == "stopped" and self.checkpointing and self.step > 0:
            self.write_checkpoint()   # before the final pass and the best weights: where a restart goes on from
        best_step = None
        if self.selection is not None:
            self._select()
            best_step = self._best[1]
            if best_step != self.step:
                self.model.load_state_dict(self._best[2])
        ev = self.task.evaluate(self.model, self.device, cfg.eval_batch_size, cfg.num_misclassified)
        self._publish(FinetuneEval(self.step, self.elapsed_s, ev.accuracy, ev.macro_f1, ev.loss))
        self.model.eval()
        self.result = FinetuneResult(
            name=self.name, accuracy=ev.accuracy, macro_f1=ev.macro_f1, loss=ev.loss, confusion=ev.confusion,
            label_names=ev.label_names, evals=self.evals, history=self.history, misclassified=ev.misclassified,
            steps=self.step, train_seconds=self.elapsed_s, state=final, model=self.model, tokenizer=self.tokenizer,
            kind=self.task.kind, metric_names=self.task.metric_names, details=ev.details, best_step=best_step,
            stages=list(self.stages), steps_asked=cfg.max_steps,
        )

    def _after_run(self, final: str) -> None:
        if self.result is not None:
            self.result.state = final

    def _after_divergence(self) -> str:
        # The weights that gave this loss are the previous update's: nothing of this run is worth keeping.
        return "lower it and start again (the checkpoint it started from is unchanged, and nothing was saved)."

    def _train_step(self) -> FinetuneStep | None:
        cfg = self.config
        batch = next(self._batches).to(self.device)
        with autocast_for(self.device, cfg.precision):
            out = self.task.step_loss(self.model, batch)
        out.loss.backward()
        max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))
        loss = out.loss.item()
        if not self._update_is_finite(loss, grad_norm):
            return None
        origin_step, origin_s = self._stage_origin
        lr = cfg.learning_rate * lr_multiplier(self._stage_config, self.step - origin_step,
                                               self._elapsed_now() - origin_s)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)  # layer-wise decay (param_groups); 1 without it
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.examples_seen += out.examples
        score = out.score.item()
        self._stage_scores.append(score)
        return FinetuneStep(self.step, self.examples_seen, lr, loss, score, grad_norm, self._elapsed_now())

    def _evaluate(self) -> None:
        if self.selection is not None:
            self._select()
        ev = self.task.evaluate(self.model, self.device, self.config.eval_batch_size)
        self._publish(FinetuneEval(self.step, self.elapsed_s, ev.accuracy, ev.macro_f1, ev.loss))

    def _select(self) -> None:
        """Keep a copy of this step's weights when they score best so far on the held-back part (a tie: the earlier)."""
        ev = self.selection.evaluate(self.model, self.device, self.config.eval_batch_size)
        score = (ev.accuracy, ev.macro_f1)[self.task.primary]
        if self._best is None or score > self._best[0]:
            weights = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
            self._best = (score, self.step, weights)

    def _stage_over(self) -> bool:
        """Whether the drill in training is learnt (MASTERY_STEPS) or at its deadline (_enter_stage)."""
        stage, (step, seconds) = self._stage_config, self._stage_origin
        if stage.max_steps and self.step - step >= stage.max_steps:
            return True
        if stage.time_budget_s and self._elapsed_now() - seconds >= stage.time_budget_s:
            return True
        mastery = self._plan[len(self.stages) - 1][2]
        scores = self._stage_scores
        return mastery is not None and len(scores) == MASTERY_STEPS and sum(scores) / MASTERY_STEPS >= mastery


# A drill is learnt when the mean training score of its last MASTERY_STEPS steps reaches its `mastery`: long enough
# (6,400 questions at batch 32, most of a drill's 7,500) that a lucky run of batches does not end it.
MASTERY_STEPS = 200


def _stage_plan(task: FinetuneTask) -> list[tuple[str, float, float | None]]:
    """(name, share of the budget, mastery) of each stage of a run on `task`: its drills, then its own data for the
    rest."""
    plan = [(drill.name, float(drill.share), drill.mastery) for drill in task.drills]
    rest = 1.0 - sum(share for _, share, _ in plan)
    if any(not 0 < share < 1 for _, share, _ in plan) or rest <= 0.01:
        raise BertCoreError(f"the drills' shares of the budget ({', '.join(f'{s:g}' for _, s, _ in plan)}) must "
                            "each be above 0 and leave the task itself some of it")
    source = task.train_data.source or "the task"
    return [*plan, (source.removesuffix(" (train)"), rest if plan else 1.0, None)]


def finetune(model, tokenizer, train: ClassificationData | None = None, val: ClassificationData | None = None,
             config: FinetuneConfig = FinetuneConfig(), name: str = "run", callbacks=(), *,
             task: FinetuneTask | None = None) -> FinetuneResult:
    """Finetuner's run in this thread: its result, or BertCoreError."""
    tuner = Finetuner(model, tokenizer, train, val, config, name=name, callbacks=callbacks, task=task)
    result = tuner.run()
    if tuner.error is not None or result is None:
        raise BertCoreError(tuner.error or "fine-tuning produced no result")
    return result


# ---------------------------------------------------------------------------------------------- comparisons


class FinetuneComparison:
    """A race: several fine-tuning runs ("pretrained", models it is compared with, "scratch") with one config, one
    after the other on this thread, on one `task` (each run gets its own copy, encoded with its own tokenizer);
    with `baseline`, the kind's baseline lines first. Observable and stoppable like a Trainer."""

    # What a hosted run holds that a race has none of (the server's run_protocols.LiveView): its models have their
    # own curves and tokenizers (in `tuners`), and a race takes no probe snapshots.
    history, evals, tokenizer, growth, data, probes = (), (), None, None, None, None

    def __init__(self, runs: Sequence[tuple[str, torch.nn.Module, object]], config: FinetuneConfig = FinetuneConfig(),
                 callbacks=(), baseline: bool = False, *, task: FinetuneTask):
        self.task = task
        self.train_data, self.val_data, self.config = self.task.train_data, self.task.val_data, config
        # What the page shows without holding the task (a training process sends these to the server).
        self.task_kind, self.metric_names, self.primary = self.task.kind, self.task.metric_names, self.task.primary
        names = [name for name, _, _ in runs]
        if len(set(names)) != len(names):
            raise BertCoreError(f"two runs of a comparison share a name: {', '.join(names)}")
        self.tuners = [Finetuner(m, tok, config=config, name=name, callbacks=callbacks, task=copy.copy(self.task))
                       for name, m, tok in runs]
        if baseline:
            self.tuners[:0] = self.task.baselines(config.seed, config.num_misclassified, callbacks)
        self.error: str | None = None
        # Called after each model's run ends (finished, stopped or failed): build_race keeps the results so far there.
        self.on_model_end: Callable[[], None] | None = None
        self._stop = threading.Event()
        self._pause = threading.Event()
        self._started = False
        self._running = False

    @property
    def step(self) -> int:
        return sum(t.step for t in self.tuners)

    @property
    def state(self) -> str:
        states = [t.state for t in self.tuners]
        if self.error is not None or "failed" in states:
            return "failed"
        if self._running or "running" in states:
            return "running"
        if all(s == "finished" for s in states):
            return "finished"
        return "stopped" if self._started else "idle"

    @property
    def resumable(self) -> bool:
        """True when it paused between its models (a turn that ended on a shared server): run() goes on with the
        next one. A stop skips the rest for good."""
        return (self._started and not self._running and self.error is None and not self._stop.is_set()
                and any(t.state == "idle" for t in self.tuners))

    @property
    def progress(self) -> Progress:
        """Overall fraction over the budgeted runs (the baseline's seconds are not a share); eta from their pace."""
        parts = [t.progress for t in self.tuners if t.budgeted]
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

    def pause(self) -> None:
        """Return from run() once the model in training has finished (its turn on a shared server is up): a Finetuner
        runs once, so a race yields only between its models, each with its whole budget."""
        self._pause.set()

    def run(self) -> None:
        """Run each model not yet run, in turn, until a stop or a pause; never raises (a failure sets `error`)."""
        if self._stop.is_set():
            return
        self._started, self._running = True, True
        self._pause.clear()
        try:
            for tuner in self.tuners:
                if tuner.state != "idle":
                    continue   # run before a pause
                if self._stop.is_set() or self._pause.is_set():
                    break
                tuner.run()
                if self.on_model_end is not None:
                    self.on_model_end()
                if tuner.error is not None:
                    self.error = f"{tuner.name}: {tuner.error}"
                    break
        finally:
            self._running = False


def split_task(data, train_size: int | None = None, val_size: int | None = None, seed: int = 0,
               pooling: str | None = None) -> FinetuneTask:
    """The task kind of `data` over a seeded train / validation split of it (token tags split by sentence, answer
    spans by passage); `pooling`: the sentence classifiers' reading (None: each model's default)."""
    if isinstance(data, ClassificationData):
        return SentenceLabels(*split_train_val(data, train_size, val_size, seed=seed), pooling=pooling)
    if pooling is not None:
        raise BertCoreError("a pooling choice is for sentence labels; token tags and answer spans read every token")
    if isinstance(data, TaggedSentences):
        return TokenTags(*split_sentences(data, train_size, val_size, seed=seed))
    if isinstance(data, QAData):
        return AnswerSpans(*split_by_passage(data, train_size, val_size, seed=seed), drills=data.drills)
    raise BertCoreError(f"no fine-tuning kind for {type(data).__name__}")


def tokenizer_for_scratch(train, vocab_size: int = 8000):
    """A WordPiece tokenizer trained on the training texts, for a from-scratch model: no checkpoint lends it one."""
    if isinstance(train, TaggedSentences):
        texts = [" ".join(words) for words in train.words]
    elif isinstance(train, QAData):
        texts = sorted({ex.context for ex in train.examples}) + [ex.question for ex in train.examples]
    else:
        texts = list(train.texts) + list(train.texts_b or [])
    return train_tokenizer(texts, vocab_size=vocab_size)


def load_task(source: RaceData | None = None, upload: bytes | None = None, **choice):
    """The data for a run (`source`, or a RaceData of `choice`): a labelled CSV, a CoNLL file, a SQuAD v1.1 file or
    a built-in task (the toy topics when nothing is given). A file with a `name` (an upload, kept as a file) is read
    as its bytes under that name, as the page read it; `upload`: the bytes themselves before they are kept."""
    d = source if source is not None else RaceData(**choice)
    given = [name for name, value in (("a CSV file", d.csv), ("a CoNLL file", d.conll), ("a SQuAD file", d.squad),
                                      ("a built-in task", d.task)) if value is not None]
    if len(given) > 1:
        raise BertCoreError(f"give one source of data, not {' and '.join(given)}")
    if not given or d.task == "toy":
        return toy_topic_task(d.seed)
    if d.task == "toy-order":
        return toy_order_task(d.seed)
    if d.task == "toy-qa":
        return toy_qa_task(d.seed, drills=d.drills)
    if d.task in TASKS:  # a real task: the shared copy, the cache, or fetched from its public home once
        if TASKS[d.task].kind == "tags":
            return read_conll(fetch_task_csv(d.task), d.tag_column)
        return load_classification_csv(fetch_task_csv(d.task), drop_empty=d.drop_empty)
    if d.task is not None:
        raise BertCoreError(f"unknown task {d.task!r}; the tasks are {', '.join([*BUILT_IN_TASKS, *TASKS])} (or give "
                            "--csv, --conll or --squad FILE)")
    path = d.csv or d.conll or d.squad
    # An empty upload is b"", its own bytes: the check that follows says it is empty.
    named = {"name": d.name} if d.name else {}
    source = (upload if upload is not None else Path(path).read_bytes()) if d.name else path
    if d.conll is not None:
        return read_conll(source, d.tag_column, **named)
    if d.squad is not None:
        return load_squad(source, **named)
    columns = list(d.text_columns) if d.text_columns else None
    return load_classification_csv(source, columns, d.label_column, drop_empty=d.drop_empty, as_pair=d.pair, **named)


def race_task(spec: FinetuneSpec, data=None) -> FinetuneTask:
    """A race's task kind over its seeded split (its data read here unless given)."""
    data = load_task(spec.data) if data is None else data
    return split_task(data, spec.train_size, spec.val_size, int(spec.settings.get("seed", 0)), pooling=spec.pooling)

"""A fine-tuning race from its plain-data spec (`bert_core.serve.finetune_runs.FinetuneSpec`): the one builder that
`python -m bert_core finetune` and the Fine-tune page both use, and the race's results kept in a folder (models as
safetensors, curves and figures as JSON; never a pickle) and read back from it after a server restart.

The builder reads the spec's attributes only (its data choice, model folders and settings under FinetuneConfig's
own names), so this wing does not import the server's spec class.

A race with a folder (`spec.keep_in`) keeps there each model as it ends, and the checkpoints of the model in
training (`training/`, finetune_checkpoint: every `spec.checkpoint_every_s` and when it is stopped). Built again over
that folder (a server restart stopped it part-way), it goes on from there: the ended models are kept as they were,
the one that was training goes on from its last checkpoint, the others run; at the same seed the results are those
of the race never interrupted, bit for bit.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from bert_core.data.answer_spans_data import load_squad, toy_qa_task
from bert_core.data.classification_data import load_classification_csv, toy_order_task, toy_topic_task
from bert_core.data.task_downloads import TASKS, fetch_task_csv
from bert_core.data.token_tags_data import read_conll
from bert_core.errors import BertCoreError
from bert_core.model.checkpoint import read_json, replace_folder, save_checkpoint, write_json_atomic
from bert_core.model.config import BertConfig
from bert_core.model.hf import load_pretrained
from bert_core.model.tokenization import BertTokenizer
from bert_core.training.bag_of_words import BAG_OF_WORDS_FILE, BagOfWordsClassifier, load_bag_of_words
from bert_core.training.finetune import (
    FinetuneComparison,
    FinetuneConfig,
    Finetuner,
    split_task,
    tokenizer_for_scratch,
)
from bert_core.training.finetune_checkpoint import checkpoint_of
from bert_core.training.finetune_results import (
    FinetuneEval,
    FinetuneResult,
    FinetuneStage,
    FinetuneStep,
    Misclassified,
)
from bert_core.training.run_loop import Progress

__all__ = ["load_race_data", "race_task", "race_config", "build_race", "keep_race", "KeptRace", "KEPT_FILE",
           "TRAINING", "EndedRun"]

log = logging.getLogger(__name__)
KEPT_FILE = "race.json"
KEPT_FORMAT = 1
TRAINING = "training"   # the kept folder's checkpoint of the model in training (finetune_checkpoint)

# The built-in tasks by the CLI's names (BUILT_IN_TASKS): each a generator of its own seed.
_BUILT_IN = {"toy": toy_topic_task, "toy-order": toy_order_task}


def load_race_data(spec):
    """The spec's data: a built-in task, a shared real task, or a file (an upload kept as a file is read as its
    bytes under its own name, as the page read it)."""
    d = spec.data
    given = [name for name, value in (("a CSV file", d.csv), ("a CoNLL file", d.conll), ("a SQuAD file", d.squad),
                                      ("a built-in task", d.task)) if value is not None]
    if len(given) > 1:
        raise BertCoreError(f"give one source of data, not {' and '.join(given)}")
    if not given:
        return toy_topic_task(d.seed)   # the CLI's default task
    if d.task in _BUILT_IN:
        return _BUILT_IN[d.task](d.seed)
    if d.task == "toy-qa":
        return toy_qa_task(d.seed, drills=d.drills)
    if d.task in TASKS:
        source = fetch_task_csv(d.task)
        if TASKS[d.task].kind == "tags":
            return read_conll(source, d.tag_column)
        return load_classification_csv(source, drop_empty=d.drop_empty)
    if d.task is not None:
        raise BertCoreError(f"unknown task {d.task!r}; the tasks are toy, toy-order, toy-qa, {', '.join(TASKS)}")
    path = d.csv or d.conll or d.squad
    source, named = (Path(path).read_bytes(), {"name": d.name}) if d.name else (path, {})
    if d.conll is not None:
        return read_conll(source, d.tag_column, **named)
    if d.squad is not None:
        return load_squad(source, **named)
    columns = list(d.text_columns) if d.text_columns else None
    return load_classification_csv(source, columns, d.label_column, drop_empty=d.drop_empty, as_pair=d.pair,
                                   **named)


def race_task(spec, data=None):
    """The spec's task kind over its seeded split (data read here unless given)."""
    data = load_race_data(spec) if data is None else data
    return split_task(data, spec.train_size, spec.val_size, int(spec.settings.get("seed", 0)), pooling=spec.pooling)


def race_config(spec, device: str | None = None) -> FinetuneConfig:
    """The spec's settings as a FinetuneConfig; `device`, where the server's queue gave it a slot, overrides the
    spec's own (the CPU when it names none)."""
    settings = {"device": "cpu", **spec.settings}
    if device is not None:
        settings["device"] = device
    return FinetuneConfig(**settings)


def _runs(spec, task, seed: int) -> list[tuple[str, Any, Any]]:
    """(name, model, tokenizer) of each neural run, in the order they race: the checkpoint's model with the task's
    head (or a fresh model of `scratch_preset` with a tokenizer trained on the training texts), each model it is
    compared with, then the from-scratch twin."""
    if spec.checkpoint is None:
        tokenizer = tokenizer_for_scratch(task.train_data)
        config = BertConfig.preset(spec.scratch_preset, vocab_size=tokenizer.vocab_size)
        runs = [("scratch", task.new_head(config, seed), tokenizer)]
    else:
        model, tokenizer = task.head_from_checkpoint(spec.checkpoint, seed)
        runs = [("pretrained", model, tokenizer)]
    runs += [(name, *task.head_from_checkpoint(folder, seed)) for name, folder in spec.compare]
    if spec.checkpoint is not None and spec.scratch:
        runs.append(("scratch", task.new_head(runs[0][1].config, seed), tokenizer))
    return runs


def build_race(spec, device: str | None = None, task=None) -> FinetuneComparison:
    """The race a spec describes, ready to run: the same models, data, settings and seed give the same weights,
    whoever builds it (the CLI, or the page's run in its training process). `task`: the split already made (the
    CLI describes it first). With `spec.keep_in`, the race keeps its results there as each model ends and its
    model in training writes checkpoints there; a race that folder holds part-way goes on from it (_go_on)."""
    task = race_task(spec) if task is None else task
    config = race_config(spec, device)
    race = FinetuneComparison(_runs(spec, task, config.seed), config=config, baseline=spec.baseline, task=task)
    if spec.keep_in:
        folder = Path(spec.keep_in)
        for tuner in race.tuners:
            if isinstance(tuner, Finetuner):
                tuner.checkpoint_dir, tuner.checkpoint_every_s = folder / TRAINING, spec.checkpoint_every_s
        _go_on(race, spec, folder)
        race.on_model_end = lambda r=race: _keep_quietly(r, folder)
    return race


class EndedRun:
    """A model of a race that had ended when the race was cut off, read back from its folder: shaped like a
    Finetuner that has run (name, state, step, evals, stages, result, progress), so a race built again skips it and
    keeps its result, model and curves as they were."""

    error = None

    def __init__(self, view, result: FinetuneResult, budgeted: bool):
        self.name, self.state, self.step = view.name, view.state, view.step
        self.evals, self.stages, self.history = list(view.evals), list(view.stages), list(result.history)
        self.result, self.budgeted, self.callbacks = result, budgeted, []

    @property
    def progress(self) -> Progress:
        return Progress(fraction=1.0, eta_s=0.0, step=self.step, elapsed_s=self.result.train_seconds)

    def run(self) -> FinetuneResult:
        return self.result

    def stop(self) -> None:
        """It has ended."""

    pause = stop


def _go_on(race, spec, folder: Path) -> None:
    """Put a newly built race where its folder left it: each model that had finished as it was kept (its result and
    weights read back), the model whose checkpoint is in `training/` from that checkpoint; the others run as built.
    Nothing to do for a new race (an empty folder)."""
    checkpoint = checkpoint_of(folder / TRAINING)
    if not kept_race_exists(folder) and checkpoint is None:
        return
    kept = KeptRace(spec, folder, "stopped", task=race.task)
    views = {t.name: t for t in kept.tuners if t.state == "finished"}
    for i, tuner in enumerate(race.tuners):
        if tuner.name in views and tuner.name in kept.kept_names:
            race.tuners[i] = EndedRun(views[tuner.name], kept.result_of(tuner.name), getattr(tuner, "budgeted", True))
        elif checkpoint is not None and tuner.name == checkpoint["name"] and isinstance(tuner, Finetuner):
            try:
                tuner.resume_from(folder / TRAINING)
            except BertCoreError as exc:   # a damaged checkpoint costs its steps, not the race
                log.warning("the race's checkpoint of %s cannot be taken up (%s): it trains anew", tuner.name, exc)


def _keep_quietly(race, folder: Path) -> None:
    """keep_race where a failure must not end the race: a full disk costs the restart's copy, not the run."""
    try:
        keep_race(race, folder)
    except (BertCoreError, OSError) as exc:
        log.warning("the race's results could not be kept in its folder (%s)", exc)


# ---------------------------------------------------------------------------------------------- kept results


# A figure that is not a number (a loss or an F1 of nothing: a tagger's first evaluation can give NaN) goes into
# race.json as {"__float__": "nan"}, since JSON has no NaN, and comes back as the float it was.
_FLOAT = "__float__"


def _finite_json(obj):
    """`obj` with each NaN or infinity as {_FLOAT: its repr}, for JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return {_FLOAT: repr(obj)}
    if isinstance(obj, dict):
        return {k: _finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_json(v) for v in obj]
    return obj


def _from_json(obj):
    """What _finite_json wrote, read back."""
    if isinstance(obj, dict):
        if len(obj) == 1 and _FLOAT in obj:
            return float(obj[_FLOAT])
        return {k: _from_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_from_json(v) for v in obj]
    return obj


def _result_json(result: FinetuneResult) -> dict:
    out = result.to_dict(with_history=True)
    out["metric_names"] = list(result.metric_names)
    return out


def keep_race(race, folder: Path) -> Path:
    """Write the race as it stands into `folder`, replacing what was there whole: race.json (its kind, config,
    each model's state and curves, each result's figures) and each ended neural model as a checkpoint folder
    (`models/<i>`, safetensors and its tokenizer); a bag-of-words baseline's fitted model too, as JSON and
    safetensors (bag_of_words.BagOfWordsClassifier.save). A majority-tag baseline keeps its figures only: it
    classifies no typed text. The checkpoint of a model stopped part-way (`training/`) stays: a restart goes on
    from it; that of a model that has finished or failed goes."""
    folder = Path(folder)
    tmp = folder.with_name(f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        results, models = {}, {}
        for i, (name, result) in enumerate(race.results.items()):
            results[name] = _result_json(result)
            if result.tokenizer is not None and result.model is not None:
                save_checkpoint(tmp / "models" / str(i), result.model, tokenizer=result.tokenizer,
                                label_names=result.label_names or None)
                models[name] = f"models/{i}"
            elif isinstance(result.model, BagOfWordsClassifier):
                result.model.save(tmp / "models" / str(i))
                models[name] = f"models/{i}"
        kept = {"format": KEPT_FORMAT, "task_kind": race.task_kind, "metric_names": list(race.metric_names),
                "primary": race.primary, "config": dataclasses.asdict(race.config), "state": race.state,
                "error": race.error, "results": results, "models": models,
                "tuners": [{"name": t.name, "state": t.state, "step": t.step,
                            "evals": [dataclasses.asdict(e) for e in t.evals],
                            "stages": [dataclasses.asdict(s) for s in t.stages]} for t in race.tuners]}
        write_json_atomic(tmp / KEPT_FILE, _finite_json(kept))
        carried = _carry_checkpoint(race, folder, tmp)
        try:
            replace_folder(tmp, folder)
        except BaseException:
            if carried:   # back where it was: the folder as it stood still names it
                os.replace(tmp / TRAINING, folder / TRAINING)
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _carry_checkpoint(race, folder: Path, tmp: Path) -> bool:
    """Move the kept folder's checkpoint of a model stopped part-way (not finished, not failed) into the folder that
    replaces it (True); any other goes with the old folder."""
    checkpoint = checkpoint_of(folder / TRAINING)
    states = {t.name: t.state for t in race.tuners}
    if checkpoint is None or states.get(checkpoint["name"]) not in ("stopped", "running", "idle"):
        return False
    os.replace(folder / TRAINING, tmp / TRAINING)
    return True


@dataclasses.dataclass
class _Tuner:
    """One model of a kept race as the page draws it (the shape of training_child.TunerView)."""

    name: str
    state: str
    step: int
    evals: list
    stages: list


class KeptRace:
    """A race read back from its folder (keep_race): the live view the Fine-tune page draws, with no process. Its
    models are read when first asked for; its data is the spec's, split again (the same seed gives the same split),
    or `task`, the split already made. A race stopped before any model ended holds no tuners and no results."""

    probes = None

    def __init__(self, spec, folder: Path | None, state: str, task=None):
        self.spec, self.folder = spec, folder
        kept = (_from_json(read_json(folder / KEPT_FILE)) if folder is not None and (folder / KEPT_FILE).is_file()
                else {})
        if kept and kept.get("format") != KEPT_FORMAT:
            raise BertCoreError(f"{folder / KEPT_FILE} is of another format")
        self._kept = kept
        self.task_kind = kept.get("task_kind", spec.kind)
        self.metric_names = tuple(kept.get("metric_names", ("accuracy", "macro-F1")))
        self.primary = int(kept.get("primary", 0))
        self.config = FinetuneConfig(**kept["config"]) if kept else race_config(spec)
        self.tuners = [_Tuner(t["name"], t["state"] if t["state"] != "running" else "stopped", int(t["step"]),
                              [FinetuneEval(**e) for e in t["evals"]], [FinetuneStage(**s) for s in t["stages"]])
                       for t in kept.get("tuners", [])]
        self.state = state
        self.error = kept.get("error")
        self._results: dict | None = None
        self._task = task

    @property
    def kept_anything(self) -> bool:
        """True when at least one model's results were kept."""
        return bool(self._kept.get("results"))

    @property
    def step(self) -> int:
        return sum(t.step for t in self.tuners)

    @property
    def progress(self) -> Progress:
        return Progress(fraction=1.0 if self.state == "finished" else 0.0, eta_s=0.0, step=self.step,
                        elapsed_s=sum(t.evals[-1].elapsed_s for t in self.tuners if t.evals))

    def _split(self):
        if self._task is None:
            self._task = race_task(self.spec)
        return self._task

    @property
    def train_data(self):
        return self._split().train_data

    @property
    def val_data(self):
        return self._split().val_data

    @property
    def results(self) -> dict[str, FinetuneResult]:
        """Each kept model's result with its model and tokenizer (read from the folder once)."""
        if self._results is None:
            self._results = {name: self._result(name, r) for name, r in self._kept.get("results", {}).items()}
        return self._results

    @property
    def kept_names(self) -> list[str]:
        """The runs whose results were kept."""
        return list(self._kept.get("results", {}))

    def result_of(self, name: str) -> FinetuneResult:
        """One kept run's result, its model read from the folder (the others' are not read)."""
        if self._results is not None:
            return self._results[name]
        return self._result(name, self._kept["results"][name])

    def _result(self, name: str, r: dict) -> FinetuneResult:
        model = tokenizer = None
        where = self._kept.get("models", {}).get(name)
        if where is not None and (self.folder / where / BAG_OF_WORDS_FILE).is_file():
            model = load_bag_of_words(self.folder / where)   # takes raw text: no tokenizer
        elif where is not None:
            model, tokenizer = self._model(self.folder / where)
        return FinetuneResult(
            name=r["name"], accuracy=r["accuracy"], macro_f1=r["macro_f1"], loss=r["loss"],
            confusion=r["confusion"], label_names=r["label_names"], evals=[FinetuneEval(**e) for e in r["evals"]],
            history=[FinetuneStep(**e) for e in r.get("history", [])],
            misclassified=[Misclassified(**m) for m in r["misclassified"]], steps=r["steps"],
            train_seconds=r["train_seconds"], state=r["state"], model=model, tokenizer=tokenizer, kind=r["kind"],
            metric_names=tuple(r["metric_names"]), details=r["details"], best_step=r["best_step"],
            stages=[FinetuneStage(**s) for s in r["stages"]], steps_asked=r["steps_asked"])

    def _model(self, folder: Path):
        # The kept head's class is the kind's (its task's), read back with its labels.
        head = type(self._split()).head
        model = load_pretrained(folder, model_class=head).eval()
        return model, BertTokenizer.load(folder)

    def stop(self) -> None:
        """Nothing runs."""

    def pause(self) -> None:
        """Nothing runs."""


def kept_race_exists(folder: Path) -> bool:
    """True when a race's results were kept in `folder`."""
    return (Path(folder) / KEPT_FILE).is_file()


def keep_source_model(model, tokenizer, folder: Path) -> str:
    """Write a model that has no folder of its own (one trained in this browser session) where a race reads it
    (its record folder): a race names its model by folder, so that its training process and a restarted server
    find the same weights."""
    return str(save_checkpoint(folder, model, tokenizer=tokenizer))

"""A fine-tuning race kept in a folder and read back from it (after a server restart, or once its models went to
disk): each ended model as a checkpoint folder (safetensors; a bag-of-words baseline as JSON and safetensors), its
curves and figures in race.json; never a pickle. `KeptRace` is the live view the Fine-tune page draws with no process
behind it (bert_core.serve.run_protocols.LiveView)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import uuid
from pathlib import Path
from types import SimpleNamespace

from bert_core.errors import BertCoreError
from bert_core.model.checkpoint import save_checkpoint
from bert_core.model.files import read_json, replace_folder, write_text_atomic
from bert_core.model.hf import load_pretrained
from bert_core.model.tokenization import BertTokenizer
from bert_core.training.bag_of_words import BAG_OF_WORDS_FILE, BagOfWordsClassifier, load_bag_of_words
from bert_core.training.finetune import race_task
from bert_core.training.finetune_settings import FinetuneConfig
from bert_core.training.finetune_checkpoint import checkpoint_of
from bert_core.training.finetune_results import (
    FinetuneEval,
    FinetuneResult,
    FinetuneStage,
    FinetuneStep,
    Misclassified,
)
from bert_core.training.finetune_spec import FinetuneSpec
from bert_core.training.run_loop import Progress

KEPT_FILE = "race.json"
KEPT_FORMAT = 1
TRAINING = "training"   # the kept folder's checkpoint of the model in training (finetune_checkpoint)


def keep_race(race, folder: Path) -> Path:
    """Write the race as it stands into `folder`, replacing what was there whole: race.json (its curves and figures)
    and each ended model that classifies typed text (a neural one, a bag-of-words baseline) under `models/<i>`. The
    checkpoint of a model stopped part-way (`training/`) stays, for a restart to go on from."""
    folder = Path(folder)
    tmp = folder.with_name(f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        results, models = {}, {}
        for i, (name, result) in enumerate(race.results.items()):
            results[name] = result.to_dict(with_history=True)
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
        # A figure of nothing (a tagger's first loss, a baseline's) is NaN: written as Python's json writes and
        # reads it back (only this module reads the file).
        write_text_atomic(tmp / KEPT_FILE, json.dumps(kept, indent=1) + "\n")
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


def _old_nan(obj):
    """`obj` with each figure that is not a number as races kept before 2026-11-29 wrote it ({"__float__": "nan"})
    as that number; Python's JSON writes NaN as itself now. Read both, so that a server brought up to date keeps its
    class's races."""
    if isinstance(obj, dict):
        return float(obj["__float__"]) if obj.keys() == {"__float__"} else {k: _old_nan(v) for k, v in obj.items()}
    return [_old_nan(v) for v in obj] if isinstance(obj, list) else obj


class KeptRace:
    """A race read back from its folder (keep_race): the live view the Fine-tune page draws, with no process. Its
    models are read when first asked for; its data is the spec's, split again (the same seed gives the same split),
    or `task`, the split already made. A race stopped before any model ended holds no tuners and no results."""

    # A race has no curves, tokenizer, growth, data or probes of its own: each of its models has its own.
    history, evals, tokenizer, growth, data, probes = (), (), None, None, None, None

    def __init__(self, spec: FinetuneSpec, folder: Path | None, state: str, task=None):
        self.spec, self.folder = spec, folder
        kept = _old_nan(read_json(folder / KEPT_FILE)) if folder is not None and (folder / KEPT_FILE).is_file() else {}
        if kept and kept.get("format") != KEPT_FORMAT:
            raise BertCoreError(f"{folder / KEPT_FILE} is of another format")
        self._kept = kept
        self.task_kind = kept.get("task_kind", spec.kind)
        self.metric_names = tuple(kept.get("metric_names", ("accuracy", "macro-F1")))
        self.primary = int(kept.get("primary", 0))
        self.config = FinetuneConfig(**(kept["config"] if kept else spec.config_settings()))
        # Each model as the page draws it (the shape of training_child.TunerView).
        self.tuners = [SimpleNamespace(name=t["name"], state=t["state"] if t["state"] != "running" else "stopped",
                                       step=int(t["step"]), evals=[FinetuneEval(**e) for e in t["evals"]],
                                       stages=[FinetuneStage(**s) for s in t["stages"]])
                       for t in kept.get("tuners", [])]
        self.state = state
        self.error = kept.get("error")
        self._results: dict | None = None
        self._task = task

    @property
    def kept_names(self) -> list[str]:
        """The runs whose results were kept."""
        return list(self._kept.get("results", {}))

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
            self._results = {name: self.result_of(name) for name in self.kept_names}
        return self._results

    def result_of(self, name: str) -> FinetuneResult:
        """One kept run's result, its model read from the folder (the others' are not read)."""
        if self._results is not None:
            return self._results[name]
        r, model, tokenizer = self._kept["results"][name], None, None
        where = self._kept.get("models", {}).get(name)
        if where is not None and (self.folder / where / BAG_OF_WORDS_FILE).is_file():
            model = load_bag_of_words(self.folder / where)   # takes raw text: no tokenizer
        elif where is not None:   # the kept head's class is the kind's (its task's), read back with its labels
            model = load_pretrained(self.folder / where, model_class=type(self._split()).head).eval()
            tokenizer = BertTokenizer.load(self.folder / where)
        return FinetuneResult(
            name=r["name"], accuracy=r["accuracy"], macro_f1=r["macro_f1"], loss=r["loss"],
            confusion=r["confusion"], label_names=r["label_names"], evals=[FinetuneEval(**e) for e in r["evals"]],
            history=[FinetuneStep(**e) for e in r.get("history", [])],
            misclassified=[Misclassified(**m) for m in r["misclassified"]], steps=r["steps"],
            train_seconds=r["train_seconds"], state=r["state"], model=model, tokenizer=tokenizer, kind=r["kind"],
            metric_names=tuple(r["metric_names"]), details=r["details"], best_step=r["best_step"],
            stages=[FinetuneStage(**s) for s in r["stages"]], steps_asked=r["steps_asked"])

    def stop(self) -> None:
        """Nothing runs."""

    pause = stop


def kept_race_exists(folder: Path) -> bool:
    """True when a race's results were kept in `folder`."""
    return (Path(folder) / KEPT_FILE).is_file()

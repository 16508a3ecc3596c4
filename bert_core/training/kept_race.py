"""A fine-tuning race kept in a folder and read back from it (after a server restart, or once its models went to
disk): each ended model as a checkpoint folder (safetensors; a bag-of-words baseline as JSON and safetensors), its
curves and figures in race.json; never a pickle. `read_race` makes it the live view the Fine-tune page draws with no
process behind it (race_view.RaceView)."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import uuid
from pathlib import Path

from bert_core.errors import BertCoreError
from bert_core.model.checkpoint import save_checkpoint
from bert_core.model.files import read_json, replace_folder, write_text_atomic
from bert_core.model.hf import load_pretrained
from bert_core.model.tokenization import BertTokenizer
from bert_core.training.baseline_runs import BAG_OF_WORDS_FILE, BagOfWordsClassifier, load_bag_of_words
from bert_core.training.finetune import race_task
from bert_core.training.finetune_settings import FinetuneConfig
from bert_core.training.finetune_checkpoint import checkpoint_of
from bert_core.training.finetune_results import LABEL_METRICS, FinetuneEval, FinetuneResult, FinetuneStage
from bert_core.training.finetune_spec import FinetuneSpec
from bert_core.training.race_view import RaceView, TunerView

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


def read_race(spec: FinetuneSpec, folder: Path | None, state: str, task=None) -> RaceView:
    """A race read back from its folder (keep_race), in `state`, with no process. Its models are read when first
    asked for; its data is the spec's, split again (the same seed gives the same split), or `task`, the split already
    made. A race stopped before any model ended (or with no folder) holds no tuners and no results."""
    kept = _old_nan(read_json(folder / KEPT_FILE)) if folder is not None and (folder / KEPT_FILE).is_file() else {}
    if kept and kept.get("format") != KEPT_FORMAT:
        raise BertCoreError(f"{folder / KEPT_FILE} is of another format")
    the_task = functools.cache(lambda: race_task(spec) if task is None else task)
    tuners = [TunerView(t["name"], t["state"] if t["state"] != "running" else "stopped", int(t["step"]),
                        [FinetuneEval(**e) for e in t["evals"]], [FinetuneStage(**s) for s in t["stages"]])
              for t in kept.get("tuners", [])]
    summary = {"config": FinetuneConfig(**(kept["config"] if kept else spec.config_settings())),
               "task_kind": kept.get("task_kind", spec.kind),
               "metric_names": tuple(kept.get("metric_names", LABEL_METRICS)), "primary": int(kept.get("primary", 0)),
               "state": state, "error": kept.get("error"), "tuners": tuners}
    return RaceView(summary, lambda: (the_task().train_data, the_task().val_data),
                    lambda: {name: _result(kept, folder, name, the_task) for name in kept.get("results", {})})


def _result(kept: dict, folder: Path, name: str, task) -> FinetuneResult:
    """One kept run's result, its model read from the folder (a neural one as its `task()`'s head)."""
    model = tokenizer = None
    where = kept.get("models", {}).get(name)
    if where is not None and (folder / where / BAG_OF_WORDS_FILE).is_file():
        model = load_bag_of_words(folder / where)   # takes raw text: no tokenizer
    elif where is not None:   # read back with its labels
        model = load_pretrained(folder / where, model_class=type(task()).head).eval()
        tokenizer = BertTokenizer.load(folder / where)
    return FinetuneResult.from_dict(kept["results"][name], model=model, tokenizer=tokenizer)


def kept_race_exists(folder: Path) -> bool:
    """True when a race's results were kept in `folder`."""
    return (Path(folder) / KEPT_FILE).is_file()

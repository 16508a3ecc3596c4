"""A fine-tuning race from its plain-data spec (finetune_spec.FinetuneSpec): the one builder that `python -m bert_core
finetune` and the Fine-tune page both use.

A race with a folder (`spec.keep_in`) keeps there each model as it ends (kept_race) and the checkpoints of the model
in training (`training/`). Built again over that folder after a server restart, it goes on from there: at the same
seed the results are those of the race never interrupted, bit for bit.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from bert_core.errors import BertCoreError
from bert_core.model.checkpoint import save_checkpoint
from bert_core.model.config import BertConfig
from bert_core.training.finetune import FinetuneComparison, Finetuner, race_task, tokenizer_for_scratch
from bert_core.training.finetune_settings import FinetuneConfig
from bert_core.training.finetune_checkpoint import checkpoint_of
from bert_core.training.finetune_spec import FinetuneSpec
from bert_core.training.kept_race import TRAINING, keep_race, kept_race_exists, read_race

log = logging.getLogger(__name__)


def _runs(spec: FinetuneSpec, task, seed: int) -> list[tuple[str, Any, Any]]:
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


def build_race(spec: FinetuneSpec, device: str | None = None, task=None) -> FinetuneComparison:
    """The race a spec describes, ready to run: the same models, data, settings and seed give the same weights,
    whoever builds it (the CLI, or the page's run in its training process). `device`: where the server's queue gave
    it a slot. `task`: the split already made (the CLI describes it first). With `spec.keep_in`, the race keeps its
    results there as each model ends and its model in training writes checkpoints there; a race that folder holds
    part-way goes on from it (_go_on)."""
    task = race_task(spec) if task is None else task
    config = FinetuneConfig(**spec.config_settings(device))
    race = FinetuneComparison(_runs(spec, task, config.seed), config=config, baseline=spec.baseline, task=task)
    if spec.keep_in:
        folder = Path(spec.keep_in)
        for tuner in race.tuners:
            if isinstance(tuner, Finetuner):
                tuner.checkpoint_dir, tuner.checkpoint_every_s = folder / TRAINING, spec.checkpoint_every_s
        _go_on(race, spec, folder)
        race.on_model_end = lambda r=race: _keep_quietly(r, folder)
    return race


def _go_on(race: FinetuneComparison, spec: FinetuneSpec, folder: Path) -> None:
    """Put a newly built race where its folder left it: each model that had finished as it was kept (its result and
    weights read back), the model whose checkpoint is in `training/` from that checkpoint; the others run as built.
    Nothing to do for a new race (an empty folder)."""
    checkpoint = checkpoint_of(folder / TRAINING)
    if not kept_race_exists(folder) and checkpoint is None:
        return
    kept = read_race(spec, folder, "stopped", task=race.task)
    ended = {t.name: t for t in kept.tuners if t.state == "finished" and t.name in kept.results}
    for i, tuner in enumerate(race.tuners):
        if tuner.name in ended:   # it stands in for its run, with the result it had (race_view.TunerView)
            race.tuners[i] = dataclasses.replace(ended[tuner.name], result=kept.results[tuner.name],
                                                 budgeted=tuner.budgeted)
        elif checkpoint is not None and tuner.name == checkpoint["name"] and isinstance(tuner, Finetuner):
            try:
                tuner.resume_from(folder / TRAINING)
            except BertCoreError as exc:   # a damaged checkpoint costs its steps, not the race
                log.warning("the race's checkpoint of %s cannot be taken up (%s): it trains anew", tuner.name, exc)


def _keep_quietly(race: FinetuneComparison, folder: Path) -> None:
    """keep_race where a failure must not end the race: a full disk costs the restart's copy, not the run."""
    try:
        keep_race(race, folder)
    except (BertCoreError, OSError) as exc:
        log.warning("the race's results could not be kept in its folder (%s)", exc)


def keep_source_model(model, tokenizer, folder: Path) -> str:
    """Write a model that has no folder of its own (one trained in this browser session) where a race reads it
    (its record folder): a race names its model by folder, so that its training process and a restarted server
    find the same weights."""
    return str(save_checkpoint(folder, model, tokenizer=tokenizer))

"""Checkpoint I/O of a pretraining run, beyond what model.checkpoint writes: what a trainer_state.json must hold to
be resumed from (checked before anything is built or written), and a checkpoint folder read back into a Trainer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from bert_core.errors import BertCoreError
from bert_core.model.checkpoint import TRAINER_STATE, Checkpoint, load_checkpoint, load_optimizer_state
from bert_core.training.pretraining_events import EvalEvent, StepEvent
from bert_core.training.train_config import TrainConfig, is_finite_number, is_whole_number


def _damaged(path, why: str) -> BertCoreError:
    return BertCoreError(f"{path} is damaged: {why}; restore it from a backup, or start a new run from these weights "
                         "with --init-from (the folder was left as it was)")


def check_trainer_state(state, path) -> TrainConfig:
    """Check a trainer_state.json read back from disk: the types and ranges of everything a resume uses, so that a
    damaged or hand-edited file is refused by name before anything is built or written. Returns its TrainConfig."""
    if not isinstance(state, dict):
        raise _damaged(path, "it does not hold a JSON object")
    for key in ("step", "tokens_seen"):
        value = state.get(key, 0)
        if not is_whole_number(value) or value < 0:
            raise _damaged(path, f'"{key}" must be a whole number >= 0, not {value!r}')
    elapsed = state.get("elapsed_s", 0.0)
    if not is_finite_number(elapsed) or elapsed < 0:
        raise _damaged(path, f'"elapsed_s" must be a number of seconds >= 0, not {elapsed!r}')
    if not isinstance(state.get("train_config"), dict):
        raise _damaged(path, '"train_config" is missing or not an object')
    try:
        config = TrainConfig.from_dict(state["train_config"])
    except (BertCoreError, TypeError) as e:
        raise _damaged(path, f'"train_config": {e}') from e
    for key, event_class in (("history", StepEvent), ("evals", EvalEvent)):
        events = state.get(key, [])
        if not isinstance(events, list):
            raise _damaged(path, f'"{key}" must be a list')
        for entry in events:
            try:
                event = event_class(**entry)
            except TypeError as e:
                raise _damaged(path, f'an entry of "{key}" does not fit ({e})') from e
            values = dataclasses.asdict(event)
            step = values.pop("step")
            if not is_whole_number(step) or not all(v is None or is_finite_number(v) for v in values.values()):
                raise _damaged(path, f'an entry of "{key}" holds a value that is not a number: {entry}'[:300])
    for key in ("baselines", "metadata"):
        if not isinstance(state.get(key, {}), dict):
            raise _damaged(path, f'"{key}" must be an object')
    for key in ("data_state", "short_data_state"):
        if state.get(key) is not None and not isinstance(state[key], dict):
            raise _damaged(path, f'"{key}" must be an object')
    growth = state.get("growth")
    if growth is not None and not (isinstance(growth, dict) and isinstance(growth.get("to"), dict)
                                   and (growth.get("grown") is None or isinstance(growth["grown"], dict))):
        raise _damaged(path, '"growth" must record the size the run grows to ("to") and when it grew ("grown")')
    rng = state.get("rng")
    if rng is not None:
        saved = rng.get("torch") if isinstance(rng, dict) else None
        if not (isinstance(saved, list) and len(saved) == torch.get_rng_state().numel()
                and all(is_whole_number(b) and 0 <= b < 256 for b in saved)):
            raise _damaged(path, '"rng" does not hold a torch generator state')
    meta = state.get("metadata", {})
    corpora = meta.get("corpora")
    if corpora is not None and not (isinstance(corpora, list) and corpora and all(isinstance(c, str) for c in corpora)):
        raise _damaged(path, '"metadata.corpora" must be a list of corpus names')
    held = meta.get("heldout")
    if held is not None:
        ok = (isinstance(held, dict) and is_finite_number(held.get("fraction")) and 0 < held["fraction"] < 1
              and is_whole_number(held.get("seed")) and isinstance(held.get("corpora", []), list)
              and all(isinstance(c, dict) for c in held.get("corpora", [])))
        if not ok:
            raise _damaged(path, '"metadata.heldout" must record the held-out split (seed, fraction, corpora)')
    return config


def read_resumable(folder, config_overrides: dict | None = None) -> tuple[Checkpoint, TrainConfig]:
    """The checkpoint in `folder` and the config to go on with (its own, checked, with `config_overrides`); a folder
    without a sound trainer_state.json is refused by name."""
    ckpt = load_checkpoint(folder)
    if ckpt.trainer_state is None:
        raise BertCoreError(f"{folder} has no trainer_state.json, so training cannot resume from it")
    config = check_trainer_state(ckpt.trainer_state, Path(folder) / TRAINER_STATE)
    if config_overrides:
        config = config.replace(**config_overrides)
    return ckpt, config


def restore_resumed(trainer, ckpt: Checkpoint, folder) -> None:
    """Put a new trainer built from `ckpt` where its run stood: optimizer state, counters, history, RNG, data
    position. A state that does not fit is reported as a damaged trainer_state.json."""
    load_optimizer_state(trainer.optimizer, folder)
    try:
        trainer.load_state_dict(ckpt.trainer_state)
    except BertCoreError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError, OverflowError) as e:
        raise _damaged(Path(folder) / TRAINER_STATE, f"{type(e).__name__}: {e}") from e

"""Checkpoint I/O of a pretraining run, beyond what model.checkpoint writes: what a trainer_state.json must hold to
be resumed from (checked before anything is built or written), a checkpoint folder read back into a Trainer, and the
Trainer's own side of it (TrainerCheckpointing: its state as a dict, a save, a resume)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from bert_core.errors import BertCoreError
from bert_core.model.checkpoint import (
    load_checkpoint,
    load_optimizer_state,
    rng_state_from_json,
    rng_state_to_json,
    save_checkpoint,
)
from bert_core.model.config import BertConfig
from bert_core.model.files import TRAINER_STATE
from bert_core.training.pretraining_events import EvalEvent, StepEvent
from bert_core.training.setting import is_finite_number, is_whole_number
from bert_core.training.train_config import TrainConfig

# Logged under the trainer's name: these saves are the Trainer's own, and its log is where they are looked for.
log = logging.getLogger("bert_core.training.trainer")


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


class TrainerCheckpointing:
    """Trainer's checkpoints: the timed and final saves into `checkpoint_dir`, trainer_state.json written and read
    back, and `resume` (a new Trainer where a checkpoint's run stood)."""

    def _checkpoint(self):
        self._last_checkpoint = time.monotonic()
        if self.is_main:
            try:
                self.save(self.checkpoint_dir)
            except BertCoreError as exc:
                if self.checkpoint_failures_fatal:
                    raise
                log.warning("a checkpoint at step %d could not be written: %s", self.step, exc)
                return
        self.last_checkpoint_step = self.step

    def state_dict(self) -> dict:
        """Everything but tensors needed to continue this run exactly (the content of trainer_state.json)."""
        with self._step_lock:
            rng = self.rng.current(running=self._state == "running")
            with self._lock:
                return {
                    "format": 1,
                    "step": self.step,
                    "tokens_seen": self.tokens_seen,
                    "elapsed_s": self._elapsed_now(),
                    "state": self._state,
                    "train_config": self.config.to_dict(),
                    "history": [dataclasses.asdict(e) for e in self._history],
                    "evals": [dataclasses.asdict(e) for e in self._evals],
                    "baselines": self.baselines,
                    **self.batches.state_dict(),  # "data_state", "short_data_state"
                    "rng": rng_state_to_json(rng),
                    "world_size": self.dist.world_size,
                    "metadata": self.metadata,
                    # The size a run that starts small grows to, and when it grew (None: not yet).
                    "growth": ({"to": self.grow_to.to_hf_dict(), "grown": self.growth}
                               if self.grow_to is not None else None),
                }

    def save(self, folder) -> None:
        """Write a checkpoint folder atomically (model, tokenizer, trainer state, optimizer); rank 0 only."""
        if not self.is_main:
            return
        with self._step_lock:
            save_checkpoint(folder, self.model, tokenizer=self.tokenizer, trainer_state=self.state_dict(),
                            optimizer=self.optimizer)

    def load_state_dict(self, state: dict) -> None:
        """Restore counters, history, RNG and data position from a trainer_state.json dict."""
        with self._step_lock, self._lock:
            self.step = int(state["step"])
            self.tokens_seen = int(state.get("tokens_seen", 0))
            self.elapsed_s = float(state.get("elapsed_s", 0.0))
            self._history = [StepEvent(**e) for e in state.get("history", [])]
            self._evals = [EvalEvent(**e) for e in state.get("evals", [])]
            self.baselines = dict(state.get("baselines", {}))
            self.metadata = {**state.get("metadata", {}), **self.metadata}
            if state.get("rng"):
                rng = rng_state_from_json(state["rng"])
                if state.get("world_size", 1) == self.dist.world_size or self.dist.world_size == 1:
                    self.rng.state = rng
            self.batches.load_state_dict(state, self.config)
            if isinstance(state.get("growth"), dict):
                self.growth = state["growth"].get("grown")
            prior = state.get("state", "stopped")
            self._state = "stopped" if prior in ("running", "finished", "failed") else prior
            if self._state == "idle" and self.step > 0:
                self._state = "stopped"

    @classmethod
    def resume(cls, folder, data, eval_data=None, callbacks: Iterable[Callable[[Any], None]] = (), probes=None,
               checkpoint_dir=None, config_overrides: dict | None = None, metadata: dict | None = None):
        """Rebuild a trainer from a checkpoint folder: weights, optimizer, RNG, history and data position. `data`
        must be built from the same corpus and tokenizer as the original run; `config_overrides` may extend the run.
        A folder without a sound trainer_state.json is refused by name."""
        ckpt = load_checkpoint(folder)
        if ckpt.trainer_state is None:
            raise BertCoreError(f"{folder} has no trainer_state.json, so training cannot resume from it")
        config = check_trainer_state(ckpt.trainer_state, Path(folder) / TRAINER_STATE)
        if config_overrides:
            config = config.replace(**config_overrides)
        growth = ckpt.trainer_state.get("growth")
        grow_to = BertConfig.from_hf_dict(growth["to"]) if isinstance(growth, dict) else None
        trainer = cls(ckpt.model, ckpt.tokenizer, data, config, eval_data=eval_data, callbacks=list(callbacks),
                      probes=probes, checkpoint_dir=checkpoint_dir, metadata=metadata, grow_to=grow_to)
        load_optimizer_state(trainer.optimizer, folder)
        try:
            trainer.load_state_dict(ckpt.trainer_state)
        except BertCoreError:   # a ValueError, and already in words
            raise
        except (KeyError, TypeError, ValueError, RuntimeError, OverflowError) as e:   # a state that does not fit
            raise _damaged(Path(folder) / TRAINER_STATE, f"{type(e).__name__}: {e}") from e
        same = checkpoint_dir is not None and Path(checkpoint_dir).resolve() == Path(folder).resolve()
        trainer.last_checkpoint_step = trainer.step if same else None
        return trainer

"""A fine-tuning run's checkpoints (finetune.Finetuner's side), so that a run cut off part-way (a server restart, a
killed training process) goes on from its last checkpoint to the very weights of the run never interrupted.

A checkpoint is a folder as model.checkpoint writes it (safetensors and JSON, never a pickle): the model, its
tokenizer, the optimizer's state, and in trainer_state.json all else the loop carries from step to step. The batches
are not stored: a stage's batches are an endless seeded sequence, taken up again after those its stage has used.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import torch

from bert_core.errors import BertCoreError
from bert_core.model.checkpoint import load_optimizer_state, rng_state_from_json, rng_state_to_json, save_checkpoint
from bert_core.model.files import TRAINER_STATE, read_json
from bert_core.model.hf import TIED_KEYS, read_state_dict
from bert_core.training.finetune_results import FinetuneEval, FinetuneStage, FinetuneStep
from bert_core.training.train_config import TrainConfig

log = logging.getLogger(__name__)
STATE_FORMAT = 1   # trainer_state.json of a fine-tuning checkpoint ("kind": "finetune")


def checkpoint_of(folder: str | Path) -> dict | None:
    """The trainer_state.json of the fine-tuning checkpoint in `folder` (its "name" and "step" say whose and how
    far), or None when there is none, or it is not one."""
    path = Path(folder) / TRAINER_STATE
    if not path.is_file() or not (Path(folder) / "model.safetensors").is_file():
        return None
    try:
        state = read_json(path)
    except BertCoreError:
        return None
    ok = isinstance(state, dict) and state.get("kind") == "finetune" and state.get("format") == STATE_FORMAT
    return state if ok else None


class FinetuneCheckpointing:
    """Finetuner's checkpoints into `checkpoint_dir`: one every `checkpoint_every_s` seconds and one at a stop, each
    replacing the last. A run that keeps its best step's weights (keep_best) writes none: those weights would have to
    go too, and no race asks for them (the page never sets it), so such a run is trained anew after a restart."""

    checkpoint_dir: Path | None = None
    checkpoint_every_s: float = 60.0
    _resumed: dict | None = None          # the state of the checkpoint run() goes on from, until it does
    _last_checkpoint: float | None = None

    @property
    def checkpointing(self) -> bool:
        return self.checkpoint_dir is not None and not self.config.keep_best

    def _checkpoint_if_due(self) -> None:
        """At the end of a step: write a checkpoint when `checkpoint_every_s` has passed since the last one (or
        since the first step)."""
        if not self.checkpointing:
            return
        now = time.monotonic()
        if self._last_checkpoint is None:
            self._last_checkpoint = now
        if now - self._last_checkpoint >= self.checkpoint_every_s:
            self.write_checkpoint()

    def write_checkpoint(self) -> None:
        """Write the run as it stands (between two steps) into `checkpoint_dir`, atomically. A failure (a full disk)
        is logged: it costs the safety net, never the run."""
        self._last_checkpoint = time.monotonic()
        cuda = torch.cuda.get_rng_state_all() if self.device.type == "cuda" else None
        state = {   # everything but tensors that the next step depends on
            "kind": "finetune", "format": STATE_FORMAT, "name": self.name, "step": self.step,
            "examples_seen": self.examples_seen, "elapsed_s": self.elapsed_s,
            "history": [dataclasses.asdict(e) for e in self.history],
            "evals": [dataclasses.asdict(e) for e in self.evals],
            "stages": [dataclasses.asdict(s) for s in self.stages],
            "stage_config": self._stage_config.to_dict(), "stage_origin": list(self._stage_origin),
            "stage_scores": list(self._stage_scores), "step_seconds": self._step_seconds[-5:],
            "next_eval": self._next_eval,
            "rng": rng_state_to_json({"torch": torch.get_rng_state(), "cuda": cuda}),
        }
        try:
            save_checkpoint(self.checkpoint_dir, self.model, tokenizer=self.tokenizer, trainer_state=state,
                            optimizer=self.optimizer, label_names=self.task.label_names)
        except BertCoreError as exc:
            log.warning("%s: a checkpoint at step %d could not be written: %s", self.name, self.step, exc)

    def resume_from(self, folder: str | Path) -> None:
        """Put this run (built as the checkpoint's run was) where the checkpoint in `folder` left it; run() then goes
        on from its step, with no validation pass before it (the run had made that one). A checkpoint that does not
        fit is refused (BertCoreError) before the model is touched."""
        state = checkpoint_of(folder)
        if state is None or state.get("name") != self.name or self.state != "idle":
            raise BertCoreError(f"{folder} holds no checkpoint of the run {self.name!r} to go on from")
        try:
            weights, own = read_state_dict(folder), self.model.state_dict()
            if set(weights) - set(own) or set(own) - set(weights) - set(TIED_KEYS) or any(
                    v.shape != own[k].shape for k, v in weights.items()):
                raise BertCoreError(f"the weights in {folder} are not those of the run {self.name!r}")
            history, evals = [FinetuneStep(**e) for e in state["history"]], [FinetuneEval(**e) for e in state["evals"]]
            stages = [FinetuneStage(**s) for s in state["stages"]]
            stage_config = TrainConfig.from_dict(state["stage_config"])
            origin = (int(state["stage_origin"][0]), float(state["stage_origin"][1]))
            scores, seconds = [float(s) for s in state["stage_scores"]], [float(s) for s in state["step_seconds"]]
            counts = int(state["step"]), int(state["examples_seen"]), float(state["elapsed_s"]), int(state["next_eval"])
            rng_state_from_json(state["rng"])   # checked now, set when the run starts (inside its seeded context)
            load_optimizer_state(self.optimizer, folder)   # checks its files before it changes the optimizer
        except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as exc:
            raise BertCoreError(f"the checkpoint in {folder} is damaged ({type(exc).__name__}: {exc})") from exc
        self.model.load_state_dict(weights, strict=False)   # the tied weights share their embeddings' storage
        with self._lock:
            self.step, self.examples_seen, self.elapsed_s, self._next_eval = counts
            self._elapsed_before_step = self.elapsed_s
            self._history, self._evals = history, evals
        self.stages, self._stage_config, self._stage_origin = stages, stage_config, origin
        self._stage_scores.extend(scores)
        self._step_seconds = seconds
        self._resumed = state

    def _take_up(self) -> None:
        """At the start of a resumed run (in its seeded context): the stage's batches after those it has used, and
        the random state of the checkpoint."""
        state, self._resumed = self._resumed, None
        self._batches = self._stage_batches(len(self.stages) - 1)
        for _ in range(self.step - self._stage_origin[0]):
            next(self._batches)
        rng = rng_state_from_json(state["rng"])
        torch.set_rng_state(rng["torch"])
        if rng.get("cuda") and self.device.type == "cuda":
            torch.cuda.set_rng_state_all(rng["cuda"])

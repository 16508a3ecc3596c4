"""The model of a run trained in a child process, as the server reaches it: weight copies fetched from the child,
saves made by it, and the release of an ended run's process into a folder, which then serves saves, downloads and
inspection. Torch-free at import."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from bert_core.errors import BertCoreError
from bert_core.inspect.probes import ProbeStore
from bert_core.inspect.word_class_timelapse import has_word_classes
from bert_core.model.files import TRAINER_STATE, copy_checkpoint, is_whole_checkpoint, read_json
from bert_core.model.tokenization import BertTokenizer
from bert_core.serve.model_sources import load_folder
from bert_core.serve.train_spec import run_plan
from bert_core.serve.training_link import REPLY_TIMEOUT_S
from bert_core.training.race_view import RaceView


class ProcessModel:
    """ProcessTrainingJob's model (its `_child`, `released`, `_release_lock`, `_snapshot` and `_kept`)."""

    @property
    def model_available(self) -> bool:
        if self.trainer is None:
            return False
        if self.released is not None:
            return (self.released / "config.json").is_file()
        return self._child.alive()

    @property
    def kept_step(self) -> int | None:
        """The step of the model this run still has, live or released; None when it has none."""
        if not self.model_available:
            return None
        if self.released is not None:
            # Its folder does not change once released: read its step once, not at every page draw.
            if self._kept is None or self._kept[0] != self.released:
                self._kept = (self.released, self._checkpoint_step(self.released))
            return self._kept[1] if self._kept[1] >= 0 else None
        return self.trainer.step

    def lost_message(self) -> str:
        why = self.ended_note or self.error or "it was ended"
        return (f"This run's model is lost: its training process ended ({why}) before its weights were written to "
                "disk. Its curves are still here; start a new run to get a model.")

    # -------------------------------------------------------------- the model and its checkpoint

    def model_snapshot(self):
        """An eval-mode copy of the model, from the child, or after `release` from the released folder."""
        if self.trainer is None:
            return None
        return self._shared_copy(self._take_copy)

    def _take_copy(self):
        with self._release_lock:   # not while the process is being ended
            if self.released is not None or not self._child.alive():
                if self._snapshot is None and self.released is not None:
                    self._snapshot = self._released_model()
                return self._snapshot[1] if self._snapshot is not None else None
            step, blob = self._child.request("weights")
        # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
        from bert_core.model.hf import pretraining_model_from_bytes

        model = pretraining_model_from_bytes(self.trainer.model_config, blob)
        model.eval()
        self._keep_snapshot(step, model)
        return model

    def _released_folder(self) -> Path:
        if self.released is None or not (self.released / "config.json").is_file():
            raise BertCoreError("this run's checkpoint is no longer on the server (its scratch space was "
                                "reclaimed); start a new run")
        return self.released

    def _released_model(self) -> tuple[int, Any]:
        model, _, state = load_folder(self._released_folder())
        return int((state or {}).get("step", self.trainer.step)), model.eval()

    def save(self, folder: str | Path) -> Path:
        """Have the child write the checkpoint folder; after `release`, copy the released folder."""
        self._check_saveable()
        folder = Path(folder).expanduser().resolve()
        with self._release_lock:
            if self.released is not None:
                copy_checkpoint(self._released_folder(), folder)
                return folder
            if not self._child.alive():
                raise BertCoreError(self.lost_message())
            self._child.request("save", str(folder))
        return folder

    def step_once(self):
        """One more update of a stopped run, made by its process, for *Step once*."""
        with self._release_lock:
            if self.trainer is None or self.phase != "stopped":
                raise BertCoreError("Step once takes the next update of a stopped run: stop the run first")
            if self.released is not None or not self._child.alive():
                raise BertCoreError("this run's training process has ended (its model is kept in a folder): "
                                    "press Resume to bring it back, then Stop, then Step once")
            return self._child.request("step")

    def release(self, folder: str | Path) -> None:
        """Write the checkpoint to `folder` and end the child: an ended run costs a folder, not a process."""
        with self._release_lock:
            if isinstance(self.trainer, RaceView):
                self.close()   # a fine-tuning race's results, models included, are in the server already
                return
            if self.busy:  # still finishing its step (a loaded machine): let it stop, or its checkpoint is lost
                self.stop(wait=REPLY_TIMEOUT_S)
            folder = Path(folder).expanduser().resolve()
            if self.trainer is not None and self._child.alive() and not self.busy:
                self._child.request("save", str(folder))
                self.released = folder
                self._snapshot = None   # read back from the folder when someone looks (bounded memory per run)
            elif self.trainer is not None and 0 < self._checkpoint_step(folder) >= (self.snapshot_step or 0):
                # The process died, but a checkpoint it wrote on its way (bert_core.serve.run_records) is there and
                # no newer copy is: the run keeps the model of that step, labelled with it. Not one of step 0: the
                # weights before the first update are untrained, and offering to train on from them offers nothing.
                self.released, self._snapshot = folder, None
            self.close()

    def park(self, folder: str | Path, device: str | None) -> bool:
        """Free a stopped run's device (its CUDA context), resumable: its whole checkpoint goes to `folder` and its
        process ends; start() goes on from there exactly (`resumed_trainer`). False when it was not parked."""
        with self._release_lock:
            if (self.phase != "stopped" or self.busy or not self._child.alive() or self.trainer is None
                    or isinstance(self.trainer, RaceView)):
                return False
            folder = Path(folder).expanduser().resolve()
            self._child.request("save", str(folder))
            self.released, self._snapshot = folder, None   # saves, downloads and inspection read the folder meanwhile
            self.parked, self._parked_on, self._resume_device = folder, device, None
            process = self.process
            self.close()
            with self._changed:   # its pump has said its last: nothing of it can reach the next process's run
                self._changed.wait_for(lambda: self._exited is process, timeout=REPLY_TIMEOUT_S)
        return True

    def resume_on(self, device: str | None) -> None:
        """The queue's device for a parked run's next process (another than its own when its GPU failed)."""
        if self.parked is not None:
            self._resume_device = None if device == self._parked_on else device

    def _parked_builder(self):
        return partial(resumed_trainer, self.spec, str(self.parked), self._resume_device)

    @staticmethod
    def _checkpoint_step(folder: Path) -> int:
        try:
            if is_whole_checkpoint(folder):
                return int(json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))["step"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return -1


def resumed_trainer(spec, folder: str, device: str | None = None):
    """A parked run's Trainer in its new process: its first build's corpus and split, its recorded probes, then
    `Trainer.resume` from `folder` (where it keeps writing its checkpoints); `device`: None for the checkpoint's."""
    # Imported here, not at the top: they load torch, and the server imports this module without it (TORCH_FREE).
    from bert_core.training import run_builder
    from bert_core.training.trainer import Trainer

    plan = run_plan(spec, tokenizer=BertTokenizer.load(folder))
    data = run_builder.load_data(plan)
    recorded = (read_json(Path(folder) / TRAINER_STATE).get("metadata") or {}).get("probes")
    probes = (ProbeStore(recorded["sentences"], recorded["attention_sentence"],
                         word_classes=has_word_classes(spec.corpus)) if spec.probes and recorded else None)
    return Trainer.resume(folder, data.train, eval_data=data.eval, probes=probes, checkpoint_dir=folder,
                          config_overrides={"device": device} if device else None)

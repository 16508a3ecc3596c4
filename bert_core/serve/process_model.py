"""The model of a run trained in a child process, as the server reaches it (training_process.ProcessTrainingJob):
weight copies fetched from the child, saves made by it, and the release of an ended run's process into a checkpoint
folder, after which the folder serves saves, downloads and inspection. Whether the model is still there, and what the
pages say when it is not. Torch-free at import."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from bert_core.errors import BertCoreError
from bert_core.inspect.probes import ProbeStore
from bert_core.model.files import TRAINER_STATE, copy_checkpoint, is_whole_checkpoint, read_json
from bert_core.model.tokenization import BertTokenizer
from bert_core.serve.model_sources import load_folder
from bert_core.serve.train_spec import run_plan
from bert_core.serve.training_link import REPLY_TIMEOUT_S
from bert_core.serve.training_mirrors import ComparisonProxy


class ProcessModel:
    """ProcessTrainingJob's model: `_child` (its training_link.ChildLink), `released` (the folder its process was
    ended into), `_release_lock` (a save waits for a release under way), `_snapshot` and `_kept` (caches)."""

    @property
    def model_available(self) -> bool:
        """True while the run's weights can be read: from its process, or from the folder it was released to."""
        if self.trainer is None:
            return False
        if self.released is not None:
            return (self.released / "config.json").is_file()
        return self._child.alive()

    @property
    def kept_step(self) -> int | None:
        """The step of the model this run still has: the live one's, or that of the checkpoint it was released to
        (after a failure, the last one its process wrote); None when it has none."""
        if not self.model_available:
            return None
        if self.released is not None:
            # Its folder does not change once released: read its step once, not at every page draw.
            if self._kept is None or self._kept[0] != self.released:
                self._kept = (self.released, self._checkpoint_step(self.released))
            return self._kept[1] if self._kept[1] >= 0 else None
        return self.trainer.step

    def lost_message(self) -> str:
        """What the pages say when the run's weights are gone: the process ended before they reached a folder."""
        why = self.ended_note or self.error or "it was ended"
        return (f"This run's model is lost: its training process ended ({why}) before its weights were written to "
                "disk. Its curves are still here; start a new run to get a model.")

    # -------------------------------------------------------------- the model and its checkpoint

    def model_snapshot(self):
        """An eval-mode copy of the model being trained (weights copied from the child), refreshed when the step
        changes; after `release`, the model read back from the released folder."""
        if self.trainer is None:
            return None
        if self._snapshot_serves(self.trainer.step):
            return self._snapshot[1]
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
        """(the step its folder's checkpoint was written at, the model read from it)."""
        model, _, state = load_folder(self._released_folder())
        return int((state or {}).get("step", self.trainer.step)), model.eval()

    def save(self, folder: str | Path) -> Path:
        """Have the child write the run's checkpoint folder (model, tokenizer, trainer state, optimizer); after
        `release`, copy the released folder."""
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
        """One more update of a stopped run, made by its process and recorded for *Step once*
        (bert_core.inspect.training_step); Resume goes on from it as the run would have."""
        with self._release_lock:
            if self.trainer is None or self.phase != "stopped":
                raise BertCoreError("Step once takes the next update of a stopped run: stop the run first")
            if self.released is not None or not self._child.alive():
                raise BertCoreError("this run's training process has ended (its model is kept in a folder): "
                                    "press Resume to bring it back, then Stop, then Step once")
            return self._child.request("step")

    def release(self, folder: str | Path) -> None:
        """Write the checkpoint to `folder` and end the child process: an ended run then costs the server a folder
        on disk, not a process. Saving, downloading and inspecting it read the folder afterwards."""
        with self._release_lock:
            if isinstance(self.trainer, ComparisonProxy):
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
        """Free the device of a stopped run and keep it resumable (a run on a GPU: its process holds a CUDA context
        of 0.8-1.1 GB for as long as it lives). Its whole checkpoint (weights, optimizer, RNG, data position) goes
        to `folder` and its process ends; start() then builds it again from there (`resumed_trainer`) and it goes on
        exactly as if it had never stopped. `device`: the queue's device it trained on. False when it was not
        parked (not stopped, or its process is gone)."""
        with self._release_lock:
            if (self.phase != "stopped" or self.busy or not self._child.alive() or self.trainer is None
                    or isinstance(self.trainer, ComparisonProxy)):
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
        """The queue's device for a parked run's next process: its own keeps the device its checkpoint records;
        another (its GPU failed) moves it there."""
        if self.parked is not None:
            self._resume_device = None if device == self._parked_on else device

    def _parked_builder(self):
        """The builder of a parked run's new process: its trainer where its checkpoint left it."""
        return partial(resumed_trainer, self.spec, str(self.parked), self._resume_device)

    @staticmethod
    def _checkpoint_step(folder: Path) -> int:
        """The step of the whole checkpoint in `folder`; -1 when there is none."""
        try:
            if is_whole_checkpoint(folder):
                return int(json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))["step"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return -1


def resumed_trainer(spec, folder: str, device: str | None = None):
    """A parked run's Trainer, built in its new process from the checkpoint its last one wrote to `folder`: the same
    corpus and held-out split as its first build (train_spec.build_trainer), the probe sentences its trainer_state.json
    records, then `Trainer.resume`, which puts weights, optimizer, RNG and data position back exactly. It keeps
    writing its safety-net checkpoints to `folder`. `device`: where it trains now when that is not where it trained
    (None: the checkpoint's own)."""
    # Imported here, not at the top: they load torch, and the server imports this module without it (TORCH_FREE).
    from bert_core.training import run_builder
    from bert_core.training.trainer import Trainer

    plan = run_plan(spec, tokenizer=BertTokenizer.load(folder))
    data = run_builder.load_data(plan)
    recorded = (read_json(Path(folder) / TRAINER_STATE).get("metadata") or {}).get("probes")
    probes = ProbeStore(recorded["sentences"], recorded["attention_sentence"]) if spec.probes and recorded else None
    return Trainer.resume(folder, data.train, eval_data=data.eval, probes=probes, checkpoint_dir=folder,
                          config_overrides={"device": device} if device else None)

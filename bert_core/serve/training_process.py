"""A pretraining run or fine-tuning race in a child process, steered and observed from the Streamlit server.

Why a process and not a thread: a training step of a small BERT is hundreds of short torch calls, each needing
Python's GIL between them. In the server's process the trainer thread shares that GIL with Streamlit's event loop
and the live charts' redraws, and lost 16% of its speed per step and a third over a whole run (measured in
`docs/benchmarks.md`). In its own process it shares nothing but the cores.

`ProcessTrainingJob` holds the job's state and talks to the child through a `training_child.ChildLink`; its model
(`ProcessModel`) is fetched from the child, or read from the folder an ended run's process was released into; its
live view is a mirror fed by the pump (`training_mirrors`). The child is never a fork of the server, so it inherits
none of its threads: a fork of the warm launcher (`launcher`) on Linux, else a fresh interpreter running this
module's `__main__` block. Pickled objects travel over two private pipes between our own two processes (nothing is
unpickled from a file); weights as safetensors bytes. Torch-free at import.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

from bert_core.errors import BertCoreError
from bert_core.inspect.probes import ProbeStore
from bert_core.inspect.word_class_timelapse import has_word_classes
from bert_core.model.files import TRAINER_STATE, copy_checkpoint, is_whole_checkpoint, read_json
from bert_core.model.tokenization import BertTokenizer
from bert_core.serve.job_base import JobBase
from bert_core.serve.model_sources import load_folder
from bert_core.serve.run_records import checkpoint_step
from bert_core.serve.train_spec import run_plan
from bert_core.serve.training_child import REPLY_TIMEOUT_S, ChildLink, run_on_fds
from bert_core.serve.training_mirrors import TrainerProxy, restored_trainer
from bert_core.training.race_view import RaceView
from bert_core.training.train_config import TrainConfig

log = logging.getLogger("bert_core.app")


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
                self._kept = (self.released, checkpoint_step(self.released))
            return self._kept[1] if self._kept[1] >= 0 else None
        return self.trainer.step

    def lost_message(self) -> str:
        why = self.ended_note or self.error or "it was ended"
        return (f"This run's model is lost: its training process ended ({why}) before its weights were written to "
                "disk. Its curves are still here; start a new run to get a model.")

    def _take_copy(self):
        """A copy from the child, or after `release` from the released folder."""
        with self._release_lock:   # not while the process is being ended
            if self.released is not None or not self._child.alive():
                if self._snapshot is None and self.released is not None:
                    model, _, state = load_folder(self._released_folder())
                    self._snapshot = int((state or {}).get("step", self.trainer.step)), model.eval()
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
            elif self.trainer is not None and 0 < checkpoint_step(folder) >= (self.snapshot_step or 0):
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


class ProcessTrainingJob(ProcessModel, JobBase):
    """`builder`, picklable, returns the Trainer (or FinetuneComparison) in the child; `data_factory(tokenizer)`,
    run here on demand, rebuilds the training data for the pages that show it."""

    def __init__(self, session_id: str, builder: Callable[[], Any], spec: Any = None, threads: int = 1,
                 data_factory: Callable[[Any], Any] | None = None):
        super().__init__(session_id, spec, builder)
        self._data_factory = data_factory
        self.trainer: TrainerProxy | RaceView | None = None
        self._changed = threading.Condition()
        self._child = ChildLink(session_id, threads, self._changed, self._handle, self._child_gone)
        self._closing = False
        self.released: Path | None = None   # where the checkpoint went when the process was ended (release)
        self._release_lock = threading.Lock()  # a save waits for a release under way, then copies its folder
        self._killed: tuple[str, str] | None = None   # (why, phase) when the server ended the process itself
        self.ended_note: str | None = None  # why the process ended when the server ended it (a hung run, a Stop)
        self._kept: tuple[Path, int] | None = None   # (released folder, the step of its checkpoint), read once
        self.parked: Path | None = None   # a stopped run whose process ended to free its GPU: start() resumes it
        self._parked_on: str | None = None   # the queue's device it trained on before it was parked
        self._resume_device: str | None = None   # where it goes on when its own device can no longer take it
        self._exited: subprocess.Popen | None = None   # the last process whose end the pump has reported

    @classmethod
    def restored(cls, session_id: str, folder: Path, spec: Any, phase: str, note: str | None = None,
                 probes: dict | None = None, data_factory: Callable[[Any], Any] | None = None):
        """A run of an earlier server process read back from its checkpoint folder (run_records), no process. A
        stopped one comes back parked: Resume goes on exactly from its whole checkpoint, as a parked run does."""
        job = cls(session_id, builder=None, spec=spec, data_factory=data_factory)
        job.trainer = restored_trainer(folder, probes, data_factory)
        job.trainer.state = phase
        job.phase, job.released, job.ended_note = phase, Path(folder).resolve(), note
        if phase == "stopped" and is_whole_checkpoint(folder):
            job.parked = job.released   # on the device the queue gives it (ProcessModel.resume_on)
        return job

    # -------------------------------------------------------------- lifecycle

    @property
    def process(self) -> subprocess.Popen | None:
        return self._child.process

    @property
    def busy(self) -> bool:
        return self.phase in ("preparing", "running") and self._child.alive()

    def start(self) -> None:
        """Spawn the child (a first start, or a parked run's resume) or tell it to continue."""
        if self.busy:
            raise BertCoreError("this training is already running")
        if self.error and self.phase == "failed" and self.trainer is not None and self.trainer.state == "failed":
            raise BertCoreError(f"this run failed ({self.error}); press Reset and start a new one")
        with self._release_lock:   # not while park() is ending the process
            spawn = not self._child.alive()
            if spawn and self.trainer is not None and self.parked is None:
                raise BertCoreError("the training process has ended; press Reset and start a new run")
            # Alive from here ('starting'): the scheduler must not read the run as ended and give its slot away.
            if spawn:
                self._child.starting = True
        if spawn:
            self._spawn(self._builder if self.parked is None else self._parked_builder())
            return
        self.error = None
        self._set_phase("running")
        if self.trainer is not None:
            self.trainer.state = "running"
        self._child.send(("run", None))

    def _spawn(self, builder) -> None:
        self.error, self._closing, self._killed = None, False, None
        # 'preparing' before the process exists, and busy while the launcher forks it on a thread of its own: the
        # fork can wait for the launcher's imports (up to START_TIMEOUT_S on a loaded server), and neither the page
        # whose Start gave the run its slot nor the scheduler's pass waits with it. The busy line says "preparing".
        self._set_phase("preparing")
        threading.Thread(target=self._fork, args=(builder,), name=f"bert-fork-{self.session_id[:6]}",
                         daemon=True).start()

    def _fork(self, builder) -> None:
        try:
            self._child.spawn(builder)
        except Exception as exc:  # noqa: BLE001 - the run's page says why it did not start
            self._child.starting = False
            self._not_started(exc)
            return
        self._child.start_pump()

    def _not_started(self, exc: Exception) -> None:
        """A fork that failed ends the run with why (a parked run's resume: stopped, to be resumed later)."""
        log.exception("starting a training process failed")
        self._end_unstarted(f"the training process could not be started: {exc}")

    def _end_unstarted(self, why: str) -> None:
        with self._changed:
            self.error = why
            self.phase = "failed" if self.parked is None else "stopped"
            self._changed.notify_all()

    def _tell(self, command: str) -> None:
        if self._child.alive():
            try:
                self._child.send((command, None))
            except BertCoreError:
                pass

    def stop(self, wait: float | None = None) -> None:
        self._tell("stop")
        if wait:
            self.wait(wait)

    def pause(self) -> None:
        self._tell("pause")

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))
        return True

    def close(self, wait: float = 10.0) -> None:
        """End the child process: quit, and kill it if it does not go."""
        process = self.process
        if process is None:
            return
        self._closing = True
        if self._child.alive():
            self._tell("quit")
            try:
                process.wait(wait)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        if self.phase in ("preparing", "running"):
            self._set_phase("stopped")

    def kill(self, why: str, phase: str = "failed") -> None:
        """SIGKILL a process that does not answer; the run takes `phase`, and `why` is what the pages say."""
        if not self._child.alive():
            return
        self._killed = (why, phase)
        log.warning("run %s: %s; ending its training process", self.session_id[:6], why)
        self._child.kill()
        self.wait(10)

    def silent_s(self) -> float:
        return self._child.silent_s() if self.busy else 0.0

    def _config_changed(self, cfg) -> None:
        self._child.send(("config", None, cfg.to_dict()))

    def _change(self, name: str, value):
        # The child changes it at its own step (it may be steps ahead of the mirror) and answers with the config.
        cfg = TrainConfig.from_dict(self._child.request("change", name, value, self.spec))
        self.trainer.config = cfg
        return cfg

    # -------------------------------------------------------------- the child's messages (on the pump thread)

    def _set_phase(self, phase: str) -> None:
        with self._changed:
            self.phase = phase
            self._changed.notify_all()

    def _handle(self, kind, request, payload, error) -> None:
        if kind == "event":  # ("event", StepEvent | EvalEvent | ProbeSnapshot, baselines or None, None)
            if self.trainer is not None:
                self.trainer._receive(request, payload)
            return
        with self._changed:
            if kind == "built":
                if self.parked is not None and isinstance(self.trainer, TrainerProxy):
                    # A parked run back in a process: its mirror keeps its curves and probes, and the new process
                    # sends on from the step it stopped at. Its model is the process's again.
                    self.parked, self.released, self._snapshot = None, None, None
                elif payload["kind"] == "comparison":
                    self.trainer = RaceView(payload["view"], lambda split=payload["split"]: split)
                else:
                    self.trainer = TrainerProxy(payload, self._data_factory)
                self.trainer.state = "running"
                self.phase = "running"
            elif kind == "view":
                if isinstance(self.trainer, RaceView):
                    self.trainer.update(payload)
            elif kind == "results":
                self.trainer.results = payload
            elif kind == "phase":
                if self.trainer is not None:
                    self.trainer.state = payload
                    self.trainer.error = error
                if payload != "closed":
                    self.phase = payload
                elif self.phase in ("preparing", "running"):
                    self.phase = "stopped"
                self.error = error if payload == "failed" else self.error
            elif kind == "failed":
                self.error, self.phase = error, "failed"
            self._changed.notify_all()

    def _child_gone(self, process) -> None:
        if self.process is not None and process is not self.process:
            return   # a parked run's old process, reported after its new one was started: nothing of today's run
        with self._changed:
            self._exited = process
            code = process.returncode
            phase, error, unexpected = self.phase, self.error, False
            if self._killed is not None:
                self.ended_note, phase = self._killed
                error = self.ended_note if phase == "failed" else error
            elif phase in ("preparing", "running") and self._closing:
                phase = "stopped"
            elif phase in ("preparing", "running"):
                error = self._child.lost or f"the training process exited unexpectedly (exit code {code})"
                phase, unexpected = "failed", True
            if self.trainer is not None and self.trainer.state in ("running", "idle"):
                # The mirror's clock runs while its state says running: a dead process's run has stopped. Stopped
                # before the job's phase says so, since the pages read both without the lock: a page that sees the
                # run failed must not still see its clock running.
                self.trainer.state = phase if phase in ("failed", "stopped") else "stopped"
                self.trainer.error = error
            self.error, self.phase = error, phase
            self._changed.notify_all()
        if unexpected:
            log.warning("run %s: its training process exited unexpectedly (exit code %s)", self.session_id[:6], code)


if __name__ == "__main__":
    # The spawned child's entry; its code lives in `training_child`, so what it pickles names that module.
    run_on_fds(int(sys.argv[1]), int(sys.argv[2]))

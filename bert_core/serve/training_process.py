"""A pretraining run or fine-tuning race in a child process, steered and observed from the Streamlit server.

Why a process and not a thread: a training step of a small BERT is hundreds of short torch calls, each needing
Python's GIL between them. In the server's process the trainer thread shares that GIL with Streamlit's event loop
and the live charts' redraws, and lost 16% of its speed per step and a third over a whole run (measured in
`docs/benchmarks.md`). In its own process it shares nothing but the cores.

`ProcessTrainingJob` holds the job's state and talks to the child through a `training_link.ChildLink`; its model is
`process_model.ProcessModel`'s, its live view a mirror fed by the pump (`training_mirrors`). The child
(`training_child`) is never a fork of the server, so it inherits none of its threads: a fork of the warm launcher
(`launcher`) on Linux, else a fresh interpreter running this module's `__main__` block. Pickled objects travel over
two private pipes between our own two processes (nothing is unpickled from a file); weights as safetensors bytes.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from bert_core.errors import BertCoreError
from bert_core.model.files import is_whole_checkpoint
from bert_core.serve.job_base import JobBase
from bert_core.serve.process_model import ProcessModel
from bert_core.serve.training_child import run_on_fds
from bert_core.serve.training_link import ChildLink
from bert_core.serve.training_mirrors import TrainerProxy, restored_trainer
from bert_core.training.race_view import RaceView
from bert_core.training.train_config import TrainConfig

log = logging.getLogger("bert_core.app")


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
                error = f"the training process exited unexpectedly (exit code {code})"
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

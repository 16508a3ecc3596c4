"""The plug-in job kind "ray" (job_factory.PLUGINS): the process job with another link, `RayLink`, a ChildLink whose
process is a `ray_actor.TrainingActor` on the node ray_cluster chose. Checkpoint files come back as bytes and are
written to the run's own folder. A lost worker or node ends the actor, read as a training process that died: the run
failed, its last checkpoint kept. Torch-free, and Ray-free at import.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

from bert_core.cluster.ray_actor import ENDED, TrainingActor, folder_files, resumed_from_files, write_files
from bert_core.cluster.ray_cluster import (CLUSTER, GPU_TICKET, ClusterUnavailable, connect, cpus_per_run,
                                           gpus, slots, where)
from bert_core.model.files import folder_built_beside
from bert_core.serve.training_child import REPLY_TIMEOUT_S, ChildLink
from bert_core.serve.training_process import ProcessTrainingJob

log = logging.getLogger("bert_core.app")

# The plug-in's answers to the server's queue (job_factory.PLUGINS): make_job below, and these.
__all__ = ["make_job", "slots", "gpus", "where", "RayTrainingJob", "write_checkpoint"]

EVENTS_WAIT_S = 0.25   # what one `events` call gathers: a command sent meanwhile runs after it (Ray keeps order)
_ACTOR = None          # TrainingActor as a Ray actor class, made once


def write_checkpoint(folder: str | Path, files: dict[str, bytes]) -> Path:
    """Write a checkpoint's files as `folder`, replacing it only once all are written."""
    with folder_built_beside(folder) as incoming:
        write_files(incoming, files)
    return Path(folder)


class ActorProcess:
    def __init__(self, actor):
        self.actor, self.returncode, self.killed = actor, None, False
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired("ray actor", timeout)
        return self.returncode

    def kill(self) -> None:
        self.killed = True
        connect().kill(self.actor, no_restart=True)

    def send(self, message: tuple) -> None:
        if self.returncode is not None:
            raise OSError("the actor has ended")
        self.actor.send.remote(message)

    def ended(self, code: int) -> None:
        self.returncode = code
        self._ended.set()


class RayLink(ChildLink):
    """ChildLink over Ray. `on_gpu`: the run has a GPU slot; `training()`: it trains now (and takes its node's slot)."""

    def __init__(self, name: str, threads: int, changed: threading.Condition,
                 on_message: Callable[[str, Any, Any, str | None], None], on_exit: Callable[[Any], None],
                 on_gpu: bool = False, training: Callable[[], bool] = lambda: True):
        super().__init__(name, threads, changed, self._message, on_exit)
        self._job_message = on_message
        self._on_gpu = on_gpu
        self._training = training
        self.node_id: str | None = None   # the cluster node the run's actor is on
        self.lost: str | None = None      # why the actor ended, when neither it nor the server ended it
        self.heard = False                # the actor has said something: it was placed and started
        self._writing = threading.Lock()  # the pump's checkpoints and a save's reply write the same folder

    def _start_process(self) -> None:
        """Create the run's actor; returns at once while the actor starts (the pump waits for its first message)."""
        global _ACTOR
        self.heard = False
        try:
            ray = connect()
            self.node_id = CLUSTER.place(self._name, self._on_gpu, self._training)
            if _ACTOR is None:
                _ACTOR = ray.remote(TrainingActor)
            # No CPU held (the server's queue is the limit, ray_cluster says why); a token GPU share, with which Ray
            # gives the actor its GPU.
            on_node = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(self.node_id, soft=False)
            self.process = self._commands = ActorProcess(_ACTOR.options(
                num_cpus=0, num_gpus=GPU_TICKET if self._on_gpu else 0, max_restarts=0, max_task_retries=0,
                scheduling_strategy=on_node).remote())
        except BaseException as exc:
            CLUSTER.remove(self._name)
            if isinstance(exc, Exception) and not isinstance(exc, ClusterUnavailable):
                # Ray's own errors (a cluster lost since it was reached): logged whole, said plainly
                log.exception("run %s: its actor could not be made on the Ray cluster", self._name[:6])
                raise ClusterUnavailable(f"the training cluster could not take the run ({type(exc).__name__})") from exc
            raise

    def request(self, kind: str, *args, timeout: float = REPLY_TIMEOUT_S):
        value = super().request(kind, *args, timeout=timeout)
        if kind == "save":
            with self._writing:
                return str(write_checkpoint(args[0], value))
        return value

    def _message(self, kind, request, payload, error) -> None:
        if kind != "checkpoint":
            self._job_message(kind, request, payload, error)
            return
        with self._writing:
            write_checkpoint(payload["folder"], payload["files"])

    def _deliver(self, message: tuple) -> None:
        self.heard = True
        super()._deliver(message)

    def _pump_events(self) -> None:
        ray, process, code = connect(), self.process, None
        while code is None:
            try:
                batch = ray.get(process.actor.events.remote(EVENTS_WAIT_S))
            except ray.exceptions.ActorUnavailableError:
                time.sleep(EVENTS_WAIT_S)   # unreachable for a moment; a lost node's actor dies (ActorDiedError)
                continue
            except ray.exceptions.RayError as exc:   # the actor died: ended by the server, or its worker was lost
                code = -9 if process.killed else 1
                if not process.killed:
                    self.lost = ("the training ended: its cluster node or worker process was lost" if self.heard
                                 else "the training cluster could not start its actor; the run was not started")
                    log.warning("run %s: its Ray actor died (%s)", self._name[:6], type(exc).__name__)
                break
            for message in batch:
                if message == ENDED:
                    ray.kill(process.actor, no_restart=True)   # its loop has returned: its worker goes
                    code = 0
                    break
                self._deliver(message)
        CLUSTER.remove(self._name)
        if code == 1:
            CLUSTER.forget_nodes()   # a lost node leaves the slots at the next question
        process.ended(code)
        self._on_exit(process)


class RayTrainingJob(ProcessTrainingJob):
    def __init__(self, session_id: str, builder: Callable[[], Any], spec: Any = None, threads: int = 1,
                 data_factory: Callable[[Any], Any] | None = None, on_gpu: bool = False):
        super().__init__(session_id, builder, spec=spec, threads=threads, data_factory=data_factory)
        self._child = RayLink(session_id, threads, self._changed, self._handle, self._child_gone, on_gpu,
                              lambda: self.busy)

    @property
    def node_id(self) -> str | None:
        return self._child.node_id

    def _not_started(self, exc: Exception) -> None:
        """A cluster that cannot take the run fails it with one plain message; no actor was made."""
        if not isinstance(exc, ClusterUnavailable):
            super()._not_started(exc)
            return
        log.warning("run %s was not started: %s", self.session_id[:6], exc)
        self._end_unstarted(f"{exc}; the run was not started")

    def kill(self, why: str, phase: str = "failed") -> None:
        """An actor that never said a word was never placed (ended after the stall time), and the page says so."""
        if self._child.alive() and not self._child.heard:
            why = (f"the training cluster gave its actor no place to run in {self._child.silent_s():.0f} s; the run "
                   "was not started")
        super().kill(why, phase)

    def _parked_builder(self):
        """A parked run's new actor resumes from its checkpoint's files, sent with the builder."""
        return partial(resumed_from_files, folder_files(self.parked), str(self.parked), self.spec,
                       self._resume_device)

    def _child_gone(self, process) -> None:
        super()._child_gone(process)
        lost = self._child.lost
        if lost is None or self._killed is not None:
            return
        with self._changed:
            if self.phase == "failed":
                self.error = lost
                if self.trainer is not None:
                    self.trainer.error = self.error
            self._changed.notify_all()


def make_job(session_id, builder, spec=None, data_factory=None, device=None) -> RayTrainingJob:
    return RayTrainingJob(session_id, builder, spec=spec, threads=cpus_per_run(), data_factory=data_factory,
                          on_gpu=device is not None and device.startswith("cuda"))

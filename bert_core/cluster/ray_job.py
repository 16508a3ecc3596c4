"""The plug-in job kind "ray" (job_factory.PLUGINS), both sides of it. On the server: the process job with another
link, `RayLink`, a ChildLink whose process is a `TrainingActor` on the node ray_cluster chose. A lost worker or node
ends the actor, read as a training process that died: the run failed, its last checkpoint kept. On the node: the
actor runs training_child's loop (`ClusterChild`) on a thread of its own, over two pipes the server reaches through
the actor's `send` and `events`. No disk is shared: each new safety-net checkpoint, and a save, go back to the server
as their files' bytes, written to the run's own folder. Ray ends an actor whose owner has gone. Torch-free, and
Ray-free at import.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from functools import partial
from multiprocessing import Pipe
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from bert_core.cluster.ray_cluster import (CLUSTER, GPU_TICKET, ClusterUnavailable, connect, cpus_per_run,
                                           gpus, slots, where)
from bert_core.errors import BertCoreError
from bert_core.model.files import folder_built_beside, pid_alive
from bert_core.serve.training_child import HEARTBEAT_S, REPLY_TIMEOUT_S, Channel, ChildLink, TrainingChild, run_child
from bert_core.serve.training_process import ProcessTrainingJob, resumed_trainer
from bert_core.training.run_loop import failure_message

log = logging.getLogger("bert_core.app")

# The plug-in's answers to the server's queue (job_factory.PLUGINS): make_job below, and these.
__all__ = ["make_job", "slots", "gpus", "where", "RayTrainingJob", "write_checkpoint"]

ENDED = ("ended", None, None, None)   # the last message of an actor whose training loop has returned
MAX_EVENTS = 256                      # messages handed back by one `events` call
EVENTS_WAIT_S = 0.25   # what one `events` call gathers: a command sent meanwhile runs after it (Ray keeps order)
_ACTOR = None          # TrainingActor as a Ray actor class, made once


# ------------------------------------------------------------------------------------------ the node's side


def resumed_from_files(files: dict[str, bytes], server_folder: str, spec, device: str | None = None):
    """A parked run's trainer resumed on a node from its checkpoint's files, pointed at the server's folder again (so
    that ClusterChild sends its next checkpoints there)."""
    local = tempfile.mkdtemp(prefix="bert-ray-resume-")
    try:
        write_files(local, files)
        trainer = resumed_trainer(spec, local, device)
    finally:
        shutil.rmtree(local, ignore_errors=True)
    trainer.checkpoint_dir = server_folder
    return trainer


def write_files(folder: str | Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        parts = PurePosixPath(name).parts
        if not parts or PurePosixPath(name).is_absolute() or ".." in parts:
            raise BertCoreError(f"a checkpoint file from the cluster has a bad name: {name!r}")
        target = Path(folder, *parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def folder_files(folder: str | Path) -> dict[str, bytes]:
    root = Path(folder)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def node_folder(kind: str) -> str:
    """A new folder in the node's temporary directory for a checkpoint or a save, named by this process: an actor
    that is killed (its run stalled or discarded, its server gone) never removes its own; the next actor here does
    (`remove_dead_actors_folders`)."""
    return tempfile.mkdtemp(prefix=f"bert-ray-{kind}-{os.getpid()}-")


def remove_dead_actors_folders() -> None:
    """Remove the `node_folder`s whose process has ended; a folder whose name gives no process is left alone."""
    for folder in Path(tempfile.gettempdir()).glob("bert-ray-*-*-*"):
        pid = folder.name.split("-")[3]
        if pid.isdigit() and folder.is_dir() and not folder.is_symlink() and not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


class ClusterChild(TrainingChild):
    """TrainingChild on a node: no server pid to watch; checkpoints and saves travel back as bytes."""

    def __init__(self, commands, events):
        super().__init__(commands, events)
        self._server_folder: str | None = None   # where the server keeps the run's checkpoint (its path, not ours)
        self._local: str | None = None            # the node's folder the trainer writes its checkpoints to
        self._shipped: int | None = None          # the step of the last checkpoint sent back

    def heartbeat(self) -> None:
        while not self.quit:
            self.events.send(("alive", None, None, None))
            time.sleep(HEARTBEAT_S)

    def build(self, builder) -> bool:
        if not super().build(builder):
            return False
        # The trainer was built to write its safety-net checkpoints into the server's folder for the run; on this
        # node they go to a folder of its own, and each new one is sent back (`ship`).
        trainer = self.trainer
        if not self.comparison and trainer.checkpoint_dir is not None:
            self._server_folder = str(trainer.checkpoint_dir)
            self._local = node_folder("checkpoint")
            trainer.checkpoint_dir = self._local
        return True

    def ship(self) -> None:
        """Send the newest checkpoint back once (on the training thread, between steps)."""
        step = None if self._local is None else self.trainer.last_checkpoint_step
        if step is None or step == self._shipped:
            return
        files = folder_files(self._local)
        self.events.send(("checkpoint", None, {"folder": self._server_folder, "step": step, "files": files}, None))
        self._shipped = step

    def end(self) -> None:
        self.quit = True
        if self._local is not None:
            shutil.rmtree(self._local, ignore_errors=True)

    def forward(self, event) -> None:
        super().forward(event)
        self.ship()

    def _run(self) -> None:
        super()._run()
        self.ship()   # the checkpoint of the run's stop or end

    def handle(self, cmd: tuple) -> None:
        if cmd[0] != "save":
            super().handle(cmd)
            return
        # A save is written on this node and its files go back in the reply; the server writes them where it asked.
        folder = node_folder("save")
        try:
            self.trainer.save(folder)
            self.events.send(("reply", cmd[1], folder_files(folder), None))
        except Exception as exc:  # noqa: BLE001 - the server shows the message; the run goes on
            log.exception("a save failed")
            self.events.send(("reply", cmd[1], None, failure_message(exc)))
        finally:
            shutil.rmtree(folder, ignore_errors=True)


class TrainingActor:
    """Each method returns at once or within `events`' short wait, so Ray runs them in the order they were sent."""

    def __init__(self):
        remove_dead_actors_folders()
        (commands, self._commands), (self._events, events) = Pipe(duplex=False), Pipe(duplex=False)
        self._commands, self._events = Channel(self._commands), Channel(self._events)
        self._child = ClusterChild(Channel(commands), Channel(events))
        threading.Thread(target=self._main, name="bert-ray-training", daemon=True).start()

    def _main(self) -> None:
        try:
            run_child(self._child)
        finally:
            self._child.end()
            self._child.events.send(ENDED)

    def send(self, message: tuple) -> None:
        self._commands.send(message)

    def events(self, wait_s: float) -> list:
        """The messages of the next `wait_s` (ENDED last of all): one call a fraction of a second costs less than one a
        step. A reply, or the end, comes back at once."""
        out: list = []
        deadline = time.monotonic() + wait_s
        while len(out) < MAX_EVENTS and self._events.poll(max(0.0, deadline - time.monotonic())):
            out.append(self._events.recv())
            if out[-1][0] == "reply" or out[-1] == ENDED:
                break
        return out


# ------------------------------------------------------------------------------------------ the server's side


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


def make_job(session_id, builder, spec=None, data_factory=None, device=None) -> RayTrainingJob:
    return RayTrainingJob(session_id, builder, spec=spec, threads=cpus_per_run(), data_factory=data_factory,
                          on_gpu=device is not None and device.startswith("cuda"))

"""A run's training as a Ray actor on a cluster's node (ray_job is the server's side): training_child's loop on a
thread of the actor, over two pipes the server reaches through the actor's `send` and `events`. No disk is shared:
each new safety-net checkpoint, and a save, go back to the server as their files' bytes. Ray ends an actor whose
owner has gone. Ray-free and torch-free at import.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from multiprocessing import Pipe
from pathlib import Path, PurePosixPath

from bert_core.errors import BertCoreError
from bert_core.serve.training_child import HEARTBEAT_S, Channel, TrainingChild, run_child
from bert_core.serve.training_process import resumed_trainer
from bert_core.training.run_loop import failure_message

log = logging.getLogger("bert_core.app")

ENDED = ("ended", None, None, None)   # the last message of an actor whose training loop has returned
MAX_EVENTS = 256                      # messages handed back by one `events` call


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
            self._local = tempfile.mkdtemp(prefix="bert-ray-checkpoint-")
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
        folder = tempfile.mkdtemp(prefix="bert-ray-save-")
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

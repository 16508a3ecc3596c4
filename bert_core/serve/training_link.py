"""The server's end of a training process's pipes: starting it, commands, replies, and a pump thread for the rest.

The protocol, one tuple a message. Server to child: ("init", sys.path, threads), ("builder", builder), then ("run",
None), ("stop", None), ("quit", None), ("config", None, TrainConfig dict), ("weights", request), ("save",
request, folder) and ("change", request, setting, value, spec) (a setting changed while it trains; the reply is the
new TrainConfig dict). Child to server: (kind, request, payload, error) with kind "built", "event", "view", "results",
"phase", "failed", "alive" (a heartbeat, every HEARTBEAT_S from a thread of its own, so a stopped or frozen process
falls silent even while its training step is long), or "reply" (to a request's id).
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Callable

from bert_core.errors import BertCoreError
from bert_core.paths import REPO_ROOT
from bert_core.serve.launcher import SERVER_PID_ENV, START_TIMEOUT_S, fork_available, launcher

log = logging.getLogger("bert_core.app")

REPLY_TIMEOUT_S = 120.0   # a save or weight copy waits at most one step (or one evaluation) of the child
HEARTBEAT_S = 2.0         # the child says it is alive this often, whatever its training is doing
CHILD_MODULE = "bert_core.serve.training_process"   # run as `python -m`: its __main__ block is the child's entry
CHILD_ENTRY = "bert_core.serve.training_child:run_on_fds"   # what a process forked by the launcher runs


class Channel:
    """One direction of a pipe carrying Python objects, pickled with the standard pickler: `Connection.send`'s hands
    torch tensors over as shared-memory handles that only a multiprocessing child may open."""

    def __init__(self, connection: Connection):
        self.connection = connection
        self._lock = threading.Lock()   # the child's heartbeat thread sends beside its main thread

    def send(self, obj) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            self.connection.send_bytes(data)

    def recv(self):
        return pickle.loads(self.connection.recv_bytes())

    def poll(self, timeout: float = 0.0) -> bool:
        return self.connection.poll(timeout)

    def close(self) -> None:
        self.connection.close()


class ChildLink:
    """`changed`: the job's condition (a reply wakes its waiters). On the pump thread, `on_message(kind, request,
    payload, error)` gets every message but the replies, and `on_exit(process)` comes once the child has ended."""

    def __init__(self, name: str, threads: int, changed: threading.Condition,
                 on_message: Callable[[str, Any, Any, str | None], None],
                 on_exit: Callable[[subprocess.Popen], None]):
        self._name = name
        self._threads = threads
        self._changed = changed
        self._on_message = on_message
        self._on_exit = on_exit
        self.process: subprocess.Popen | None = None
        self.starting = False   # from spawn()'s start to its process: alive, so the run keeps its slot
        self._spawned = threading.Event()   # set once spawn() has sent its setup (or failed): later sends follow it
        self._commands: Channel | None = None
        self._events: Channel | None = None
        self._send_lock = threading.Lock()
        self._pump: threading.Thread | None = None
        self._replies: dict[int, list] = {}
        self._ids = itertools.count(1)
        self.last_heard: float | None = None   # monotonic time of the child's latest message (heartbeats included)

    def alive(self) -> bool:
        return self.starting or (self.process is not None and self.process.poll() is None)

    def silent_s(self) -> float:
        """Seconds since the child last said anything (0 before it was spawned or once it has ended)."""
        if self.last_heard is None or not self.alive():
            return 0.0
        return max(0.0, time.monotonic() - self.last_heard)

    def kill(self) -> None:
        """SIGKILL (a stopped process ends too); the pump then reports its exit."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()

    def spawn(self, builder: Callable[[], Any]) -> None:
        """Start the training process (forked from the launcher, or a fresh interpreter) and hand it its work."""
        self.starting = True
        self._spawned.clear()
        try:
            self._start_process()
            self.last_heard = time.monotonic()
            self._send(("init", sys.path, self._threads))
            self._send(("builder", builder))
        finally:
            self.starting = False
            self._spawned.set()

    def _start_process(self) -> None:
        cmd_read, cmd_write = os.pipe()
        evt_read, evt_write = os.pipe()
        threads = str(self._threads)
        try:
            if fork_available():
                self.process = launcher().launch(CHILD_ENTRY, (cmd_read, evt_write),
                                                 {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads})
            else:
                env = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
                env.pop(SERVER_PID_ENV, None)
                # `-m bert_core...` must resolve wherever the server was started from (sys.path arrives only later).
                package_root = str(REPO_ROOT)
                env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
                self.process = subprocess.Popen(
                    [sys.executable, "-m", CHILD_MODULE, str(cmd_read), str(evt_write)],
                    pass_fds=(cmd_read, evt_write), env=env, stdin=subprocess.DEVNULL)
        except BaseException:
            os.close(cmd_write)
            os.close(evt_read)
            raise
        finally:
            os.close(cmd_read)
            os.close(evt_write)
        self._commands = Channel(Connection(cmd_write, readable=False))
        self._events = Channel(Connection(evt_read, writable=False))

    def start_pump(self) -> None:
        self._pump = threading.Thread(target=self._pump_events, name=f"bert-pump-{self._name[:8]}", daemon=True)
        self._pump.start()

    def send(self, message: tuple) -> None:
        if self.starting:
            self._spawned.wait(START_TIMEOUT_S)   # a Stop pressed while the launcher forks the process: after setup
        self._send(message)

    def _send(self, message: tuple) -> None:
        try:
            with self._send_lock:
                if self._commands is None:
                    raise OSError("no training process")
                self._commands.send(message)
        except (OSError, EOFError) as exc:
            raise BertCoreError("the training process has ended; start a new run") from exc

    def request(self, kind: str, *args, timeout: float = REPLY_TIMEOUT_S):
        """Send a command the child answers and return its answer; BertCoreError with the child's message, or when
        it does not answer within `timeout`."""
        if not self.alive():
            raise BertCoreError("the training process has ended; start a new run")
        rid = next(self._ids)
        slot: list = []
        with self._changed:
            self._replies[rid] = slot
        self.send((kind, rid, *args))
        deadline = time.monotonic() + timeout
        with self._changed:
            while not slot:
                left = deadline - time.monotonic()
                if left <= 0 or not self.alive():
                    self._replies.pop(rid, None)
                    raise BertCoreError(f"the training process did not answer ({kind}) within {timeout:.0f} s")
                self._changed.wait(min(left, 0.5))
            self._replies.pop(rid, None)
        value, error = slot[0]
        if error:
            raise BertCoreError(error)
        return value

    def _pump_events(self) -> None:
        events, process = self._events, self.process
        while True:
            try:
                message = events.recv()
            except (EOFError, OSError):
                process.wait()
                self._on_exit(process)
                events.close()
                return
            self._deliver(message)

    def _deliver(self, message: tuple) -> None:
        kind, request, payload, error = message
        self.last_heard = time.monotonic()
        if kind == "alive":
            return
        try:
            if kind == "reply":
                self._answer(request, payload, error)
            else:
                self._on_message(kind, request, payload, error)
        except Exception:  # noqa: BLE001 - the pump must outlive one odd message
            log.exception("training event %s could not be handled", kind)

    def _answer(self, request: int, payload, error: str | None) -> None:
        with self._changed:
            slot = self._replies.get(request)
            if slot is not None:
                slot.append((payload, error))
            self._changed.notify_all()

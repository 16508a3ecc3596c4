"""Both ends of a training process's two pipes: the server's (`ChildLink`: starting it, commands, replies, and a pump
thread for the rest) and the child's (`TrainingChild`: build the trainer, run it when told, and answer the commands
at step boundaries, so a save or a weight copy sees whole steps). Torch is imported in the methods the child runs,
never in the server.

The protocol, one tuple a message. Server to child: ("init", sys.path, threads), ("builder", builder), then ("run",
None), ("stop", None), ("quit", None), ("config", None, TrainConfig dict), ("weights", request), ("save",
request, folder) and ("change", request, setting, value, spec) (a setting changed while it trains; the reply is the
new TrainConfig dict). Child to server: (kind, request, payload, error) with kind "built", "event", "view", "results",
"phase", "failed", "alive" (a heartbeat, every HEARTBEAT_S from a thread of its own, so a stopped or frozen process
falls silent even while its training step is long), or "reply" (to a request's id).
"""

from __future__ import annotations

import faulthandler
import itertools
import logging
import os
import pickle
import select
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Callable

from bert_core.errors import BertCoreError
from bert_core.serve.job_base import use_training_threads
from bert_core.serve.launcher import SERVER_PID_ENV, START_TIMEOUT_S, fork_available, launcher, repo_pythonpath
from bert_core.serve.train_spec import change_setting
from bert_core.training.allocator import keep_freed_memory
from bert_core.training.pretraining_events import EvalEvent
from bert_core.training.race_view import race_summary
from bert_core.training.run_loop import failure_message
from bert_core.training.train_config import TrainConfig

log = logging.getLogger("bert_core.app")

REPLY_TIMEOUT_S = 120.0   # a save or weight copy waits at most one step (or one evaluation) of the child
HEARTBEAT_S = 2.0         # the child says it is alive this often, whatever its training is doing
ORPHAN_GRACE_S = 60.0     # an orphaned training process that has not ended this long after its stop is ended
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
        self.lost: str | None = None   # why it ended when neither it nor the server ended it (a cluster's lost node)

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
                env["PYTHONPATH"] = repo_pythonpath(env)
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


# ------------------------------------------------------------------------------------------ the child's side


def run_on_fds(commands_fd: int, events_fd: int) -> None:
    commands = Channel(Connection(commands_fd, writable=False))
    run_child(TrainingChild(commands, Channel(Connection(events_fd, readable=False))))


def run_child(child: "TrainingChild") -> None:
    """The child's life: a heartbeat thread, its setup, the build, then its commands until it quits."""
    threading.Thread(target=child.heartbeat, name="bert-heartbeat", daemon=True).start()
    builder = child.receive_setup()
    if child.build(builder):
        child.serve()


def _server_watch():
    """`gone(wait=0.0)`: whether the server has gone, waiting up to `wait` s. A forked process, whose parent is the
    launcher, watches the server's pidfd (no reused pid, and its end wakes the wait at once); a spawned one watches
    for its parent to change."""
    server = os.environ.get(SERVER_PID_ENV)
    if server and sys.platform.startswith("linux"):   # pidfds: Linux (5.3+; an older kernel's ENOSYS below)
        try:
            fd = os.pidfd_open(int(server))
        except ProcessLookupError:
            return lambda wait=0.0: True   # it had already gone
        except (OSError, ValueError):
            pass                  # no pidfds here: the parent check below
        else:
            return lambda wait=0.0: bool(select.select([fd], [], [], wait)[0])
    parent = os.getppid()

    def gone(wait: float = 0.0) -> bool:
        deadline = time.monotonic() + wait
        while os.getppid() == parent:
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        return True

    return gone


class TrainingChild:
    def __init__(self, commands: Channel, events: Channel):
        self.commands = commands
        self.events = events
        self.trainer = None
        self.comparison = False      # a FinetuneComparison rather than a pretraining Trainer
        self.stop_before_run = False
        self.quit = False
        self._last_view = 0.0

    def heartbeat(self) -> None:
        """Say "alive" every HEARTBEAT_S: the server tells a frozen process from a slow step by its silence
        (run_scheduler). Between beats, watch for the server's end (`_server_watch`): a server killed outright is
        seen at once, where a closed pipe once left a shut-down server's child training on."""
        server_gone = _server_watch()
        while True:
            if not self.quit:
                try:
                    self.events.send(("alive", None, None, None))
                except (EOFError, OSError, ValueError):
                    pass  # the server is gone, or the pipe is closed as the child ends: the watch decides
            if server_gone(HEARTBEAT_S):
                self.orphaned()

    def orphaned(self) -> None:
        """The server has gone: the run stops as a stopped run does (its checkpoint written) and the process exits;
        one still building has trained nothing and exits at once. Never returns."""
        log.warning("the server has gone: stopping the run")
        self.quit = True
        trainer = self.trainer
        if trainer is None:
            os._exit(0)   # nothing trained, nothing to keep; downloads and caches are written whole or not at all
        trainer.stop()
        time.sleep(ORPHAN_GRACE_S)
        # The stop did not end the process (a step or a write that never returns): the log says where each thread
        # was, then the process ends without its stop's checkpoint.
        log.error("the run did not stop within %g s of the server's end; its threads:", ORPHAN_GRACE_S)
        faulthandler.dump_traceback(all_threads=True)
        os._exit(1)

    def receive_setup(self):
        _, path, threads = self.commands.recv()
        sys.path[:0] = [p for p in path if p not in sys.path]
        keep_freed_memory()  # this process only trains, and exits when the run is done with
        use_training_threads(threads)
        _, builder = self.commands.recv()
        return builder

    def build(self, builder) -> bool:
        """Build the trainer and tell the server what it built; False (the server told why) when that failed."""
        try:
            self.trainer = trainer = builder()
        except Exception as exc:  # noqa: BLE001 - the server shows the message
            if not isinstance(exc, BertCoreError):
                log.exception("building the trainer failed")
            self.events.send(("failed", None, None, failure_message(exc)))
            return False
        # A race (a FinetuneComparison, or a test's stand-in for one) is the live view with models inside it, a
        # pretraining run the one without (run_protocols.LiveView.tuners).
        self.comparison = bool(trainer.tuners)
        if self.comparison:
            for tuner in trainer.tuners:
                tuner.callbacks.append(self.forward)
            self.events.send(("built", None, {"kind": "comparison", "split": (trainer.train_data, trainer.val_data),
                                              "view": race_summary(trainer)}, None))
        else:
            trainer.callbacks.append(self.forward)
            p = trainer.probes
            self.events.send(("built", None, {
                "kind": "pretraining", "config": trainer.config, "model_config": trainer.model_config,
                "tokenizer": trainer.tokenizer, "metadata": trainer.metadata, "baselines": dict(trainer.baselines),
                "step": trainer.step, "history": trainer.history, "evals": trainer.evals, "growth": trainer.growth,
                "probes": (p.sentences, p.attention_sentence, p.top_k, p.max_snapshots) if p is not None else None,
            }, None))
        return True

    def serve(self) -> None:
        self.drain()
        pending_run = not self.stop_before_run and not self.quit
        if not pending_run:
            self.events.send(("phase", None, "stopped", None))
        while not self.quit:
            if pending_run:
                pending_run = False
                self._run()
                continue
            cmd = self.next_command(5.0)
            if cmd is None:
                continue
            if cmd[0] == "run":
                pending_run = True
            else:
                self.handle(cmd)
        try:
            self.events.send(("phase", None, "closed", None))
        except (EOFError, OSError):
            pass

    def _run(self) -> None:
        self.stop_before_run = False
        trainer = self.trainer
        trainer.run()
        if self.quit:
            return
        if self.comparison:
            self.events.send(("view", None, race_summary(trainer), None))
            # With the trained models, on the CPU: the server inspects them there, and a model pickled on a GPU
            # would make the server open a CUDA context of its own to read it back.
            # Imported here, not at the top: it loads torch, and the server imports this module without it.
            import torch

            results = trainer.results
            for result in results.values():
                if isinstance(result.model, torch.nn.Module):   # a bag of words' result holds its own classifier
                    result.model = result.model.to("cpu")
            self.events.send(("results", None, results, None))
        self.events.send(("phase", None, trainer.state, trainer.error))

    # -------------------------------------------------------------- commands

    def handle(self, cmd: tuple) -> None:
        kind, request = cmd[0], cmd[1]
        trainer = self.trainer
        try:
            if kind in ("stop", "pause", "quit"):
                if kind == "quit":
                    self.quit = True
                else:
                    self.stop_before_run = True
                # Only a running run is told: a stop flag set while idle would end the next Resume at once. A pause
                # (a turn that is up) lets a fine-tuning race finish the model in training (FinetuneComparison.pause).
                if trainer is not None and trainer.state == "running":
                    (trainer.pause if kind == "pause" else trainer.stop)()
                return
            if kind == "config":
                trainer.config = TrainConfig.from_dict(cmd[2])
                return
            if kind == "weights":
                from safetensors.torch import save as to_bytes   # torch: not in the server (TORCH_FREE)

                # Tied weights share storage and safetensors refuses shared tensors: give each its own copy.
                sd = {k: v.detach().to("cpu").clone() for k, v in trainer.model.state_dict().items()}
                self.events.send(("reply", request, (trainer.step, to_bytes(sd)), None))
            elif kind == "change":   # a setting changed while it trains: ("change", request, name, value, spec)
                self.events.send(("reply", request, change_setting(trainer, cmd[4], cmd[2], cmd[3]).to_dict(), None))
            elif kind == "save":
                trainer.save(cmd[2])
                self.events.send(("reply", request, str(cmd[2]), None))
            elif kind == "step":
                from bert_core.inspect.training_step import take_one_step   # torch (TORCH_FREE)

                # The step's events reach the server through `forward`, as a run's do; the record is the reply.
                self.events.send(("reply", request, take_one_step(trainer), None))
            else:
                self.events.send(("reply", request, None, f"unknown command {kind!r}"))
        except (EOFError, OSError):
            raise  # the server is gone: not a command's failure
        except Exception as exc:  # noqa: BLE001 - the server shows the message; the run goes on
            log.exception("command %s failed", kind)
            self.events.send(("reply", request, None, failure_message(exc)))

    def next_command(self, timeout: float):
        """The next command within `timeout` s (None: none came); "quit" once the server is gone."""
        if not self.commands.poll(timeout):
            return None
        try:
            return self.commands.recv()
        except (EOFError, OSError):
            return ("quit", None)  # the server is gone: stop, nobody is watching

    def drain(self) -> None:
        # Until a quit: once the server has gone, every read is "quit" again, and a drain that read on would hold the
        # run between two steps for good (its stop's checkpoint never written; the orphan ended by the grace).
        while not self.quit and (cmd := self.next_command(0)) is not None:
            if cmd[0] != "run":  # already running
                self.handle(cmd)

    def forward(self, event) -> None:
        trainer = self.trainer
        try:
            if self.comparison:
                # Fine-tuning steps are many and small: send the runs' state a few times a second, and at evals.
                now = time.monotonic()
                if type(event).__name__ == "FinetuneEval" or now - self._last_view >= 0.25:
                    self._last_view = now
                    self.events.send(("view", None, race_summary(trainer), None))
            else:
                extra = dict(trainer.baselines) if isinstance(event, EvalEvent) else None
                self.events.send(("event", event, extra, None))
            self.drain()
        except (EOFError, OSError):
            self.quit = True
            trainer.stop()

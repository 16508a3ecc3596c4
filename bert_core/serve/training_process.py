"""A pretraining (or fine-tuning) run in a child process, steered and observed from the Streamlit server.

Why a process and not a thread: a training step of a small BERT is hundreds of short torch calls, each needing
Python's GIL between them. In the server's process the trainer thread shares that GIL with Streamlit's event loop
and the live charts' redraws, and lost 16% of its speed per step and a third over a whole run (measured in
`docs/benchmarks.md`). In its own process it shares nothing but the cores.

Parent side: `ProcessTrainingJob` (the same interface as `jobs.TrainingJob`: start, stop, busy, phase, error,
trainer, model_snapshot, save, zip_bytes, extend) and `TrainerProxy`, a read-only mirror of the child's `Trainer`
(config, step, history, evals, baselines, probes, progress, tokenizer, metadata) fed by a pump thread; for the
Fine-tune page's `FinetuneComparison`, `ComparisonProxy` (runs, progress, and at the end the results with the
trained models).
Child side: `_child_main` builds the trainer, runs it when told, and answers commands at step boundaries, so a
save or a weight snapshot always sees whole steps. The child is a fresh interpreter (`python -m
bert_core.serve.training_process`), so it inherits none of the server's threads and never re-runs the server's main
script; the two talk over two private pipes with `multiprocessing.connection` (pickled Python objects between our
own two processes; nothing is unpickled from a file). Weights travel as safetensors bytes.
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
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

from bert_core.errors import BertCoreError
from bert_core.paths import REPO_ROOT
from bert_core.training.run_loop import EventLog

log = logging.getLogger("bert_core.app")

REPLY_TIMEOUT_S = 120.0   # a save or weight copy waits at most one step (or one evaluation) of the child


class _Channel:
    """One direction of a pipe carrying Python objects, pickled with the standard pickler.

    Not `Connection.send`: its pickler hands torch tensors over as shared-memory handles that only a
    multiprocessing child may open; plain pickle copies them into the message, which any process can read.
    """

    def __init__(self, connection: Connection):
        self.connection = connection

    def send(self, obj) -> None:
        self.connection.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    def recv(self):
        return pickle.loads(self.connection.recv_bytes())

    def poll(self, timeout: float = 0.0) -> bool:
        return self.connection.poll(timeout)

    def close(self) -> None:
        self.connection.close()


# ---------------------------------------------------------------------------------------------- child


def _child_main(commands: _Channel, events: _Channel) -> None:
    """The training process: receive sys.path, threads and the builder; build; run when told; answer commands at
    step boundaries; exit on "quit" or when the server goes away (its end of the pipe closes)."""
    _, path, threads = commands.recv()
    sys.path[:0] = [p for p in path if p not in sys.path]
    import torch

    from bert_core.training.allocator import keep_freed_memory

    keep_freed_memory()  # this process only trains, and exits when the run is done with
    torch.set_num_threads(max(1, threads))
    _, builder = commands.recv()
    state = {"stop_before_run": False, "quit": False}
    trainer = None

    def handle(cmd: tuple) -> None:
        kind, request = cmd[0], cmd[1]
        try:
            if kind in ("stop", "quit"):
                state["stop_before_run" if kind == "stop" else "quit"] = True
                # Only a running run is told: a stop flag set while idle would end the next Resume at once.
                if trainer is not None and trainer.state == "running":
                    trainer.stop()
                return
            if kind == "config":
                from bert_core.training.trainer import TrainConfig

                trainer.config = TrainConfig.from_dict(cmd[2])
                return
            if kind == "weights":
                from safetensors.torch import save as to_bytes

                # Tied weights share storage and safetensors refuses shared tensors: give each its own copy.
                sd = {k: v.detach().to("cpu").clone() for k, v in _unwrapped(trainer).state_dict().items()}
                events.send(("reply", request, (trainer.step, to_bytes(sd)), None))
            elif kind == "save":
                trainer.save(cmd[2])
                events.send(("reply", request, str(cmd[2]), None))
            else:
                events.send(("reply", request, None, f"unknown command {kind!r}"))
        except (EOFError, OSError):
            raise  # the server is gone: not a command's failure
        except Exception as exc:  # noqa: BLE001 - the server shows the message; the run goes on
            log.exception("command %s failed", kind)
            events.send(("reply", request, None, _message(exc)))

    def next_command(timeout: float):
        if not commands.poll(timeout):
            return None
        try:
            return commands.recv()
        except (EOFError, OSError):
            return ("quit", None)  # the server is gone: stop, nobody is watching

    def drain() -> None:
        while (cmd := next_command(0)) is not None:
            if cmd[0] != "run":  # already running
                handle(cmd)

    last_view = [0.0]

    def forward(event) -> None:
        from bert_core.training.trainer import EvalEvent

        try:
            if comparison:
                # Fine-tuning steps are many and small: send the runs' state a few times a second, and at evals.
                now = time.monotonic()
                if type(event).__name__ == "FinetuneEval" or now - last_view[0] >= 0.25:
                    last_view[0] = now
                    events.send(("view", None, _comparison_view(trainer), None))
            else:
                extra = dict(trainer.baselines) if isinstance(event, EvalEvent) else None
                events.send(("event", event, extra, None))
            drain()
        except (EOFError, OSError):
            state["quit"] = True
            trainer.stop()

    try:
        trainer = builder()
    except Exception as exc:  # noqa: BLE001 - the server shows the message
        if not isinstance(exc, BertCoreError):
            log.exception("building the trainer failed")
        events.send(("failed", None, None, _message(exc)))
        return
    comparison = hasattr(trainer, "tuners")  # a FinetuneComparison rather than a pretraining Trainer
    if comparison:
        for tuner in trainer.tuners:
            tuner.callbacks.append(forward)
        events.send(("built", None, {"kind": "comparison", "config": trainer.config, "train_data": trainer.train_data,
                                     "val_data": trainer.val_data, "view": _comparison_view(trainer)}, None))
    else:
        trainer.callbacks.append(forward)
        p = trainer.probes
        events.send(("built", None, {
            "kind": "pretraining", "config": trainer.config, "model_config": _unwrapped(trainer).config,
            "tokenizer": trainer.tokenizer, "metadata": trainer.metadata, "baselines": dict(trainer.baselines),
            "step": trainer.step, "history": trainer.history, "evals": trainer.evals,
            "probes": (p.sentences, p.attention_sentence, p.top_k, p.max_snapshots) if p is not None else None,
        }, None))
    drain()
    pending_run = not state["stop_before_run"] and not state["quit"]
    if not pending_run:
        events.send(("phase", None, "stopped", None))
    while not state["quit"]:
        if pending_run:
            pending_run = False
            state["stop_before_run"] = False
            trainer.run()
            if state["quit"]:
                break
            if comparison:
                events.send(("view", None, _comparison_view(trainer), None))
                events.send(("results", None, trainer.results, None))  # with the trained models
            events.send(("phase", None, trainer.state, trainer.error))
            continue
        cmd = next_command(5.0)
        if cmd is None:
            continue
        if cmd[0] == "run":
            pending_run = True
        else:
            handle(cmd)
    try:
        events.send(("phase", None, "closed", None))
    except (EOFError, OSError):
        pass


def _comparison_view(comparison) -> dict:
    """What the Fine-tune page draws of a FinetuneComparison: each run's state, steps and evaluations."""
    return {"tuners": [TunerView(t.name, t.state, t.step, t.evals) for t in comparison.tuners],
            "progress": comparison.progress, "state": comparison.state, "error": comparison.error}


def _unwrapped(trainer):
    model = trainer.model
    return getattr(model, "module", model)


def _message(exc: Exception) -> str:
    return str(exc) if isinstance(exc, BertCoreError) else f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------------------------------------- parent


class TrainerProxy(EventLog):
    """The server's read-only view of the child's Trainer, with the attributes the pages read."""

    def __init__(self, built: dict, data_factory: Callable[[Any], Any] | None = None):
        self.config = built["config"]
        self.model_config = built["model_config"]
        self.tokenizer = built["tokenizer"]
        self.metadata = built["metadata"]
        self.baselines = built["baselines"]
        self.probes = None
        if built["probes"] is not None:
            from bert_core.inspect.probes import ProbeStore

            self.probes = ProbeStore(*built["probes"])
        self.step = built["step"]
        EventLog.__init__(self, built["history"], built["evals"])
        self.tokens_seen = self._history[-1].tokens_seen if self._history else 0
        self.state = "idle"
        self.error: str | None = None
        self._elapsed = self._history[-1].elapsed_s if self._history else 0.0
        self._elapsed_at = None          # monotonic time of the last step event while running
        self._data_factory = data_factory
        self._data = None

    @property
    def progress(self):
        from bert_core.training.run_loop import run_progress

        elapsed = self._elapsed
        if self.state == "running" and self._elapsed_at is not None:
            elapsed += time.monotonic() - self._elapsed_at
        return run_progress(self.config, self.step, elapsed, self.state == "finished")

    @property
    def data(self):
        """The run's training data rebuilt here (for the Tokens & masking page), or None when unknown."""
        if self._data is None and self._data_factory is not None:
            self._data = self._data_factory(self.tokenizer)
        return self._data

    def _receive(self, event, extra) -> None:
        from bert_core.inspect.probes import ProbeSnapshot
        from bert_core.training.run_loop import append_thinned
        from bert_core.training.trainer import EvalEvent, StepEvent

        with self._lock:
            if isinstance(event, StepEvent):
                append_thinned(self._history, event, self.config.history_limit)
                self.step, self.tokens_seen = event.step, event.tokens_seen
                self._elapsed, self._elapsed_at = event.elapsed_s, time.monotonic()
            elif isinstance(event, EvalEvent):
                self._evals.append(event)
                if extra is not None:
                    self.baselines = extra
        if isinstance(event, ProbeSnapshot) and self.probes is not None:
            self.probes.add(event)


@dataclass
class TunerView:
    """One fine-tuning run as the page sees it."""

    name: str
    state: str
    step: int
    evals: list


class ComparisonProxy:
    """The server's view of a FinetuneComparison running in the child: config, data, runs, progress, results."""

    def __init__(self, built: dict):
        self.config = built["config"]
        self.train_data, self.val_data = built["train_data"], built["val_data"]
        self.results: dict = {}
        self.error: str | None = None
        self._update(built["view"])

    def _update(self, view: dict) -> None:
        self.tuners, self.progress = view["tuners"], view["progress"]
        self.state, self.error = view["state"], view["error"]

    @property
    def step(self) -> int:
        return sum(t.step for t in self.tuners)


class ProcessTrainingJob:
    """One session's pretraining run in a child process (a fresh interpreter: nothing of the server is inherited).

    `builder` is a picklable callable returning a `Trainer`; it runs in the child. `data_factory(tokenizer)`, run
    here on demand, rebuilds the training data for pages that show it.
    """

    def __init__(self, session_id: str, builder: Callable[[], Any], spec: Any = None, threads: int = 1,
                 data_factory: Callable[[Any], Any] | None = None):
        self.session_id = session_id
        self.spec = spec
        self._builder = builder
        self._threads = threads
        self._data_factory = data_factory
        self.trainer: TrainerProxy | None = None
        self.error: str | None = None
        self.phase = "new"          # new | preparing | running | stopped | finished | failed
        self.created = time.time()
        self.process: subprocess.Popen | None = None
        self._commands: _Channel | None = None
        self._events: _Channel | None = None
        self._send_lock = threading.Lock()
        self._pump: threading.Thread | None = None
        self._replies: dict[int, list] = {}
        self._ids = itertools.count(1)
        self._changed = threading.Condition()
        self._snapshot = None
        self._closing = False
        self.released: Path | None = None   # where the checkpoint went when the process was ended (release)
        self._release_lock = threading.Lock()  # a save waits for a release under way, then copies its folder

    # -------------------------------------------------------------- lifecycle

    @property
    def busy(self) -> bool:
        """True while the child is preparing or training."""
        return self.phase in ("preparing", "running") and self._alive()

    def _alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Spawn the child (first start) or tell it to continue (resume)."""
        if self.busy:
            raise BertCoreError("this training is already running")
        if self.error and self.phase == "failed" and self.trainer is not None and self.trainer.state == "failed":
            raise BertCoreError(f"this run failed ({self.error}); press Reset and start a new one")
        if not self._alive():
            if self.trainer is not None:
                raise BertCoreError("the training process has ended; press Reset and start a new run")
            self.error = None
            self._spawn()
            # 'preparing' only once the process exists: `busy` (and so `wait`) reads a preparing job without one
            # as idle, and the pump that moves the phase on starts after this.
            self._set_phase("preparing")
            self._pump = threading.Thread(target=self._pump_events, name=f"bert-pump-{self.session_id[:8]}",
                                          daemon=True)
            self._pump.start()
            return
        self.error = None
        self._set_phase("running")
        if self.trainer is not None:
            self.trainer.state = "running"
        self._send(("run", None))

    def stop(self, wait: float | None = None) -> None:
        """Ask the run to stop at the next step boundary; optionally wait up to `wait` seconds for it."""
        if self._alive():
            try:
                self._send(("stop", None))
            except BertCoreError:
                pass  # it ended between the check and the send: stopped all the same
        if wait:
            self.wait(wait)

    def wait(self, timeout: float) -> bool:
        """Wait until the child is neither preparing nor training; True when it is idle (or gone)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))
        return True

    def close(self, wait: float = 10.0) -> None:
        """End the child process (Reset, or the session closed): stop, quit, and kill it if it does not go."""
        if self.process is None:
            return
        self._closing = True
        if self._alive():
            try:
                self._send(("quit", None))
            except BertCoreError:
                pass  # it is ending already
            try:
                self.process.wait(wait)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self.phase in ("preparing", "running"):
            self._set_phase("stopped")

    def extend(self, more_steps: int) -> None:
        """Let a finished run go on for `more_steps` further steps (the schedule is stretched to the new end)."""
        if self.trainer is None or self.busy:
            raise BertCoreError("there is no stopped or finished run to continue")
        from bert_core.training.trainer import extended_config

        cfg = extended_config(self.trainer, more_steps)
        if cfg is None:
            return
        self.trainer.config = cfg
        self._send(("config", None, cfg.to_dict()))

    # -------------------------------------------------------------- requests answered by the child

    def _request(self, kind: str, *args, timeout: float = REPLY_TIMEOUT_S):
        if not self._alive():
            raise BertCoreError("the training process has ended; start a new run")
        rid = next(self._ids)
        slot: list = []
        with self._changed:
            self._replies[rid] = slot
        self._send((kind, rid, *args))
        deadline = time.monotonic() + timeout
        with self._changed:
            while not slot:
                left = deadline - time.monotonic()
                if left <= 0 or not self._alive():
                    self._replies.pop(rid, None)
                    raise BertCoreError(f"the training process did not answer ({kind}) within {timeout:.0f} s")
                self._changed.wait(min(left, 0.5))
            self._replies.pop(rid, None)
        value, error = slot[0]
        if error:
            raise BertCoreError(error)
        return value

    def model_snapshot(self):
        """An eval-mode copy of the model being trained (weights copied from the child), refreshed when the step
        changes; after `release`, the model read back from the released folder."""
        if self.trainer is None:
            return None
        if self._snapshot is not None and self._snapshot[0] == self.trainer.step:
            return self._snapshot[1]
        with self._release_lock:   # not while the process is being ended
            if self.released is not None or not self._alive():
                if self._snapshot is None and self.released is not None:
                    self._snapshot = (self.trainer.step, self._released_model())
                return self._snapshot[1] if self._snapshot is not None else None
            step, blob = self._request("weights")
        from safetensors.torch import load as from_bytes

        from bert_core.model.bert import pretraining_model

        model = pretraining_model(self.trainer.model_config)
        model.load_state_dict(from_bytes(blob))
        model.eval()
        self._snapshot = (step, model)
        return model

    def _released_folder(self) -> Path:
        if self.released is None or not (self.released / "config.json").is_file():
            raise BertCoreError("this run's checkpoint is no longer on the server (its scratch space was "
                                "reclaimed); start a new run")
        return self.released

    def _released_model(self):
        from bert_core.serve.model_sources import load_folder

        return load_folder(self._released_folder())[0].eval()

    def save(self, folder: str | Path) -> Path:
        """Have the child write the run's checkpoint folder (model, tokenizer, trainer state, optimizer); after
        `release`, copy the released folder."""
        if self.trainer is None:
            raise BertCoreError("nothing to save yet: start a training run first")
        folder = Path(folder).expanduser().resolve()
        with self._release_lock:
            if self.released is not None:
                import shutil

                shutil.copytree(self._released_folder(), folder, dirs_exist_ok=True)
                return folder
            self._request("save", str(folder))
        return folder

    def release(self, folder: str | Path) -> None:
        """Write the checkpoint to `folder` and end the child process: an ended run then costs the server a folder
        on disk, not a process. Saving, downloading and inspecting it read the folder afterwards."""
        with self._release_lock:
            if self.busy:  # still finishing its step (a loaded machine): let it stop, or its checkpoint is lost
                self.stop(wait=REPLY_TIMEOUT_S)
            if self.trainer is not None and self._alive() and not self.busy:
                folder = Path(folder).expanduser().resolve()
                self._request("save", str(folder))
                self.released = folder
                self._snapshot = None   # read back from the folder when someone looks (bounded memory per run)
            self.close()

    def zip_bytes(self) -> bytes:
        """The checkpoint folder as a zip archive, for the download button."""
        from bert_core.model.checkpoint import zip_checkpoint

        return zip_checkpoint(self.save)

    # -------------------------------------------------------------- the pump

    def _set_phase(self, phase: str) -> None:
        with self._changed:
            self.phase = phase
            self._changed.notify_all()

    def _spawn(self) -> None:
        """Start `python -m bert_core.serve.training_process` with two private pipes and hand it its work."""
        cmd_read, cmd_write = os.pipe()
        evt_read, evt_write = os.pipe()
        env = dict(os.environ, OMP_NUM_THREADS=str(self._threads), MKL_NUM_THREADS=str(self._threads))
        # `-m bert_core...` must resolve wherever the server was started from (sys.path arrives only later).
        package_root = str(REPO_ROOT)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bert_core.serve.training_process", str(cmd_read), str(evt_write)],
                pass_fds=(cmd_read, evt_write), env=env, stdin=subprocess.DEVNULL)
        finally:
            os.close(cmd_read)
            os.close(evt_write)
        self._commands = _Channel(Connection(cmd_write, readable=False))
        self._events = _Channel(Connection(evt_read, writable=False))
        self._send(("init", sys.path, self._threads))
        self._send(("builder", self._builder))

    def _send(self, message: tuple) -> None:
        try:
            with self._send_lock:
                self._commands.send(message)
        except (OSError, EOFError) as exc:
            raise BertCoreError("the training process has ended; start a new run") from exc

    def _pump_events(self) -> None:
        events, process = self._events, self.process
        while True:
            try:
                kind, request, payload, error = events.recv()
            except (EOFError, OSError):
                process.wait()
                self._child_gone(process)
                events.close()
                return
            try:
                self._handle(kind, request, payload, error)
            except Exception:  # noqa: BLE001 - the pump must outlive one odd message
                log.exception("training event %s could not be handled", kind)

    def _handle(self, kind, request, payload, error) -> None:
        if kind == "event":  # ("event", StepEvent | EvalEvent | ProbeSnapshot, baselines or None, None)
            if self.trainer is not None:
                self.trainer._receive(request, payload)
            return
        with self._changed:
            if kind == "built":
                if payload["kind"] == "comparison":
                    self.trainer = ComparisonProxy(payload)
                else:
                    self.trainer = TrainerProxy(payload, self._data_factory)
                self.trainer.state = "running"
                self.phase = "running"
            elif kind == "view":
                if isinstance(self.trainer, ComparisonProxy):
                    self.trainer._update(payload)
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
            elif kind == "reply":
                slot = self._replies.get(request)
                if slot is not None:
                    slot.append((payload, error))
            self._changed.notify_all()

    def _child_gone(self, process) -> None:
        with self._changed:
            if self.phase in ("preparing", "running") and self._closing:
                self.phase = "stopped"
            elif self.phase in ("preparing", "running"):
                code = process.returncode
                self.error = f"the training process exited unexpectedly (exit code {code})"
                self.phase = "failed"
            self._changed.notify_all()



if __name__ == "__main__":
    # Run the imported module, not this `__main__` copy, so that what it pickles names bert_core.serve.training_process.
    from bert_core.serve import training_process

    training_process._child_main(training_process._Channel(Connection(int(sys.argv[1]), writable=False)),
                                 training_process._Channel(Connection(int(sys.argv[2]), readable=False)))

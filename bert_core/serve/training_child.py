"""The training process's side: build the trainer, run it when told, and answer the server's commands (listed in
`training_link`) at step boundaries, so a save or a weight copy sees whole steps. Torch is imported in the methods
the child runs, never in the server, which imports this module only for the entry point.
"""

from __future__ import annotations

import logging
import os
import select
import sys
import threading
import time
from multiprocessing.connection import Connection

from bert_core.errors import BertCoreError
from bert_core.serve.job_base import use_training_threads
from bert_core.serve.launcher import SERVER_PID_ENV
from bert_core.serve.train_spec import change_setting
from bert_core.serve.training_link import HEARTBEAT_S, Channel
from bert_core.training.allocator import keep_freed_memory
from bert_core.training.pretraining_events import EvalEvent
from bert_core.training.race_view import race_summary
from bert_core.training.run_loop import failure_message
from bert_core.training.train_config import TrainConfig

log = logging.getLogger("bert_core.app")

ORPHAN_GRACE_S = 60.0   # an orphaned training process that has not ended this long after its stop is ended


def run_on_fds(commands_fd: int, events_fd: int) -> None:
    child_main(Channel(Connection(commands_fd, writable=False)), Channel(Connection(events_fd, readable=False)))


def child_main(commands: Channel, events: Channel) -> None:
    child = TrainingChild(commands, events)
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
        os._exit(1)   # the stop did not end the process (a step or a write that never returns)

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
        while (cmd := self.next_command(0)) is not None:
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

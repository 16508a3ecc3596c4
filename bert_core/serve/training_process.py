"""A pretraining (or fine-tuning) run in a child process, steered and observed from the Streamlit server.

Why a process and not a thread: a training step of a small BERT is hundreds of short torch calls, each needing
Python's GIL between them. In the server's process the trainer thread shares that GIL with Streamlit's event loop
and the live charts' redraws, and lost 16% of its speed per step and a third over a whole run (measured in
`docs/benchmarks.md`). In its own process it shares nothing but the cores.

Parent side: `ProcessTrainingJob` (the same interface as `jobs.TrainingJob`: start, stop, busy, phase, error,
trainer, model_snapshot, save, zip_bytes, extend) holds the job's state; it talks to the child through a
`training_link.ChildLink` (spawn, commands, replies, a pump thread). `TrainerProxy` is a read-only mirror of the
child's `Trainer` (config, step, history, evals, baselines, probes, progress, tokenizer, metadata) fed by the pump;
for the Fine-tune page's `FinetuneComparison`, `ComparisonProxy` (runs, progress, and at the end the results with the
trained models).
Child side (`training_child.child_main`): builds the trainer, runs it when told, and answers commands at step
boundaries, so a save or a weight snapshot always sees whole steps. The child is never a fork of the server: on
Linux a fork of the warm launcher (`bert_core.serve.launcher`, which imported torch once), elsewhere a fresh
interpreter (`python -m bert_core.serve.training_process`, this module's `__main__` block); either way it inherits
none of the server's threads and never re-runs the server's main script. The two talk over two private pipes with
`multiprocessing.connection` (pickled Python objects between our own two processes; nothing is unpickled from a
file). Weights travel as safetensors bytes.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from bert_core.errors import BertCoreError
from bert_core.inspect.probes import ProbeSnapshot, ProbeStore
from bert_core.serve.model_sources import load_folder
from bert_core.serve.training_child import TunerView, run_on_fds
from bert_core.serve.training_link import REPLY_TIMEOUT_S, ChildLink
from bert_core.training.run_loop import EventLog, append_thinned, run_progress

log = logging.getLogger("bert_core.app")

# TunerView and REPLY_TIMEOUT_S are this module's names too: the interface lists them here.
__all__ = ["ProcessTrainingJob", "TrainerProxy", "ComparisonProxy", "TunerView", "REPLY_TIMEOUT_S"]


class TrainerProxy(EventLog):
    """The server's read-only view of the child's Trainer, with the attributes the pages read."""

    def __init__(self, built: dict, data_factory: Callable[[Any], Any] | None = None):
        self.config = built["config"]
        self.model_config = built["model_config"]
        self.tokenizer = built["tokenizer"]
        self.metadata = built["metadata"]
        # When a run that started small grew (bert_core.training.trainer.Trainer.growth), None before or without.
        self.growth = built.get("growth")
        self.baselines = built["baselines"]
        self.probes = None
        if built["probes"] is not None:
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
        # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
        from bert_core.model.config import BertConfig
        from bert_core.training.trainer import EvalEvent, GrowthEvent, StepEvent

        with self._lock:
            if isinstance(event, GrowthEvent):
                self.model_config = BertConfig.from_hf_dict(event.model_config)
                self.growth = {"step": event.step, "fraction": event.fraction, "from_size": list(event.from_size),
                               "to_size": list(event.to_size)}
            elif isinstance(event, StepEvent):
                append_thinned(self._history, event, self.config.history_limit)
                self.step, self.tokens_seen = event.step, event.tokens_seen
                self._elapsed, self._elapsed_at = event.elapsed_s, time.monotonic()
            elif isinstance(event, EvalEvent):
                self._evals.append(event)
                if extra is not None:
                    self.baselines = extra
        if isinstance(event, ProbeSnapshot) and self.probes is not None:
            self.probes.add(event)


class ComparisonProxy:
    """The server's view of a FinetuneComparison running in the child: config, data, runs, progress, results."""

    probes = None   # a race takes no probe snapshots (run_protocols.LiveView)

    def __init__(self, built: dict):
        self.config = built["config"]
        self.train_data, self.val_data = built["train_data"], built["val_data"]
        self.task_kind, self.metric_names, self.primary = built["task_kind"], built["metric_names"], built["primary"]
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
    """One session's pretraining run in a child process (forked from the launcher or a fresh interpreter: nothing
    of the server is inherited).

    `builder` is a picklable callable returning a `Trainer`; it runs in the child. `data_factory(tokenizer)`, run
    here on demand, rebuilds the training data for pages that show it.
    """

    def __init__(self, session_id: str, builder: Callable[[], Any], spec: Any = None, threads: int = 1,
                 data_factory: Callable[[Any], Any] | None = None):
        self.session_id = session_id
        self.spec = spec
        self._builder = builder
        self._data_factory = data_factory
        self.trainer: TrainerProxy | ComparisonProxy | None = None
        self.error: str | None = None
        self.phase = "new"          # new | preparing | running | stopped | finished | failed
        self.created = time.time()
        self._changed = threading.Condition()
        self._child = ChildLink(session_id, threads, self._changed, self._handle, self._child_gone)
        self._snapshot = None
        self._closing = False
        self.released: Path | None = None   # where the checkpoint went when the process was ended (release)
        self._release_lock = threading.Lock()  # a save waits for a release under way, then copies its folder
        self._killed: tuple[str, str] | None = None   # (why, phase) when the server ended the process itself
        self.ended_note: str | None = None  # why the process ended when the server ended it (a hung run, a Stop)
        self._kept: tuple[Path, int] | None = None   # (released folder, the step of its checkpoint), read once

    @classmethod
    def restored(cls, session_id: str, folder: Path, spec: Any, phase: str, note: str | None = None,
                 probes: dict | None = None, data_factory: Callable[[Any], Any] | None = None):
        """A run of an earlier server process, read back from its checkpoint folder (bert_core.serve.run_records):
        its curves, probes and model as they were written, no process. It can be inspected, saved, downloaded and
        trained on from its weights; not resumed in place (its process is gone)."""
        # Imported here, not at the top: they load torch, and the server imports this module without it.
        from bert_core.inspect.probes import ProbeSnapshot
        from bert_core.model.checkpoint import TRAINER_STATE, read_json
        from bert_core.model.config import BertConfig
        from bert_core.model.tokenization import BertTokenizer
        from bert_core.training.trainer import EvalEvent, StepEvent, TrainConfig

        folder = Path(folder)
        state = read_json(folder / TRAINER_STATE)
        built = {"config": TrainConfig.from_dict(state["train_config"]), "model_config": BertConfig.load(folder),
                 "tokenizer": BertTokenizer.load(folder), "metadata": state.get("metadata") or {},
                 "baselines": dict(state.get("baselines") or {}), "step": int(state["step"]),
                 "history": [StepEvent(**e) for e in state.get("history", [])],
                 "evals": [EvalEvent(**e) for e in state.get("evals", [])],
                 "growth": (state.get("growth") or {}).get("grown"),
                 "probes": None if not probes else (probes["sentences"], probes["attention_sentence"],
                                                    probes["top_k"], probes["max_snapshots"])}
        job = cls(session_id, builder=None, spec=spec, data_factory=data_factory)
        job.trainer = TrainerProxy(built, data_factory)
        if probes and job.trainer.probes is not None:
            import numpy as np

            for snap in probes.get("snapshots", []):
                attention = snap.get("attention")
                job.trainer.probes.add(ProbeSnapshot(
                    step=int(snap["step"]), predictions=[[[tuple(c) for c in m] for m in p]
                                                         for p in snap["predictions"]],
                    attention_tokens=snap.get("attention_tokens"),
                    attention=None if attention is None else np.asarray(attention, dtype=np.float16)))
        job.trainer.state = phase
        job.phase, job.released, job.ended_note = phase, folder.resolve(), note
        return job

    # -------------------------------------------------------------- lifecycle

    @property
    def process(self) -> subprocess.Popen | None:
        """The child process, once started."""
        return self._child.process

    @property
    def busy(self) -> bool:
        """True while the child is preparing or training."""
        return self.phase in ("preparing", "running") and self._child.alive()

    def start(self) -> None:
        """Spawn the child (first start) or tell it to continue (resume)."""
        if self.busy:
            raise BertCoreError("this training is already running")
        if self.error and self.phase == "failed" and self.trainer is not None and self.trainer.state == "failed":
            raise BertCoreError(f"this run failed ({self.error}); press Reset and start a new one")
        if not self._child.alive():
            if self.trainer is not None:
                raise BertCoreError("the training process has ended; press Reset and start a new run")
            self.error = None
            # 'preparing' before the process exists, and busy while the launcher forks it (it can wait for the
            # launcher's imports): the scheduler must not read the run as ended and give its slot away.
            self._child.starting = True
            self._set_phase("preparing")
            try:
                self._child.spawn(self._builder)
            except BaseException:
                self._set_phase("new")
                raise
            self._child.start_pump()
            return
        self.error = None
        self._set_phase("running")
        if self.trainer is not None:
            self.trainer.state = "running"
        self._child.send(("run", None))

    def stop(self, wait: float | None = None) -> None:
        """Ask the run to stop at the next step boundary; optionally wait up to `wait` seconds for it."""
        if self._child.alive():
            try:
                self._child.send(("stop", None))
            except BertCoreError:
                pass  # it ended between the check and the send: stopped all the same
        if wait:
            self.wait(wait)

    def pause(self) -> None:
        """End the run's turn on a shared server: a pretraining run stops at its next step, a fine-tuning race once
        the model in training has finished (each keeps its whole budget); start() goes on from there."""
        if self._child.alive():
            try:
                self._child.send(("pause", None))
            except BertCoreError:
                pass  # it ended between the check and the send

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
        process = self.process
        if process is None:
            return
        self._closing = True
        if self._child.alive():
            try:
                self._child.send(("quit", None))
            except BertCoreError:
                pass  # it is ending already
            try:
                process.wait(wait)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        if self.phase in ("preparing", "running"):
            self._set_phase("stopped")

    def kill(self, why: str, phase: str = "failed") -> None:
        """End a process that does not answer (SIGKILL: a stopped or hung process ends too). The run takes `phase`
        and `why` is what the pages say; its model is lost unless it was released to a folder first."""
        if not self._child.alive():
            return
        self._killed = (why, phase)
        log.warning("run %s: %s; ending its training process", self.session_id[:6], why)
        self._child.kill()
        self.wait(10)

    def silent_s(self) -> float:
        """Seconds since a preparing or training child last said anything (its heartbeat comes every 2 s)."""
        return self._child.silent_s() if self.busy else 0.0

    def extend(self, more_steps: int) -> None:
        """Let a finished run go on for `more_steps` further steps (the schedule is stretched to the new end)."""
        if self.trainer is None or self.busy:
            raise BertCoreError("there is no stopped or finished run to continue")
        # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
        from bert_core.training.trainer import extended_config

        cfg = extended_config(self.trainer, more_steps)
        if cfg is None:
            return
        self.trainer.config = cfg
        self._child.send(("config", None, cfg.to_dict()))

    # -------------------------------------------------------------- is the model still here?

    @property
    def model_available(self) -> bool:
        """True while the run's weights can be read: from its process, or from the folder it was released to."""
        if self.trainer is None:
            return False
        if self.released is not None:
            return (self.released / "config.json").is_file()
        return self._child.alive()

    @property
    def snapshot_step(self) -> int | None:
        """The step of the weight copy this server holds (pages label a model by it), None when it holds none."""
        return self._snapshot[0] if self._snapshot is not None else None

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
        if self._snapshot is not None and self._snapshot[0] == self.trainer.step:
            return self._snapshot[1]
        with self._release_lock:   # not while the process is being ended
            if self.released is not None or not self._child.alive():
                if self._snapshot is None and self.released is not None:
                    self._snapshot = self._released_model()
                return self._snapshot[1] if self._snapshot is not None else None
            step, blob = self._child.request("weights")
        # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
        from safetensors.torch import load as from_bytes

        # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
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

    def _released_model(self) -> tuple[int, Any]:
        """(the step its folder's checkpoint was written at, the model read from it)."""
        model, _, state = load_folder(self._released_folder())
        return int((state or {}).get("step", self.trainer.step)), model.eval()

    def save(self, folder: str | Path) -> Path:
        """Have the child write the run's checkpoint folder (model, tokenizer, trainer state, optimizer); after
        `release`, copy the released folder."""
        if self.trainer is None:
            raise BertCoreError("nothing to save yet: start a training run first")
        folder = Path(folder).expanduser().resolve()
        with self._release_lock:
            if self.released is not None:
                # Imported here, not at the top: it loads torch, and the server imports this module without it.
                from bert_core.model.checkpoint import copy_checkpoint

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
            elif self.trainer is not None and self._checkpoint_step(folder) >= (self.snapshot_step or 0):
                # The process died, but a checkpoint it wrote on its way (bert_core.serve.run_records) is there and
                # no newer copy is: the run keeps the model of that step, labelled with it.
                self.released, self._snapshot = folder, None
            self.close()

    @staticmethod
    def _checkpoint_step(folder: Path) -> int:
        """The step of the whole checkpoint in `folder`; -1 when there is none."""
        # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
        from bert_core.model.hf import is_whole_checkpoint

        try:
            if is_whole_checkpoint(folder):
                return int(json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))["step"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return -1

    def zip_bytes(self) -> bytes:
        """The checkpoint folder as a zip archive, for the download button."""
        # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
        from bert_core.model.checkpoint import zip_checkpoint

        return zip_checkpoint(self.save)

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
            self._changed.notify_all()

    def _child_gone(self, process) -> None:
        with self._changed:
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
    # The child's entry point (`ChildLink.spawn` runs `python -m` on this module). Its code lives in
    # `training_child`, an imported module, so what it pickles (TunerView) names that module, not this `__main__`.
    run_on_fds(int(sys.argv[1]), int(sys.argv[2]))

"""A run trained on a server thread (`TrainingJob`), the job kind for a server that does not train in child processes
(`$BERT_EXPLORER_TRAIN_PROCESS=0`, or Windows) and for the tests that drive a Trainer directly. No Streamlit, and
torch only once the thread runs."""

from __future__ import annotations

import copy
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

from bert_core.errors import BertCoreError
from bert_core.serve.job_base import JobBase, use_training_threads
from bert_core.serve.train_spec import build_trainer, change_setting
from bert_core.training.train_spec import TrainSpec

log = logging.getLogger("bert_core.app")


class TrainingJob(JobBase):
    """A run on a daemon thread that builds the trainer (seconds to minutes), then runs it; never calls Streamlit."""

    def __init__(self, session_id: str, spec: TrainSpec | None = None,
                 builder: Callable[[], Any] | None = None):
        super().__init__(session_id, spec, builder or (lambda: build_trainer(spec)))
        self.thread: threading.Thread | None = None
        self._stop_requested = threading.Event()

    @property
    def busy(self) -> bool:
        """The thread lives, or start() has made it and not yet started it (another thread may look in that gap)."""
        thread = self.thread
        return thread is not None and (thread.ident is None or thread.is_alive())

    def start(self) -> None:
        if self.busy:
            raise BertCoreError("this training is already running")
        self._stop_requested.clear()
        self.error = None if self.phase != "failed" else self.error
        # The thread first, then the phase: whoever sees the phase leave "new" finds a thread to wait for.
        self.thread = threading.Thread(target=self._run, name=f"bert-train-{self.session_id[:8]}", daemon=True)
        self.phase = "preparing" if self.trainer is None else "running"
        try:
            self.thread.start()
        except RuntimeError:   # no thread could be started: not busy, and the page says why
            self.thread = None
            raise

    def _run(self) -> None:
        try:
            use_training_threads()
            if self.trainer is None:
                trainer = self._builder()
                self.trainer = trainer
                if self._stop_requested.is_set():
                    self.phase = "stopped"
                    return
            self.phase = "running"
            self.trainer.run()
            self.phase = self.trainer.state
            if self.trainer.state == "failed":
                self.error = self.trainer.error
        except BertCoreError as exc:
            self.error, self.phase = str(exc), "failed"
        except Exception as exc:  # noqa: BLE001 - the page shows it; a thread cannot raise to anyone
            log.exception("training job failed")
            self.error, self.phase = f"{type(exc).__name__}: {exc}", "failed"

    def stop(self, wait: float | None = None) -> None:
        self._stop_requested.set()
        if self.trainer is not None and self.busy:  # a stop flag left on an idle trainer would end the next run
            self.trainer.stop()
        if wait:
            self._join(wait)

    def pause(self) -> None:
        trainer = self.trainer
        if trainer is not None and self.busy:
            trainer.pause()

    def step_once(self):
        """One more update of a stopped run, for *Step once* (bert_core.inspect.training_step)."""
        if self.trainer is None or self.busy or self.phase != "stopped":
            raise BertCoreError("Step once takes the next update of a stopped run: stop the run first")
        # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
        from bert_core.inspect.training_step import take_one_step

        return take_one_step(self.trainer)

    def _take_copy(self):
        trainer = self.trainer
        with trainer._step_lock:   # held during an update (run_loop.RunLoop): a copy of whole steps only
            step = trainer.step
            model = copy.deepcopy(trainer.model)
        model = model.to("cpu").eval()
        self._keep_snapshot(step, model)
        return model

    def _change(self, name: str, value):
        return change_setting(self.trainer, self.spec, name, value)

    def save(self, folder: str | Path) -> Path:
        self._check_saveable()
        self.trainer.save(folder)
        return Path(folder)

    def wait(self, timeout: float) -> bool:
        self._join(timeout)
        return not self.busy

    def _join(self, timeout: float) -> None:
        """Join the thread, also one another thread's start() has made and not started (join() would raise)."""
        deadline = time.monotonic() + timeout
        thread = self.thread
        while thread is not None and thread.ident is None and time.monotonic() < deadline:
            time.sleep(0.01)
            thread = self.thread
        if thread is not None and thread.ident is not None:
            thread.join(max(0.0, deadline - time.monotonic()))

    # A run on a server thread keeps its model in the server's memory: never lost, never silent, nothing to end or
    # release to a folder; a kill asks it to stop (a thread cannot be ended from outside).
    ended_note = None
    released = None
    model_available = property(lambda self: self.trainer is not None)
    kept_step = property(lambda self: self.trainer.step if self.trainer is not None else None)

    def close(self, wait: float = 10.0) -> None: ...
    def release(self, folder: str | Path) -> None: ...

    def silent_s(self) -> float:
        return 0.0

    def kill(self, why: str, phase: str = "failed") -> None:
        self.stop()

    def lost_message(self) -> str:
        return "This run has no model yet."

"""The observable run loop that pretraining (`training.Trainer`) and fine-tuning (`finetune.Finetuner`) share: state,
step and evaluation events (thread-safe, handed to callbacks), progress, `stop()` from any thread, and the guard that
refuses an update whose loss or gradient is not finite. A subclass adds its own step and evaluations through the
hooks below.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bert_core.errors import BertCoreError

# What a run that ran out of GPU memory says first (on a class server the card is shared by several runs).
GPU_MEMORY_NOTE = ("the GPU ran out of memory (other runs or programs may share it): use a smaller size, batch or "
                   "sequence length, or start again when fewer runs share it")


def failure_message(exc: BaseException) -> str:
    """A failed run's one-line reason: our own errors as they are, others with their type; a CUDA out-of-memory error
    says what to do first, then torch's first line."""
    if isinstance(exc, BertCoreError):
        return str(exc)
    if type(exc).__name__ == "OutOfMemoryError":   # torch.OutOfMemoryError (torch.cuda.OutOfMemoryError)
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"{GPU_MEMORY_NOTE} ({first})"
    return f"{type(exc).__name__}: {exc}"

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """How far a run is: fraction in [0, 1] and estimated seconds left (None before the first step)."""

    fraction: float
    eta_s: float | None
    step: int
    elapsed_s: float


def run_progress(config, step: int, elapsed_s: float, finished: bool = False) -> Progress:
    """How far a run with this config (`max_steps` and/or `time_budget_s`) is after `step` steps and `elapsed_s`
    seconds of training."""
    fractions = []
    if config.max_steps:
        fractions.append(step / config.max_steps)
    if config.time_budget_s:
        fractions.append(elapsed_s / config.time_budget_s)
    frac = min(max(fractions), 1.0)
    eta = None
    if finished:
        frac, eta = 1.0, 0.0
    elif frac > 0 and elapsed_s > 0:
        eta = elapsed_s * (1.0 - frac) / frac
    return Progress(fraction=frac, eta_s=eta, step=step, elapsed_s=elapsed_s)


def history_stride(step: int, limit: int) -> int:
    """The spacing of the steps kept in a history after `step` steps: the smallest power of two that keeps at
    most `limit` of them (1 when `limit` is 0: keep all)."""
    stride = 1
    while limit and step // stride > limit:
        stride *= 2
    return stride


def append_thinned(history: list, event, limit: int) -> None:
    """Append `event` to `history` in place, keeping the steps that are multiples of `history_stride` and the newest.
    Depends only on the step numbers, so a resumed run thins exactly as an uninterrupted one."""
    stride = history_stride(event.step, limit)
    if history and history[-1].step % stride:
        history.pop()  # the previous newest, kept only while it was the newest
    # Kept steps are consecutive multiples of the old stride, so when it doubles one of the first two is off it.
    if stride > 1 and any(e.step % stride for e in history[:2]):
        history[:] = [e for e in history if e.step % stride == 0]
    history.append(event)


class EventLog:
    """A run's step and evaluation events, read as snapshot copies from any thread (a run, or its mirror in the
    app's server)."""

    def __init__(self, history=(), evals=()):
        self._lock = threading.Lock()
        self._history: list = list(history)
        self._evals: list = list(evals)

    @property
    def history(self) -> list:
        """A snapshot copy of the per-step events so far."""
        with self._lock:
            return list(self._history)

    @property
    def evals(self) -> list:
        """A snapshot copy of the evaluations so far (step 0 is the model before training)."""
        with self._lock:
            return list(self._evals)


class RunLoop(EventLog):
    """One training run, observable and stoppable from another thread: a stop ends it at the next step boundary;
    `run()` never raises (a failure sets `error` and state 'failed').

    A subclass sets `config`, `optimizer` and `step_event_type`, and defines `_train_step()` (one update's event, or
    None with `error` set) and the hooks below it needs. `times_only_steps` makes the budget count training steps only
    (not evaluations); `history_limit` thins long step histories (append_thinned)."""

    step_event_type: type = object
    times_only_steps = False
    rerunnable = True     # may run() continue after a stop (the Trainer), or is a run done once (the Finetuner)
    run_name = "training"
    history_limit = 0     # step events kept before they are thinned (0: all)

    def __init__(self, callbacks: Sequence[Callable[[Any], None]] = ()):
        super().__init__()  # the lock also guards `state` for readers in other threads
        self.callbacks = list(callbacks)
        self.step = 0
        self.elapsed_s = 0.0
        self.error: str | None = None
        self.diverged = False  # the error is a non-finite loss (a learning rate too high), not a crash
        self._state = "idle"
        self._step_lock = threading.RLock()  # held during an update (and a save), so a reader sees whole steps
        self._stop = threading.Event()
        self._run_started: float | None = None

    # ------------------------------------------------------------------ observation (thread-safe)

    @property
    def state(self) -> str:
        return self._state

    @property
    def progress(self):
        """Fraction of the run done and estimated seconds left, from steps or from the time budget."""
        return run_progress(self.config, self.step, self._elapsed_now(), self._state == "finished")

    def stop(self) -> None:
        """Ask a running `run()` to return at the next step boundary (safe to call from any thread)."""
        self._stop.set()

    def pause(self) -> None:
        """End a turn on a shared server: a run stops at its next step, and run() goes on from there."""
        self.stop()

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        """Train until the step count or time budget is reached, or stop() is called."""
        with self._lock:
            if self._state == "running":
                raise BertCoreError(f"this {self.run_name} run is already running; call stop() first")
            if self._state == "failed":
                return
            if not self.rerunnable and self._state != "idle":
                raise BertCoreError(f"this {self.run_name} run is already {self._state}; start a new one")
            self._state = "running"
        final = "failed"
        try:
            with self._run_context():
                if not self.times_only_steps:
                    self._run_started = time.monotonic()
                self._before_loop()
                final = "finished"
                while not self._done():
                    if self._stop.is_set():
                        final = "stopped"
                        break
                    event = self._timed_step()
                    if event is None:
                        final = "failed"  # self.error says why
                        break
                    self._publish(event)
                    self._after_step()
                if final != "failed":
                    self._after_loop(final)
        except Exception as e:  # noqa: BLE001 - run() is called from threads that cannot see exceptions
            log.exception("%s failed", self.run_name)
            self.error = failure_message(e)
        finally:
            if self.error is not None:
                final = "failed"
            self.elapsed_s = self._elapsed_now()
            self._run_started = None
            self._stop.clear()
            with self._lock:
                self._state = final
            self._after_run(final)

    def step_once(self):
        """One update as `run()` makes it (the evaluation before the first update included), for a student who
        presses *Step once* between runs; the run stays where it was, idle or stopped, and `run()` goes on from
        here. Returns the step event, or None when the update was refused (`error` says why)."""
        with self._lock:
            if self._state == "running":
                raise BertCoreError(f"this {self.run_name} run is running: stop it before stepping once")
            if self._state in ("failed", "finished"):
                raise BertCoreError(f"this {self.run_name} run has {self._state}: there is no next step")
        with self._run_context():
            self._before_loop()
            event = self._timed_step()
            if event is None:
                with self._lock:
                    self._state = "failed"
                return None
            self._publish(event)
            self._after_step()
        return event

    def _timed_step(self):
        with self._step_lock:
            if not self.times_only_steps:
                return self._train_step()
            self._run_started = time.monotonic()
            try:
                return self._train_step()
            finally:
                self.elapsed_s = self._elapsed_now()
                self._run_started = None

    def _fraction_done(self) -> float:
        cfg, elapsed = self.config, self._elapsed_now()
        parts = [self.step / cfg.max_steps] if cfg.max_steps else []
        if cfg.time_budget_s:
            parts.append(elapsed / cfg.time_budget_s)
        return max(parts) if parts else 0.0

    def _done(self) -> bool:
        return self._fraction_done() >= 1.0

    def _elapsed_now(self) -> float:
        started = self._run_started
        return self.elapsed_s + (time.monotonic() - started if started is not None else 0.0)

    def _publish(self, event) -> None:
        with self._lock:
            if isinstance(event, self.step_event_type):
                append_thinned(self._history, event, self.history_limit)
            else:
                self._evals.append(event)
        for callback in self.callbacks:
            callback(event)

    def _update_is_finite(self, loss: float, grad_norm: float) -> bool:
        """The NaN guard: False (with the update refused and `error` set) when the loss or the gradient is not
        finite. The weights that gave this loss came from the previous update, so nothing is saved here."""
        if math.isfinite(loss) and math.isfinite(grad_norm):
            return True
        self.optimizer.zero_grad(set_to_none=True)
        self.diverged = True
        self.error = (f"{self.run_name} stopped at step {self.step + 1}: the loss became {loss} (gradient norm "
                      f"{grad_norm}). The learning rate ({self._rate_now():g}) is probably too high; "
                      f"{self._after_divergence()}")
        log.error(self.error)
        return False

    # ------------------------------------------------------------------ hooks

    def _run_context(self):
        return contextlib.nullcontext()

    def _before_loop(self) -> None:
        pass

    def _train_step(self):
        raise NotImplementedError

    def _after_step(self) -> None:
        pass

    def _after_loop(self, final: str) -> None:
        pass

    def _after_run(self, final: str) -> None:
        pass

    def _rate_now(self) -> float:
        """The peak learning rate of the update under way (the NaN guard's message names it)."""
        return self.config.learning_rate

    def _after_divergence(self) -> str:
        """What the user should do after a non-finite loss (the end of the NaN guard's message)."""
        return "lower it and start again."

"""Stand-ins for the server's tests: a run spec and a trainer that count steps on a thread, fast and torch-free.
Each implements the server's declared interfaces (bert_core.serve.run_protocols), as every real kind of run does:
the queue reads them plainly (tests/test_run_protocols.py)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import ClassVar

from bert_core.serve.run_protocols import TRAIN_PAGE


@dataclass(frozen=True)
class Steps:
    """A stand-in pretraining run's spec: its Counter finishes after `steps` (None: it runs until stopped)."""

    steps: int | None = None
    page: ClassVar[str] = TRAIN_PAGE
    recorded: ClassVar[bool] = True
    expected_s: ClassVar[float | None] = None
    longest_part_s: ClassVar[float] = 0.0
    corpus_label: ClassVar[str] = "stand-in"
    preset: ClassVar[str] = "stand-in"              # what a run list names it by, as a TrainSpec's
    train: ClassVar[dict] = {"objective": "mlm"}
    model_overrides: ClassVar[dict] = {}


@dataclass
class Progress:
    fraction: float
    eta_s: float | None
    step: int
    elapsed_s: float


class Counter:
    """A stand-in Trainer: counts steps until stopped, or until `steps` (then it has finished)."""

    # A pretraining run with no curves, probes or data to show, and no race inside (run_protocols.LiveView).
    config = probes = tokenizer = growth = data = None
    history = evals = tuners = ()
    results: ClassVar[dict] = {}

    def __init__(self, steps: int | None = None):
        self.steps = steps
        self.step = 0
        self.state, self.error = "idle", None
        self._stop = threading.Event()
        self._started = time.monotonic()

    @property
    def progress(self) -> Progress:
        fraction = min(self.step / self.steps, 1.0) if self.steps else 0.0
        return Progress(fraction, None, self.step, time.monotonic() - self._started)

    def run(self):
        self._stop.clear()
        self.state = "running"
        while not self._stop.wait(0.005):
            self.step += 1
            if self.steps is not None and self.step >= self.steps:
                self.state = "finished"
                return
        self.state = "stopped"

    def stop(self):
        self._stop.set()

    pause = stop   # a pretraining run's turn ends at its next step


class StandInView:
    """What a stand-in live view of a test's own (a race that blocks, say) has by default: no probes, no progress
    to tell, and its turn ends as a stop."""

    state, error, step, probes, primary, tuners, results = "running", None, 0, None, 0, (), {}
    config = tokenizer = growth = data = None
    history = evals = ()

    @property
    def progress(self) -> Progress:
        return Progress(0.0, None, self.step, 0.0)

    def pause(self):
        self.stop()

"""What a run's job on a server thread (thread_job) and in a child process (training_process) share
(run_protocols.RunJob): fields, threads, weight-copy labels, extend, save check and zip. Torch-free."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from bert_core.errors import BertCoreError
from bert_core.model.files import zip_checkpoint

THREADS_ENV = "BERT_EXPLORER_TORCH_THREADS"        # intra-op threads for training in the app
SLOTS_ENV = "BERT_EXPLORER_MAX_TRAININGS"          # runs preparing or training at once on one server


def positive_env(name: str) -> int | None:
    """`$name` as a whole number above 0; None when unset or anything else."""
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def default_slots(cores: int | None = None) -> int:
    """`$BERT_EXPLORER_MAX_TRAININGS`, else one per core with one core left for the web server."""
    cores = os.cpu_count() or 1 if cores is None else cores
    return positive_env(SLOTS_ENV) or max(1, cores - 1)


def training_threads() -> int:
    """Torch intra-op threads in the app (training and inspection): `$BERT_EXPLORER_TORCH_THREADS`, else the
    cores but one (the web server's) shared out between the allowed concurrent trainings: one each by default.
    Oversubscribed OpenMP threads spin-wait: on a busy 2-core machine two threads ran a nano BERT's training 8x
    and a mini BERT's forward pass 35x slower."""
    return positive_env(THREADS_ENV) or max(1, ((os.cpu_count() or 1) - 1) // default_slots())


def use_training_threads(threads: int | None = None) -> None:
    # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
    import torch

    torch.set_num_threads(max(1, threads) if threads is not None else training_threads())


# While a run trains, the pages of everyone watching it share one copy of its weights for this long: each copy costs
# the weights over the pipe and a model built from them, and every page's cached computation (the Attention page's
# pair summary, the masking accuracy) is keyed by the copy, so a copy per page view made a class of viewers redo
# them all (docs/benchmarks.md, "A class of thirty"). A stopped or finished run's copy is always its last step's.
SNAPSHOT_EVERY_S = 15.0


class JobBase:
    """`busy` and `save` (which `zip_bytes` calls) are each kind's own."""

    def __init__(self, session_id: str, spec: Any, builder: Callable[..., Any] | None):
        self.session_id = session_id
        self.spec = spec
        self._builder = builder
        self.trainer = None         # the Trainer (or FinetuneComparison), or its mirror in the server
        self.error: str | None = None
        self.phase = "new"          # new | preparing | running | stopped | finished | failed
        self.created = time.time()
        self._snapshot = None       # (step, model copy) for inspection while training goes on
        self._snapshot_at = 0.0     # when that copy was taken (time.monotonic)
        self._taking = threading.Lock()   # held by the one page that takes a new copy (model_snapshot)

    busy: bool   # each kind's own (a live thread; a live child process that prepares or trains)
    rebuilds = False   # a live job starts again itself (only a kept race hands its Resume to a new job)

    def _snapshot_serves(self, step: int) -> bool:
        """The copy held is of `step`, or the run trains and the copy is under SNAPSHOT_EVERY_S old."""
        if self._snapshot is None:
            return False
        return self._snapshot[0] == step or (self.busy and time.monotonic() - self._snapshot_at < SNAPSHOT_EVERY_S)

    def model_snapshot(self):
        """The eval-mode copy of the weights every page looking at this run shares (None before it has a trainer):
        inspection must not flip the live model to eval or read half an update. The held copy while it serves, else
        a new one `_take_copy` makes on one page at a time; meanwhile the others of a training run show the copy held
        rather than wait, since each page waiting in turn, then building its own copy and redoing every computation
        keyed by it, was what a class of viewers paid (docs/benchmarks.md, issue 74)."""
        if self.trainer is None:
            return None
        if self._snapshot_serves(self.trainer.step):
            return self._snapshot[1]
        held = self._snapshot
        if not self._taking.acquire(blocking=False):
            if held is not None and self.busy:
                return held[1]
            self._taking.acquire()   # the first copy of a run, or its last step's: the page waits for the one taken
        try:
            if self._snapshot is not held and self._snapshot_serves(self.trainer.step):
                return self._snapshot[1]   # the page this one waited for took it
            return self._take_copy()
        finally:
            self._taking.release()

    def _take_copy(self):
        """A new copy, kept (`_keep_snapshot`), returning its model: each kind's own."""
        raise NotImplementedError

    def _keep_snapshot(self, step: int, model) -> None:
        self._snapshot, self._snapshot_at = (step, model), time.monotonic()

    @property
    def snapshot_step(self) -> int | None:
        """The step of the weight copy held (pages label a model by it), None when none."""
        return self._snapshot[0] if self._snapshot is not None else None

    def extend(self, more_steps: int) -> None:
        """Let a finished run go on for `more_steps` (the schedule stretched to the new end)."""
        if self.trainer is None or self.busy:
            raise BertCoreError("there is no stopped or finished run to continue")
        # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
        from bert_core.training.trainer import extended_config

        cfg = extended_config(self.trainer, more_steps)
        if cfg is None:
            return
        self.trainer.config = cfg
        self._config_changed(cfg)

    def _config_changed(self, cfg) -> None:
        """A job whose trainer lives elsewhere tells it of the extended config (nothing on a thread)."""

    def change_setting(self, name: str, value):
        """Change a setting of this pretraining run while it trains (Trainer.change: from its next update on, kept
        in its record); returns the run's new config. BertCoreError, in words a page shows, when refused."""
        if self.trainer is None or not self.busy or self.trainer.tuners:
            raise BertCoreError("a setting changes while a pretraining run trains: start or resume it first")
        return self._change(name, value)

    def _change(self, name: str, value):
        raise NotImplementedError

    def _check_saveable(self) -> None:
        if self.trainer is None:
            raise BertCoreError("nothing to save yet: start a training run first")

    def zip_bytes(self) -> bytes:
        return zip_checkpoint(self.save)

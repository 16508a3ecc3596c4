"""Training jobs of the explorer's server: one per browser session and kind, on a thread or in a child process,
with a server-wide limit, and stopped when their session is gone. No Streamlit here: the pages (through
`bert_core.serve.app_state`) and the tests drive the same objects.

A job has one protocol whether it runs on a server thread (`TrainingJob`) or in a child process
(`bert_core.serve.training_process.ProcessTrainingJob`): start, stop, busy, phase, error, trainer (the Trainer or its
mirror), model_snapshot, save, zip_bytes, extend, wait, close.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
import weakref
from functools import partial
from pathlib import Path
from typing import Any, Callable

from bert_core.errors import BertCoreError
from bert_core.serve.run_records import CHECKPOINT_EVERY_S
from bert_core.serve.runs import SLOTS_ENV, default_slots

# A Train-page run's spec, and what the page makes it from, live in bert_core.serve.train_spec; pages import them from
# here (tests/test_layers.py lists the modules a page may import), as the tests and benchmarks do.
from bert_core.serve.train_spec import (  # noqa: F401 - re-exported
    WIDGETS,
    TrainSpec,
    build_trainer,
    corpus_text,
    default_probes,
    default_spec,
    page_corpus,
    page_spec,
    page_values_of,
    preview_corpus,
    save_start_weights,
    spec_from_dict,
    spec_with_change,
    training_data_for,
    validate_spec,
    widget_defaults,
)
from bert_core.serve.training_process import ProcessTrainingJob

log = logging.getLogger("bert_core.app")

MAX_TRAININGS_ENV = SLOTS_ENV                       # concurrent trainings on one server (bert_core.serve.runs)
GRACE_ENV = "BERT_EXPLORER_SESSION_GRACE_S"        # how long a vanished session's fine-tuning may live (a blip)
THREADS_ENV = "BERT_EXPLORER_TORCH_THREADS"        # intra-op threads for training in the app
PROCESS_ENV = "BERT_EXPLORER_TRAIN_PROCESS"        # 0: train on a server thread instead of a child process
DEFAULT_GRACE_S = 4.0   # a closed tab's fine-tuning frees its CPU within ~grace + poll + 2 s of stopping


def format_duration(seconds) -> str:
    """'…' for unknown, '42s', '3m 05s': how the pages show elapsed time and time left."""
    if seconds is None:
        return "…"
    seconds = int(seconds)
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def max_trainings() -> int:
    """The server's limit on concurrent trainings (`$BERT_EXPLORER_MAX_TRAININGS`, default cores - 1)."""
    return default_slots()


def training_threads() -> int:
    """Torch intra-op threads in the app (training and inspection): `$BERT_EXPLORER_TORCH_THREADS`, else the
    cores but one (the web server's) shared out between the allowed concurrent trainings: one each by default.
    Oversubscribed OpenMP threads spin-wait: on a busy 2-core machine two threads ran a nano BERT's training 8x
    and a mini BERT's forward pass 35x slower."""
    raw = os.environ.get(THREADS_ENV, "")
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return max(1, ((os.cpu_count() or 1) - 1) // max_trainings())


# Everything on this server that trains (the Fine-tune page's registry, the Train page's run store) shares one
# CPU and one limit: each counts the others' busy trainings.
_CAPACITY_USERS: "weakref.WeakSet" = weakref.WeakSet()


def share_capacity(user) -> None:
    """Count `user.busy_count()` in every other user's view of the server's load."""
    _CAPACITY_USERS.add(user)


def busy_everywhere(exclude=None) -> int:
    """Trainings running on this server now, leaving out `exclude`'s own."""
    return sum(u.busy_count() for u in list(_CAPACITY_USERS) if u is not exclude)


def _env_seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, "") or default)
    except ValueError:
        return default
    return value if 0 <= value < float("inf") else default


# The Train page's objective choice, mapped onto TrainSpec.train (TrainConfig's objective and nsp).
OBJECTIVE_LABELS = {"mlm": "BERT: masked LM + NSP", "clm": "GPT: next token"}
OBJECTIVE_HELP = ("BERT hides 15% of the tokens and predicts them from both sides (and, with NSP, whether B follows "
                  "A); GPT predicts every next token from the tokens before it, with causal attention. Same "
                  "encoder, data and budget: only what is predicted, and from what, differs.")
# Said beside a GPT run's charts, which are named next-token figures.
NEXT_TOKEN_NOTE = ("A GPT-style run: the loss and accuracy are next-token figures (every position predicts the token "
                   "after it, seeing only the tokens before), not masked-token ones, so they do not compare one for "
                   "one with a BERT's; there are no masking decisions to split them by, and no NSP.")


class TrainingJob:
    """One session's training run on a background thread that never calls Streamlit.

    The thread first builds the trainer (corpus, tokenizer, data: seconds to minutes), then runs it; the page
    polls `phase`, `trainer` and `error`.
    """

    def __init__(self, session_id: str, spec: TrainSpec | None = None,
                 builder: Callable[[], Any] | None = None):
        self.session_id = session_id
        self.spec = spec
        self._builder = builder or (lambda: build_trainer(spec))
        self.trainer = None
        self.error: str | None = None
        self.phase = "new"          # new | preparing | running | stopped | finished | failed
        self.thread: threading.Thread | None = None
        self.created = time.time()
        self._stop_requested = threading.Event()
        self._snapshot = None       # (step, model copy) for inspection while training goes on

    @property
    def busy(self) -> bool:
        """True while the thread is alive (preparing or training)."""
        return self.thread is not None and self.thread.is_alive()

    def start(self) -> None:
        """Start (or continue after a stop) on a fresh daemon thread."""
        if self.busy:
            raise BertCoreError("this training is already running")
        self._stop_requested.clear()
        self.error = None if self.phase != "failed" else self.error
        self.phase = "preparing" if self.trainer is None else "running"
        self.thread = threading.Thread(target=self._run, name=f"bert-train-{self.session_id[:8]}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            # Here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
            import torch

            torch.set_num_threads(training_threads())
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
        """Ask the run to stop at the next step boundary; optionally wait up to `wait` seconds for the thread."""
        self._stop_requested.set()
        if self.trainer is not None and self.busy:  # a stop flag left on an idle trainer would end the next run
            self.trainer.stop()
        if wait and self.thread is not None:
            self.thread.join(wait)

    def step_once(self):
        """One more update of a stopped run, recorded for *Step once* (bert_core.inspect.training_step); Resume
        goes on from it as the run would have."""
        if self.trainer is None or self.busy or self.phase != "stopped":
            raise BertCoreError("Step once takes the next update of a stopped run: stop the run first")
        # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
        from bert_core.inspect.training_step import take_one_step

        return take_one_step(self.trainer)

    def extend(self, more_steps: int) -> None:
        """Let a finished run go on for `more_steps` further steps (the schedule is stretched to the new end)."""
        if self.trainer is None or self.busy:
            raise BertCoreError("there is no stopped or finished run to continue")
        # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
        from bert_core.training.trainer import extended_config

        cfg = extended_config(self.trainer, more_steps)
        if cfg is not None:
            self.trainer.config = cfg

    def model_snapshot(self):
        """A frozen eval-mode copy of the model being trained, refreshed when the step changes.

        Inspection must not flip the live model to eval mode or read weights halfway through an update.
        """
        trainer = self.trainer
        if trainer is None:
            return None
        step = trainer.step
        if self._snapshot is not None and self._snapshot[0] == step:
            return self._snapshot[1]
        lock = getattr(trainer, "_step_lock", None)
        if lock is not None:
            with lock:
                step = trainer.step
                model = copy.deepcopy(trainer.model)
        else:
            model = copy.deepcopy(trainer.model)
        model = model.to("cpu").eval()
        self._snapshot = (step, model)
        return model

    def save(self, folder: str | Path) -> Path:
        """Write the run's checkpoint folder (model, tokenizer, trainer state, optimizer)."""
        if self.trainer is None:
            raise BertCoreError("nothing to save yet: start a training run first")
        self.trainer.save(folder)
        return Path(folder)

    def zip_bytes(self) -> bytes:
        """The checkpoint folder as a zip archive, for the download button."""
        # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
        from bert_core.model.checkpoint import zip_checkpoint

        return zip_checkpoint(self.save)

    def wait(self, timeout: float) -> bool:
        """Wait until the thread has ended; True when it has."""
        if self.thread is not None:
            self.thread.join(timeout)
        return not self.busy

    def close(self, wait: float = 10.0) -> None:
        """Nothing to release beyond stopping: the thread ends with its run."""

    # A run on a server thread keeps its model in the server's memory: never lost, never silent, nothing to kill.
    ended_note = None
    model_available = property(lambda self: self.trainer is not None)
    snapshot_step = property(lambda self: self._snapshot[0] if self._snapshot is not None else None)
    kept_step = property(lambda self: self.trainer.step if self.trainer is not None else None)

    def silent_s(self) -> float:
        return 0.0

    def kill(self, why: str, phase: str = "failed") -> None:
        """A thread cannot be ended from outside: ask it to stop (it will at its next step)."""
        self.stop()

    def lost_message(self) -> str:
        return "This run has no model yet."

    def release(self, folder: str | Path) -> None:
        """Nothing to end: a run on a server thread holds no process (its model stays in memory)."""


def train_in_process() -> bool:
    """Pretraining runs in a child process unless `$BERT_EXPLORER_TRAIN_PROCESS` is 0 (then on a server thread).

    The child talks over inherited pipe descriptors (`pass_fds`), which only POSIX systems have: on Windows the
    run stays on a server thread."""
    if os.name != "posix":
        return False
    return os.environ.get(PROCESS_ENV, "1").strip().lower() not in ("0", "false", "no")


def finetune_job(session_id: str, builder: Callable[[], Any]):
    """A job for the Fine-tune page (`builder` returns a FinetuneComparison and must be picklable): in a child
    process like pretraining, or on a server thread when `$BERT_EXPLORER_TRAIN_PROCESS` is 0."""
    if not train_in_process():
        return TrainingJob(session_id, builder=builder)
    return ProcessTrainingJob(session_id, builder, threads=training_threads())


def pretraining_job(session_id: str, spec: TrainSpec, checkpoint_dir: str | Path | None = None):
    """A job for the Train page: by default in a child process (off the server's GIL), else on a thread.
    `checkpoint_dir`: where the run writes the server's safety-net checkpoints (bert_core.serve.run_records)."""
    builder = partial(build_trainer, spec)
    if checkpoint_dir is not None:
        builder = partial(build_trainer, spec, checkpoint_dir=str(checkpoint_dir),
                          checkpoint_every_s=CHECKPOINT_EVERY_S)
    if not train_in_process():
        return TrainingJob(session_id, spec, builder=builder)
    return ProcessTrainingJob(session_id, builder, spec=spec, threads=training_threads(),
                              data_factory=partial(training_data_for, spec))


def restored_pretraining_job(record: dict, checkpoint: Path, phase: str, note: str | None, probes: dict | None):
    """The job of a run an earlier server process recorded (bert_core.serve.run_records), read back from its
    checkpoint: curves, probes and model, no process."""
    spec = spec_from_dict(record["spec"])
    return ProcessTrainingJob.restored(str(record["run_id"]), checkpoint, spec, phase, note, probes,
                                       data_factory=partial(training_data_for, spec))


class JobRegistry:
    """All training jobs of this server process, one per session, with a global concurrency limit.

    A watchdog thread stops (and forgets) jobs whose browser session has been gone for `grace_s` seconds, so
    closing the tab never leaves a thread burning CPU. The concurrency limit counts the busy jobs of every
    registry in the process (pretraining and fine-tuning share one CPU).
    """

    def __init__(self, limit: Callable[[], int] = max_trainings,
                 is_alive: Callable[[str], bool | None] = lambda session_id: None,
                 grace_s: float | None = None, poll_s: float = 1.0):
        self._limit = limit
        self._is_alive = is_alive
        self.grace_s = _env_seconds(GRACE_ENV, DEFAULT_GRACE_S) if grace_s is None else grace_s
        self.poll_s = poll_s
        self._jobs: dict[str, TrainingJob] = {}
        self._gone_since: dict[str, float] = {}
        self._lock = threading.Lock()
        self._watchdog: threading.Thread | None = None
        self.reaped: list[str] = []
        share_capacity(self)

    def get(self, session_id: str) -> TrainingJob | None:
        """This session's job, if any."""
        with self._lock:
            return self._jobs.get(session_id)

    def busy_count(self) -> int:
        """How many jobs of this registry are preparing or training right now."""
        with self._lock:
            return sum(1 for j in self._jobs.values() if j.busy)

    def start(self, job: TrainingJob) -> None:
        """Register and start (or resume) a job, unless the server is already running its limit of trainings."""
        elsewhere = busy_everywhere(exclude=self)  # before our lock: the others take theirs
        with self._lock:
            others = elsewhere + sum(1 for j in self._jobs.values()
                                     if j.busy and j is not job and j.session_id != job.session_id)
            limit = self._limit()
            if others >= limit:
                raise BertCoreError(
                    f"the server is already running {others} training run(s), its limit "
                    f"({MAX_TRAININGS_ENV}={limit}); wait for one to finish, or explore the shipped checkpoint "
                    "meanwhile")
            old = self._jobs.get(job.session_id)
            if old is not None and old is not job and old.busy:
                raise BertCoreError("this session already has a training running; stop it first")
            self._jobs[job.session_id] = job
            job.start()
            self._ensure_watchdog()

    def discard(self, session_id: str, wait: float = 5.0) -> None:
        """Stop and forget a session's job (Reset, or its session closed)."""
        with self._lock:
            job = self._jobs.pop(session_id, None)
            self._gone_since.pop(session_id, None)
        if job is not None:
            job.stop(wait=wait)
            job.close(wait=wait)

    def reap(self, now: float | None = None) -> list[str]:
        """Stop jobs whose session has been gone longer than the grace period; return their session ids."""
        now = time.monotonic() if now is None else now
        doomed = []
        with self._lock:
            for sid in list(self._jobs):
                alive = self._is_alive(sid)
                if alive is None or alive:
                    self._gone_since.pop(sid, None)
                    continue
                since = self._gone_since.setdefault(sid, now)
                if now - since >= self.grace_s:
                    doomed.append(sid)
        for sid in doomed:
            log.warning("stopping the training of closed session %s", sid)
            self.reaped.append(sid)  # before the job leaves the registry, so a reader never sees it in neither
            # Nobody will see this run again: end its process at once rather than at a step boundary.
            self.discard(sid, wait=1.0)
        return doomed

    def _ensure_watchdog(self) -> None:
        if self._watchdog is not None and self._watchdog.is_alive():
            return
        self._watchdog = threading.Thread(target=self._watch, name="bert-train-watchdog", daemon=True)
        self._watchdog.start()

    def _watch(self) -> None:
        while True:
            time.sleep(self.poll_s)
            try:
                self.reap()
            except Exception:  # noqa: BLE001 - the watchdog must outlive one bad poll
                log.exception("watchdog poll failed")
            with self._lock:
                if not self._jobs:
                    self._watchdog = None
                    return

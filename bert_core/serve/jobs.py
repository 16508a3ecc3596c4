"""Training jobs of the explorer's server: the job of one run of the server's store (`bert_core.serve.runs`), a
pretraining run or a fine-tuning race, on a thread or in a child process. No Streamlit here: the pages (through
`bert_core.serve.app_state`) and the tests drive the same objects.

A job has one protocol whether it runs on a server thread (`TrainingJob`) or in a child process
(`bert_core.serve.training_process.ProcessTrainingJob`): start, stop, pause, busy, phase, error, trainer (the Trainer
or its mirror), model_snapshot, save, zip_bytes, extend, wait, close.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from dataclasses import replace
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
THREADS_ENV = "BERT_EXPLORER_TORCH_THREADS"        # intra-op threads for training in the app
PROCESS_ENV = "BERT_EXPLORER_TRAIN_PROCESS"        # 0: train on a server thread instead of a child process


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
        """True while the thread is alive (preparing or training), and between start() making it and starting it:
        another thread (the scheduler's, a page's) can look in that gap."""
        thread = self.thread
        return thread is not None and (thread.ident is None or thread.is_alive())

    def start(self) -> None:
        """Start (or continue after a stop) on a fresh daemon thread."""
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
        if wait:
            self._join(wait)

    def pause(self) -> None:
        """End the run's turn on a shared server: a pretraining run stops at its next step, a fine-tuning race once
        the model in training has finished; start() goes on from there."""
        trainer = self.trainer
        if trainer is not None and self.busy:
            trainer.pause()

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
        with trainer._step_lock:   # held during an update (run_loop.RunLoop): a copy of whole steps only
            step = trainer.step
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
        self._join(timeout)
        return not self.busy

    def _join(self, timeout: float) -> None:
        """Join the thread, also when another thread's start() has made it and not yet started it (join() would
        raise then)."""
        deadline = time.monotonic() + timeout
        thread = self.thread
        while thread is not None and thread.ident is None and time.monotonic() < deadline:
            time.sleep(0.01)
            thread = self.thread
        if thread is not None and thread.ident is not None:
            thread.join(max(0.0, deadline - time.monotonic()))

    def close(self, wait: float = 10.0) -> None:
        """Nothing to release beyond stopping: the thread ends with its run."""

    # A run on a server thread keeps its model in the server's memory: never lost, never silent, nothing to kill,
    # never released to a folder.
    ended_note = None
    released = None
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


def finetune_job(session_id: str, builder: Callable[..., Any], device: str | None = None):
    """A job for the Fine-tune page (`builder` returns a FinetuneComparison and must be picklable): in a child
    process like pretraining, or on a server thread when `$BERT_EXPLORER_TRAIN_PROCESS` is 0. `device`: where the
    server's queue gave it a slot; a GPU is passed to `builder(device=...)`, the CPU is the builder's own default
    (build_comparison's), so a builder that knows no devices still runs on a CPU slot."""
    if device not in (None, "cpu"):
        builder = partial(builder, device=device)
    if not train_in_process():
        return TrainingJob(session_id, builder=builder)
    return ProcessTrainingJob(session_id, builder, threads=training_threads())


def pretraining_job(session_id: str, spec: TrainSpec, checkpoint_dir: str | Path | None = None,
                    device: str | None = None):
    """A job for the Train page: by default in a child process (off the server's GIL), else on a thread.
    `checkpoint_dir`: where the run writes the server's safety-net checkpoints (bert_core.serve.run_records);
    `device`: where the server's queue gave it a slot (None: the spec's own, the CPU for a page's spec)."""
    # The spec the run keeps (its record, its train command) stays as the page made it: only the trainer built in
    # the training process goes to the slot's device.
    built = spec if device is None else replace(spec, train={**spec.train, "device": device})
    builder = partial(build_trainer, built)
    if checkpoint_dir is not None:
        builder = partial(build_trainer, built, checkpoint_dir=str(checkpoint_dir),
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

"""Which job trains a run, and what builds its training: the one decision between the spec a page makes and the
thread or process that trains it, made here for the server's run store (`JobFactory`) and for the tests and
benchmarks that start a job themselves (`pretraining_job`, `finetune_job`).

A job kind is a maker in JOB_KINDS: "process" (a child process, `training_process.ProcessTrainingJob`, the default)
or "thread" (a server thread, `thread_job.TrainingJob`). A plug-in kind is a module named in PLUGINS, imported only
when chosen: "ray" (actors on a Ray cluster, `bert_core.cluster`) when `$BERT_EXPLORER_RAY_ADDRESS` is set. Each
implements run_protocols.RunJob; the builders are the same for all.
No Streamlit, no torch, no plug-in.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable

from bert_core.serve.finetune_runs import race_builder
from bert_core.training.finetune_spec import FinetuneSpec
from bert_core.serve.job_base import training_threads
from bert_core.serve.run_protocols import RunJob
from bert_core.serve.run_records import CHECKPOINT_EVERY_S, RunRecords
from bert_core.serve.runs import default_slots, where_runs_train
from bert_core.serve.server_gpus import detected_gpus
from bert_core.serve.thread_job import TrainingJob
from bert_core.serve.train_spec import build_trainer, training_data_for
from bert_core.serve.training_process import ProcessTrainingJob
from bert_core.training.train_spec import TrainSpec, spec_from_dict

PROCESS_ENV = "BERT_EXPLORER_TRAIN_PROCESS"        # 0: train on a server thread instead of a child process
RAY_ADDRESS_ENV = "BERT_EXPLORER_RAY_ADDRESS"      # a Ray cluster's address ("auto", "ray://head:10001", "head:6379")
# Job kinds that live outside the server, by module: each has make_job (a JobMaker), slots(), gpus() and where().
PLUGINS = {"ray": "bert_core.cluster.ray_job"}

# (session id, builder, spec or None, data_factory or None) -> a job. The builder returns the Trainer or the
# FinetuneComparison and must be picklable (a process job sends it to its child); data_factory(tokenizer) rebuilds a
# pretraining run's data where the job's mirror is (None: a race, or a job whose trainer is in this process). A maker
# also takes `device=`: the slot the queue gave the run (a job on a cluster asks for a GPU share by it).
JobMaker = Callable[..., RunJob]


def _thread_job(session_id, builder, spec=None, data_factory=None, device=None) -> RunJob:
    return TrainingJob(session_id, spec, builder=builder)


def _process_job(session_id, builder, spec=None, data_factory=None, device=None) -> RunJob:
    return ProcessTrainingJob(session_id, builder, spec=spec, threads=training_threads(), data_factory=data_factory)


def plugin(kind: str):
    """The module of a plug-in job kind (PLUGINS), imported now: a server that never chooses it never loads it."""
    return importlib.import_module(PLUGINS[kind])


JOB_KINDS: dict[str, JobMaker] = {"thread": _thread_job, "process": _process_job,
                                  **{k: lambda *a, k=k, **kw: plugin(k).make_job(*a, **kw) for k in PLUGINS}}


def ray_address() -> str | None:
    """The Ray cluster's address from `$BERT_EXPLORER_RAY_ADDRESS`; None (the default) trains on this machine."""
    return os.environ.get(RAY_ADDRESS_ENV, "").strip() or None


def job_kind() -> str:
    """The kind of job this server trains its runs in (a key of JOB_KINDS): a Ray cluster's actors when
    `$BERT_EXPLORER_RAY_ADDRESS` is set, else a child process or a thread."""
    return "ray" if ray_address() is not None else local_job_kind()


def local_job_kind() -> str:
    """The kind of job on this server's own cores: a child process, unless `$BERT_EXPLORER_TRAIN_PROCESS` is 0 (a
    server thread). The child talks over inherited pipe descriptors (`pass_fds`), which only POSIX systems have: on
    Windows the run stays on a server thread."""
    in_process = os.environ.get(PROCESS_ENV, "1").strip().lower() not in ("0", "false", "no")
    return "process" if in_process and os.name == "posix" else "thread"


def server_job_kind() -> Callable[[], str]:
    """The job kind of a server that starts now: whether it trains on a Ray cluster is decided once, here, so that
    the setting appearing later (in a test, a shell) never moves a running server's queue onto a cluster it never
    joined (its scheduler would block connecting); process or thread stays a live choice."""
    on_ray = ray_address() is not None
    return (lambda: "ray") if on_ray else local_job_kind


def finetune_job(session_id: str, builder: Callable[..., Any], device: str | None = None, kind: str | None = None):
    """A job for the Fine-tune page (`builder` returns a FinetuneComparison and must be picklable): in a child
    process like pretraining, or on a server thread when `$BERT_EXPLORER_TRAIN_PROCESS` is 0. `device`: where the
    server's queue gave it a slot; a GPU is passed to `builder(device=...)`, the CPU is the builder's own default
    (build_comparison's), so a builder that knows no devices still runs on a CPU slot."""
    if device not in (None, "cpu"):
        builder = partial(builder, device=device)
    return JOB_KINDS[kind or job_kind()](session_id, builder, device=device)


def pretraining_job(session_id: str, spec: TrainSpec, checkpoint_dir: str | Path | None = None,
                    device: str | None = None, kind: str | None = None):
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
    return JOB_KINDS[kind or job_kind()](session_id, builder, spec, partial(training_data_for, spec), device=device)


def restored_pretraining_job(record: dict, checkpoint: Path, phase: str, note: str | None, probes: dict | None,
                             resumable: bool = True):
    """The job of a run an earlier server process recorded (bert_core.serve.run_records), read back from its
    checkpoint: curves, probes and model, no process; a stopped one resumable from there in a new process when
    `resumable` (a server on Ray keeps its runs on the cluster: there it is trained on from its weights)."""
    spec = spec_from_dict(record["spec"])
    job = ProcessTrainingJob.restored(str(record["run_id"]), checkpoint, spec, phase, note, probes,
                                      data_factory=partial(training_data_for, spec))
    if not resumable:
        job.parked = None
    return job


@dataclass(frozen=True)
class JobFactory:
    """The run store's maker of jobs (runs.RunStore's job_factory and restore_job): a Fine-tune race's or a Train
    run's, on the slot the queue gave it, its safety-net checkpoints in `records`' folder for it."""

    records: RunRecords | None = None
    kind: Callable[[], str] = job_kind

    def __call__(self, run) -> RunJob:
        # run.device: where the queue gave the run its first slot (a GPU of the server's, or its CPU)
        if isinstance(run.spec, FinetuneSpec):
            return finetune_job(run.run_id, race_builder(run.spec), device=run.device, kind=self.kind())
        checkpoint_dir = self.records.checkpoint_for(run.run_id) if self.records is not None else None
        return pretraining_job(run.run_id, run.spec, checkpoint_dir=checkpoint_dir, device=run.device,
                               kind=self.kind())

    def slots(self) -> int:
        """The runs this server trains at once (runs.RunStore's `slots`): its cores', or a plug-in's (a cluster's)."""
        kind = self.kind()
        return plugin(kind).slots() if kind in PLUGINS else default_slots()

    def gpus(self) -> tuple:
        """The GPUs its runs train on (runs.RunStore's `gpus`): its own, or a plug-in's."""
        kind = self.kind()
        return plugin(kind).gpus() if kind in PLUGINS else detected_gpus()

    def where(self, caps: dict[str, int], gpus: list) -> str:
        """Where its runs train, as the pages say it (runs.RunStore's `where`): this server, or a plug-in's."""
        kind = self.kind()
        return plugin(kind).where(caps, gpus) if kind in PLUGINS else where_runs_train(caps, gpus)

    def restore(self, record: dict, checkpoint: Path, phase: str, note: str | None, probes: dict | None) -> RunJob:
        """A run an earlier server process recorded, read back from its checkpoint (no process, whatever the kind;
        a plug-in's stopped run is trained on from its weights, not resumed)."""
        return restored_pretraining_job(record, checkpoint, phase, note, probes, resumable=self.kind() not in PLUGINS)

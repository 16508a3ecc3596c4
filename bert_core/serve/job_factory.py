"""Which job trains a run, and what builds its training: for the server's run store (`JobFactory`) and for tests and
benchmarks that start a job themselves (`pretraining_job`, `finetune_job`). A job kind is a maker in JOB_KINDS, each a
run_protocols.RunJob with the same builders: "process" (`training_process.ProcessTrainingJob`, the default), "thread"
(`thread_job.TrainingJob`), or a plug-in module in PLUGINS, imported only when chosen ("ray", when
`$BERT_EXPLORER_RAY_ADDRESS` is set). No Streamlit, no torch at import.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from bert_core.serve.finetune_runs import race_builder
from bert_core.training.finetune_spec import FinetuneSpec
from bert_core.serve.job_base import default_slots, training_threads
from bert_core.serve.run_protocols import RunJob
from bert_core.serve.run_records import CHECKPOINT_EVERY_S, RunRecords
from bert_core.serve.runs import where_runs_train
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
    return importlib.import_module(PLUGINS[kind])


JOB_KINDS: dict[str, JobMaker] = {"thread": _thread_job, "process": _process_job,
                                  **{k: lambda *a, k=k, **kw: plugin(k).make_job(*a, **kw) for k in PLUGINS}}
# This server's own answers to what a plug-in module answers (JobFactory's slots, gpus and where).
_LOCAL = SimpleNamespace(slots=default_slots, gpus=detected_gpus, where=where_runs_train)


def ray_address() -> str | None:
    return os.environ.get(RAY_ADDRESS_ENV, "").strip() or None


def job_kind() -> str:
    return "ray" if ray_address() is not None else local_job_kind()


def local_job_kind() -> str:
    """A child process, unless `$BERT_EXPLORER_TRAIN_PROCESS` is 0, or on Windows, which has no inherited pipe
    descriptors (`pass_fds`): a server thread."""
    in_process = os.environ.get(PROCESS_ENV, "1").strip().lower() not in ("0", "false", "no")
    return "process" if in_process and os.name == "posix" else "thread"


def server_job_kind() -> Callable[[], str]:
    """The job kind of a server that starts now: Ray or not is decided once, so that the setting appearing later never
    moves a running server's queue onto a cluster it never joined; process or thread stays a live choice."""
    on_ray = ray_address() is not None
    return (lambda: "ray") if on_ray else local_job_kind


def finetune_job(session_id: str, builder: Callable[..., Any], device: str | None = None, kind: str | None = None):
    """A Fine-tune race's job (`builder`, picklable, returns a FinetuneComparison). A GPU slot's `device` is passed to
    `builder(device=...)`; the CPU is the builder's own default, so a builder that knows no devices runs there."""
    if device not in (None, "cpu"):
        builder = partial(builder, device=device)
    return JOB_KINDS[kind or job_kind()](session_id, builder, device=device)


def pretraining_job(session_id: str, spec: TrainSpec, checkpoint_dir: str | Path | None = None,
                    device: str | None = None, kind: str | None = None):
    """A Train-page run's job. `checkpoint_dir`: where it writes the server's safety-net checkpoints (run_records);
    `device`: its slot's (None: the spec's own). The spec the run keeps stays as the page made it."""
    built = spec if device is None else replace(spec, train={**spec.train, "device": device})
    safety_net = {} if checkpoint_dir is None else {"checkpoint_dir": str(checkpoint_dir),
                                                    "checkpoint_every_s": CHECKPOINT_EVERY_S}
    builder = partial(build_trainer, built, **safety_net)
    return JOB_KINDS[kind or job_kind()](session_id, builder, spec, partial(training_data_for, spec), device=device)


def restored_pretraining_job(record: dict, checkpoint: Path, phase: str, note: str | None, probes: dict | None,
                             resumable: bool = True):
    """A run an earlier server process recorded, read back from its checkpoint (no process); a stopped one resumes
    in a new process when `resumable` (on Ray it is trained on from its weights instead)."""
    spec = spec_from_dict(record["spec"])
    job = ProcessTrainingJob.restored(str(record["run_id"]), checkpoint, spec, phase, note, probes,
                                      data_factory=partial(training_data_for, spec))
    if not resumable:
        job.parked = None
    return job


@dataclass(frozen=True)
class JobFactory:
    """The run store's job_factory, restore_job, slots, gpus and where: this server's, or a plug-in's."""

    records: RunRecords | None = None
    kind: Callable[[], str] = job_kind

    def __call__(self, run) -> RunJob:
        if isinstance(run.spec, FinetuneSpec):
            return finetune_job(run.run_id, race_builder(run.spec), device=run.device, kind=self.kind())
        checkpoint_dir = self.records.checkpoint_for(run.run_id) if self.records is not None else None
        return pretraining_job(run.run_id, run.spec, checkpoint_dir=checkpoint_dir, device=run.device,
                               kind=self.kind())

    def _plugin(self):
        kind = self.kind()
        return plugin(kind) if kind in PLUGINS else None

    def slots(self) -> int:
        return (self._plugin() or _LOCAL).slots()

    def gpus(self) -> tuple:
        return (self._plugin() or _LOCAL).gpus()

    def where(self, caps: dict[str, int], gpus: list) -> str:
        return (self._plugin() or _LOCAL).where(caps, gpus)

    def restore(self, record: dict, checkpoint: Path, phase: str, note: str | None, probes: dict | None) -> RunJob:
        return restored_pretraining_job(record, checkpoint, phase, note, probes, resumable=self.kind() not in PLUGINS)

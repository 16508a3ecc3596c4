"""A fine-tuning race as a run of the server's one queue (`bert_core.serve.runs.RunStore`), on the pretraining runs'
road: its plain-data spec (bert_core.training.finetune_spec.FinetuneSpec) goes down to its training process, events
come back up, and its record and kept results (bert_core.training.kept_race) bring it back after a restart. No
Streamlit and no torch here."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from bert_core.errors import BertCoreError
from bert_core.serve.run_protocols import FINETUNE_PAGE
from bert_core.training.finetune_spec import FinetuneSpec


def _race_modules():
    """bert_core.training's finetune_race (a race's builder, called in its training process) and kept_race (a kept
    race's view, read back once the server has runs to restore)."""
    # Imported here, not at the top: they load torch, and the server imports this module without it (TORCH_FREE).
    from bert_core.training import finetune_race, kept_race

    return finetune_race, kept_race


def race_builder(spec: FinetuneSpec):
    """The builder of `spec`'s race for its training process (picklable: the spec is plain data). The server decides
    which builder a run gets (bert_core.serve.job_factory), as it does a pretraining run's."""
    return partial(_race_modules()[0].build_race, spec)


def race_score(trainer: Any) -> str:
    """The pretrained model's latest validation figure, named ('84.6% F1', '72.0% accuracy'); '' before its first
    pass (or before its training process has sent its runs)."""
    for tuner in trainer.tuners if trainer is not None else ():
        if tuner.name == "pretrained" and tuner.evals:
            ev, f1 = tuner.evals[-1], bool(trainer.primary)
            return f"{ev.macro_f1 if f1 else ev.accuracy:.1%} {'F1' if f1 else 'accuracy'}"
    return ""


def is_race_record(record: dict) -> bool:
    """True when a run record (bert_core.serve.run_records) is a fine-tuning race's."""
    return record.get("page") == FINETUNE_PAGE


class KeptRaceJob:
    """A race that no process runs any more, read back from its folder (a server restart, or an ended race whose
    models went to disk): the RunJob the queue and the pages read. Its live view is a kept_race.KeptRace.

    One that a server restart stopped part-way is `parked` (its folder): Resume queues it, and the scheduler then
    gives the run a new job (`rebuilds`), whose process builds the race again over that folder and goes on from it."""

    busy = False
    model_available = True

    def __init__(self, session_id: str, spec: FinetuneSpec, folder: Path, phase: str, note: str | None = None,
                 resumable: bool = False):
        self.session_id, self.spec, self.phase = session_id, spec, phase
        self.trainer = _race_modules()[1].KeptRace(spec, folder, phase)
        self.error = self.trainer.error if phase == "failed" else None
        self.ended_note = note
        self.released: Path | None = Path(folder).resolve()
        self.parked: Path | None = self.released if resumable and phase == "stopped" else None

    @property
    def rebuilds(self) -> bool:
        """True when the run's next start is a new job's (a race a restart stopped, which Resume takes up)."""
        return self.parked is not None

    def start(self) -> None:
        raise BertCoreError("this race has ended: start a new one")

    def stop(self, wait: float | None = None) -> None:
        """Nothing runs."""

    def pause(self) -> None:
        """Nothing runs."""

    def wait(self, timeout: float) -> bool:
        return True

    def close(self, wait: float = 10.0) -> None:
        """No process to end."""

    def kill(self, why: str, phase: str = "failed") -> None:
        """No process to end."""

    def silent_s(self) -> float:
        return 0.0

    def release(self, folder: str | Path) -> None:
        """Its results are in their folder already."""


def restored_race_job(record: dict, folder: Path, phase: str, note: str | None) -> KeptRaceJob:
    """The job of a race an earlier server process recorded, read back from its kept results; one that was under
    way when that server ended (training, or waiting for its next turn) comes back stopped, and resumable."""
    under_way = record.get("phase") not in ("finished", "stopped", "failed")
    return KeptRaceJob(str(record["run_id"]), FinetuneSpec.from_dict(record["spec"]), folder, phase, note,
                       resumable=under_way)


def can_resume(run) -> bool:
    """True when `run` is a race a server restart stopped part-way, which its owner's Resume takes up where its
    folder left it (RunStore.resume)."""
    job = run.job if run is not None else None
    return isinstance(job, KeptRaceJob) and job.rebuilds and not run.active and not run.released


RESUME_HELP = ("Go on where the restart stopped it: the models that had ended are kept as they were, the one in "
               "training goes on from its last checkpoint (written every minute), the rest run. The results are "
               "those of the race never stopped.")


def restoring(restore_pretraining):
    """The store's restore function for both kinds of run: a race's record is read back here, a pretraining run's
    by `restore_pretraining(record, checkpoint, phase, note, probes)`."""
    def restore(record: dict, checkpoint: Path, phase: str, note: str | None, probes: dict | None):
        if is_race_record(record):
            return restored_race_job(record, checkpoint, phase, note)
        return restore_pretraining(record, checkpoint, phase, note, probes)
    return restore


# ---------------------------------------------------------------------------------------------- the page's races

# The page's built-in data by its widget's names, as the spec names them (the CLI's names).
PAGE_TASKS = {"toy": "toy", "toy_order": "toy-order", "toy_qa": "toy-qa"}
def keep_upload(folder: Path, data: bytes, name: str) -> str:
    """Write an uploaded file into the race's record folder (its training process, and a restarted server, read
    it from there); returns its path. The file's own name goes in the spec, never in a path."""
    folder = Path(folder) / "upload"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "data"
    path.write_bytes(data)
    return str(path)

"""A fine-tuning race as a run of the server's one queue (`bert_core.serve.runs.RunStore`), on the pretraining runs'
road: its plain-data spec (bert_core.training.finetune_spec.FinetuneSpec) goes down to its training process, events
come back up, and its record and kept results (bert_core.training.kept_race) bring it back after a restart. No
Streamlit and no torch here."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from bert_core.errors import BertCoreError
from bert_core.serve.run_protocols import FINETUNE_PAGE
from bert_core.training.finetune_spec import FinetuneSpec


def _race_modules():
    # Imported here, not at the top: they load torch, and the server imports this module without it (TORCH_FREE).
    from bert_core.training import finetune_race, kept_race

    return finetune_race, kept_race


def race_builder(spec: FinetuneSpec):
    """The builder of `spec`'s race for its training process (picklable: the spec is plain data)."""
    return partial(_race_modules()[0].build_race, spec)


def is_race_record(record: dict) -> bool:
    """True when a run record (bert_core.serve.run_records) is a fine-tuning race's."""
    return record.get("page") == FINETUNE_PAGE


class KeptRaceJob:
    """A race no process runs any more, read back from its folder (its live view kept_race.read_race's). One a restart
    stopped part-way is `parked`: Resume gives the run a new job (`rebuilds`) that goes on over that folder."""

    busy = False
    model_available = True

    def __init__(self, session_id: str, spec: FinetuneSpec, folder: Path, phase: str, note: str | None = None,
                 resumable: bool = False):
        self.session_id, self.spec, self.phase = session_id, spec, phase
        self.trainer = _race_modules()[1].read_race(spec, folder, phase)
        self.error = self.trainer.error if phase == "failed" else None
        self.ended_note = note
        self.released: Path | None = Path(folder).resolve()
        self.parked: Path | None = self.released if resumable and phase == "stopped" else None

    @property
    def rebuilds(self) -> bool:
        return self.parked is not None

    def start(self) -> None:
        raise BertCoreError("this race has ended: start a new one")

    # Nothing runs: no process to stop, end or release (its results are in their folder already).
    def stop(self, wait: float | None = None) -> None: ...
    def pause(self) -> None: ...
    def close(self, wait: float = 10.0) -> None: ...
    def kill(self, why: str, phase: str = "failed") -> None: ...
    def release(self, folder: str | Path) -> None: ...

    def wait(self, timeout: float) -> bool:
        return True

    def silent_s(self) -> float:
        return 0.0


def can_resume(run) -> bool:
    """True when `run` is a race a server restart stopped part-way, which its owner's Resume takes up."""
    job = run.job if run is not None else None
    return isinstance(job, KeptRaceJob) and job.rebuilds and not run.active and not run.released


RESUME_HELP = ("Go on where the restart stopped it: the models that had ended are kept as they were, the one in "
               "training goes on from its last checkpoint (written every minute), the rest run. The results are "
               "those of the race never stopped.")


def restoring(restore_pretraining):
    """The store's restore function: a race's record is read back here (one that was under way comes back
    resumable), a pretraining run's by `restore_pretraining`."""
    def restore(record: dict, checkpoint: Path, phase: str, note: str | None, probes: dict | None):
        if is_race_record(record):
            return KeptRaceJob(str(record["run_id"]), FinetuneSpec.from_dict(record["spec"]), checkpoint, phase, note,
                               resumable=record.get("phase") not in ("finished", "stopped", "failed"))
        return restore_pretraining(record, checkpoint, phase, note, probes)
    return restore


# ---------------------------------------------------------------------------------------------- the page's races

# The page's built-in data by its widget's names, as the spec names them (the CLI's names).
PAGE_TASKS = {"toy": "toy", "toy_order": "toy-order", "toy_qa": "toy-qa"}


def keep_upload(folder: Path, data: bytes, name: str) -> str:
    """Write an upload into the race's record folder, where its process and a restarted server read it; returns its
    path. The file's own name goes in the spec, never in a path."""
    folder = Path(folder) / "upload"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "data"
    path.write_bytes(data)
    return str(path)

"""A fine-tuning race as a run of the server's one queue (`bert_core.serve.runs.RunStore`), on the pretraining runs'
road: a plain-data spec goes down (what it trains, by reference: its model's folder, its data choice, its settings
under FinetuneConfig's own names), events come back up, and its record and kept results bring it back after a
restart. No Streamlit and no torch here.

The one builder, `bert_core.training.finetune_race.build_race`, turns a spec into the race: in the run's training
process for the page, in the command's own process for `python -m bert_core finetune`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from bert_core.errors import BertCoreError
from bert_core.serve.run_protocols import FINETUNE_PAGE

KIND_LABELS = {"labels": "sentence labels", "tags": "token tags", "spans": "answer spans"}


@dataclass(frozen=True)
class RaceData:
    """The data of a race, by reference: a built-in or real task by name (the CLI's names: toy, toy-order, toy-qa,
    polarity, ag_news, conll2000), or a file (`csv`, `conll` or `squad`; an upload is kept as a file and read under
    its own `name`)."""

    task: str | None = None
    csv: str | None = None
    conll: str | None = None
    squad: str | None = None
    name: str | None = None
    text_columns: tuple[str, ...] | None = None
    label_column: str | None = None
    pair: bool = False
    drop_empty: bool = False
    tag_column: str | int = "chunk"
    drills: bool = True
    seed: int = 0   # a built-in task's generator seed (the page's are always 0; the CLI's, its --seed)


def _finetune_race():
    """bert_core.training.finetune_race: a race's builder (called in the training process) and its kept view (read
    back once the server has runs to restore)."""
    # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
    from bert_core.training import finetune_race

    return finetune_race


@dataclass(frozen=True)
class FinetuneSpec:
    """One race, as plain data (JSON in its run's record): what it trains and what is known of it before it runs.

    `checkpoint`: the pretrained model's folder (None: a fresh model of `scratch_preset`); `source_run`: the
    pretraining run it came from, when it did; `compare`: (name, folder) of the models that race it; `scratch`: the
    from-scratch twin; `baseline`: the kind's baseline lines. `settings`: FinetuneConfig's fields under their own
    names (time_budget_s, max_steps, batch_size, max_length, learning_rate, seed...). `data_label` and
    `model_label` name the data and the model as a reader knows them, never by a server path. `keep_in`: where its
    training process keeps its results as each model ends, and the checkpoints of the model in training, one every
    `checkpoint_every_s` and at a stop (the run's record folder; None: nowhere). A race built again over that folder
    goes on from what it holds (finetune_race.build_race): a server restart's Resume.
    """

    kind: str = "labels"
    data: RaceData = field(default_factory=RaceData)
    checkpoint: str | None = None
    settings: dict = field(default_factory=dict)
    source_run: str | None = None
    scratch_preset: str | None = None
    compare: tuple[tuple[str, str], ...] = ()
    scratch: bool = True
    baseline: bool = False
    train_size: int | None = None
    val_size: int | None = None
    pooling: str | None = None
    data_label: str = ""
    model_label: str = ""
    keep_in: str | None = None
    checkpoint_every_s: float = 60.0
    recorded: ClassVar[bool] = True
    page: ClassVar[str] = FINETUNE_PAGE

    @property
    def builder(self):
        """The race's builder for a training process (picklable: this spec is plain data)."""
        return partial(_finetune_race().build_race, self)

    @property
    def models(self) -> int:
        """The neural models it trains one after the other (a baseline takes seconds and is not counted)."""
        return 1 + len(self.compare) + int(self.checkpoint is not None and self.scratch)

    @property
    def budget_s(self) -> float:
        """Each model's time cap in seconds (0: none)."""
        return float(self.settings.get("time_budget_s") or 0.0)

    @property
    def longest_part_s(self) -> float:
        """The longest stretch it trains without yielding its slot: one model's budget (a race yields between
        its models, never within one)."""
        return self.budget_s

    @property
    def expected_s(self) -> float:
        """How long the whole race holds a slot, as its budget says (preparing and evaluating not counted)."""
        return self.budget_s * max(1, self.models)

    @property
    def corpus_label(self) -> str:
        return self.data_label

    @property
    def task_label(self) -> str:
        """'token tags on CoNLL-2000 chunks', as a run list shows it."""
        return f"{KIND_LABELS.get(self.kind, self.kind)} on {self.data_label}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "FinetuneSpec":
        """The spec of a run record (BertCoreError when it is not one)."""
        try:
            data = dict(d["data"])
            if data.get("text_columns") is not None:
                data["text_columns"] = tuple(data["text_columns"])
            return cls(**{**d, "data": RaceData(**data), "settings": dict(d["settings"]),
                          "compare": tuple((str(n), str(f)) for n, f in d.get("compare", ()))})
        except (KeyError, TypeError, ValueError) as exc:
            raise BertCoreError(f"not a fine-tuning race's record ({exc})") from exc


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
    models went to disk): the RunJob the queue and the pages read. Its live view is a finetune_race.KeptRace.

    One that a server restart stopped part-way is `parked` (its folder): Resume queues it, and the scheduler then
    gives the run a new job (`rebuilds`), whose process builds the race again over that folder and goes on from it."""

    busy = False
    model_available = True

    def __init__(self, session_id: str, spec: FinetuneSpec, folder: Path, phase: str, note: str | None = None,
                 resumable: bool = False):
        self.session_id, self.spec, self.phase = session_id, spec, phase
        self.trainer = _finetune_race().KeptRace(spec, folder, phase)
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
# The page's settings widgets (`ft_<name>`, kept as they were so that old links still fill them) by the
# FinetuneConfig field each sets.
PAGE_SETTINGS = {"steps": "max_steps", "budget": "time_budget_s", "lr": "learning_rate", "batch": "batch_size",
                 "maxlen": "max_length", "seed": "seed"}


def page_settings(widgets: dict) -> dict:
    """The page's widget values as FinetuneConfig settings: steps decide (the same figures on a busy server as on
    a quiet one), the time cap in seconds cuts a model short only on a machine too slow for them; ten validation
    passes a model."""
    settings = {PAGE_SETTINGS[k]: widgets[k] for k in PAGE_SETTINGS}
    settings["max_steps"] = int(settings["max_steps"]) or None
    settings["time_budget_s"] = float(settings["time_budget_s"]) or None
    settings["learning_rate"] = float(settings["learning_rate"])
    return {**settings, "eval_points": 10}


def keep_upload(folder: Path, data: bytes, name: str) -> str:
    """Write an uploaded file into the race's record folder (its training process, and a restarted server, read
    it from there); returns its path. The file's own name goes in the spec, never in a path."""
    folder = Path(folder) / "upload"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "data"
    path.write_bytes(data)
    return str(path)

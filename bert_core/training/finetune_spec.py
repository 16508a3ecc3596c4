"""A fine-tuning race as plain data (`FinetuneSpec`, its data by reference in `RaceData`): what the `finetune` command
and the Fine-tune page ask for, and what a run's record keeps (JSON). The one builder,
bert_core.training.finetune_race.build_race, turns a spec into the race: in the command's own process, or in the
training process of the page's run. Torch-free: the server reads specs without loading torch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from bert_core.errors import BertCoreError

FINETUNE_PAGE = "Fine-tune"   # the page whose runs races are (bert_core.serve.run_protocols.RunSpec.page)
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


@dataclass(frozen=True)
class FinetuneSpec:
    """One race, as plain data (JSON in its run's record): what it trains and what is known of it before it runs.

    `checkpoint`: the pretrained model's folder (None: a fresh model of `scratch_preset`); `source_run`: the
    pretraining run it came from; `compare`: (name, folder) of the models that race it; `settings`: FinetuneConfig's
    fields by name. `data_label` and `model_label` name the data and the model as a reader knows them, never by a
    server path. `keep_in`: the run's record folder, where its results and checkpoints are kept (finetune_race)."""

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

    def config_settings(self, device: str | None = None) -> dict:
        """Its FinetuneConfig's fields: its settings, on `device` where the server's queue gave it a slot (else its
        own, the CPU when it names none)."""
        return {"device": "cpu", **self.settings, **({"device": device} if device is not None else {})}

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

"""A Fine-tune page race as a run of the server's one queue (`bert_core.serve.runs.RunStore`): what it trains, how
long it will hold a slot, and how a visitor's run list names it. No Streamlit and no torch here.

The race itself (`bert_core.training.finetune.build_comparison`) runs in the run's training process; the spec only
carries its builder there, and the few facts the queue and the pages read without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from bert_core.serve.run_protocols import FINETUNE_PAGE

KIND_LABELS = {"labels": "sentence labels", "tags": "token tags", "spans": "answer spans"}


@dataclass(frozen=True, eq=False)
class FinetuneSpec:
    """One Fine-tune page race: its builder (picklable, returns a FinetuneComparison in the training process) and
    what is known of it before it runs.

    `models`: the neural models it trains one after the other, each for `budget_s` seconds (a baseline takes
    seconds and is not counted). `data_label` and `model_label` name the data and the starting model
    as a reader knows them, never by a server path.
    """

    builder: Callable[[], Any]
    kind: str
    data_label: str
    model_label: str
    models: int
    budget_s: float
    # Not written to the server's run records: its data and model live in the builder, and its results in memory.
    recorded: ClassVar[bool] = False
    page: ClassVar[str] = FINETUNE_PAGE

    @property
    def longest_part_s(self) -> float:
        """The longest stretch it trains without yielding its slot: one model's budget (a race yields between
        its models, never within one)."""
        return float(self.budget_s)

    @property
    def expected_s(self) -> float:
        """How long the whole race holds a slot, as its budget says (preparing and evaluating not counted)."""
        return float(self.budget_s) * max(1, self.models)

    @property
    def corpus_label(self) -> str:
        return self.data_label

    @property
    def task_label(self) -> str:
        """'token tags on CoNLL-2000 chunks', as a run list shows it."""
        return f"{KIND_LABELS.get(self.kind, self.kind)} on {self.data_label}"


def race_score(trainer: Any) -> str:
    """The pretrained model's latest validation figure, named ('84.6% F1', '72.0% accuracy'); '' before its first
    pass (or before its training process has sent its runs)."""
    for tuner in trainer.tuners if trainer is not None else ():
        if tuner.name == "pretrained" and tuner.evals:
            ev, f1 = tuner.evals[-1], bool(trainer.primary)
            return f"{ev.macro_f1 if f1 else ev.accuracy:.1%} {'F1' if f1 else 'accuracy'}"
    return ""

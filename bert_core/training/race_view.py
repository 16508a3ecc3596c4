"""A fine-tuning race where it does not train, as the pages and the queue read it (serve.run_protocols.LiveView):
the server's mirror of a race in a training process, fed by the views it sends, and a race read back from its folder
(kept_race.read_race) are one `RaceView`; each model in either is a `TunerView`. Torch-free."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bert_core.training.run_loop import Progress


@dataclass
class TunerView:
    """One model of a race as the pages draw it. One that had ended, with its `result`, also stands in for its run in
    a race built again over its folder (finetune_race._go_on): a run that has run, so the race skips it and keeps its
    result, model and curves as they were."""

    name: str
    state: str
    step: int
    evals: list
    stages: list = field(default_factory=list)  # a curriculum's stages as they began (finetune_results.FinetuneStage)
    result: Any = None                          # its FinetuneResult, where it stands in for its ended run
    budgeted: bool = True                       # a share of its race's budget (Finetuner.budgeted)
    callbacks: list = field(default_factory=list, repr=False)
    error = None

    @classmethod
    def of(cls, tuner) -> TunerView:
        return cls(tuner.name, tuner.state, tuner.step, list(tuner.evals), list(tuner.stages))

    @property
    def progress(self) -> Progress:
        return Progress(fraction=1.0, eta_s=0.0, step=self.step, elapsed_s=self.evals[-1].elapsed_s if self.evals
                        else 0.0)

    def run(self):
        return self.result

    def stop(self) -> None:
        """It has ended."""

    pause = stop


def race_summary(race) -> dict:
    """What a race's view is made of (a live race's, or one of its views): its models as they stand, and what the
    page shows without holding its task."""
    return {"config": race.config, "task_kind": race.task_kind, "metric_names": tuple(race.metric_names),
            "primary": race.primary, "state": race.state, "error": race.error, "progress": race.progress,
            "tuners": [TunerView.of(t) for t in race.tuners]}


class RaceView:
    """A race_summary as a live view. `split()` makes its (training, validation) data and `results()` its ended
    models' results by name, each when first asked for; a mirror's results are set when its process has ended."""

    # A race has no curves, tokenizer, growth, data or probes of its own: each of its models has its own.
    history, evals, tokenizer, growth, data, probes = (), (), None, None, None, None

    def __init__(self, summary: dict, split: Callable[[], tuple], results: Callable[[], dict] = dict):
        self.config, self.task_kind = summary["config"], summary["task_kind"]
        self.metric_names, self.primary = summary["metric_names"], summary["primary"]
        self.update(summary)
        self._split, self._results = split, results

    def update(self, summary: dict) -> None:
        self.tuners, self.state, self.error = summary["tuners"], summary["state"], summary["error"]
        self._progress = summary.get("progress")

    @property
    def step(self) -> int:
        return sum(t.step for t in self.tuners)

    @property
    def progress(self) -> Progress:
        if self._progress is not None:
            return self._progress
        return Progress(fraction=1.0 if self.state == "finished" else 0.0, eta_s=0.0, step=self.step,
                        elapsed_s=sum(t.evals[-1].elapsed_s for t in self.tuners if t.evals))

    @functools.cached_property
    def _data(self) -> tuple:
        return self._split()

    train_data = property(lambda self: self._data[0])
    val_data = property(lambda self: self._data[1])

    @functools.cached_property
    def results(self) -> dict:
        return self._results()

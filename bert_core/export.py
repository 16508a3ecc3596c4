"""What the Export page hands out: a run's per-step history and held-out evaluations as CSV, its configuration as
JSON, from a run of this session (live) or from a checkpoint's trainer_state.json."""

from __future__ import annotations

import csv
import dataclasses
import io
from dataclasses import dataclass, field


@dataclass
class RunRecord:
    """A run's history rows, evaluation rows, baselines and configuration (model + training) as plain data."""

    history: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    baselines: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)


def run_record(model_config=None, trainer=None, trainer_state: dict | None = None) -> RunRecord:
    """The record of a live `trainer` (a Trainer or its mirror) when given, else of a saved `trainer_state`."""
    if trainer is not None:
        history = [dataclasses.asdict(e) for e in trainer.history]
        evals = [dataclasses.asdict(e) for e in trainer.evals]
        train_config, baselines = trainer.config.to_dict(), dict(trainer.baselines)
    else:
        state = trainer_state or {}
        history, evals = list(state.get("history", [])), list(state.get("evals", []))
        train_config, baselines = state.get("train_config"), dict(state.get("baselines", {}))
    config = {"model": model_config.to_hf_dict() if model_config is not None else None, "training": train_config}
    return RunRecord(history, evals, baselines, config)


def rows_to_csv(rows: list[dict]) -> str:
    """Rows of one shape as CSV text with a header (empty text for no rows)."""
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return buf.getvalue()


def history_label(history: list[dict]) -> str:
    """'N steps', or 'N of M steps' when a long run's history was thinned (TrainConfig.history_limit)."""
    last = history[-1].get("step", len(history)) if history else 0
    return f"{len(history):,} steps" if len(history) >= last else f"{len(history):,} of {last:,} steps"

"""What each trick buys: one change at a time from the Train page's defaults, as measured (tricks.json; three seeds
each, docs/benchmarks.md, "What each trick buys"), beside the runs a tab made of the same change. The Train page
shows it under *Compare runs*; docs/lessons.md teaches from the same table (a test keeps the two the same)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from bert_core.training.comparison import IMPLIED, KNOBS, knob_diff, other_differences

_DATA = json.loads(Path(__file__).with_name("tricks.json").read_text(encoding="utf-8"))
DEFAULTS_MEASURED = tuple(_DATA["defaults_measured"])


class Trick(NamedTuple):
    """One change from the defaults: a knob of comparison.KNOBS and its value, how the page names it, the held-out
    accuracy measured at the end (seeds 0, 1, 2), what a class should see, and a note said after the figures."""

    knob: str
    value: Any
    label: str
    measured: tuple[float, float, float]
    lesson: str
    note: str = ""


TRICKS = tuple(Trick(knob, value, label, tuple(measured), lesson, note)
               for knob, value, label, measured, lesson, note in _DATA["tricks"])


def measured_text(values: Sequence[float], note: str = "") -> str:
    """'47.5 / 46.8 / 43.7%' (with the note after it in brackets)."""
    text = " / ".join(f"{v * 100:.1f}" for v in values) + "%"
    return f"{text} ({note})" if note else text


def _your_run(trick: Trick | None, reference, runs: Sequence, names: Sequence[str]) -> str:
    """The latest of `runs` that made this change (None: the defaults), its figure and other differences."""
    for run, name in reversed(list(zip(runs, names))):
        changed = {c.knob: c for c in knob_diff(reference, run.spec)}
        if (changed if trick is None else
                trick.knob not in changed or KNOBS[trick.knob].get(run.spec) != trick.value):
            continue
        carried = {trick.knob, *IMPLIED.get(trick.knob, ())} if trick is not None else set()
        also = [c.label for k, c in changed.items() if k not in carried] + other_differences(reference, run.spec)
        evals = run.trainer.evals if run.trainer is not None else ()   # a queued run has none yet
        figure = f"{float(evals[-1].mlm_acc):.1%}" if evals else "–"
        if run.phase != "finished":
            figure += f" ({run.phase})"
        return f"{name}: {figure}" + (f"; also {', '.join(also)}" if also else "")
    return ""


def trick_rows(reference, runs: Sequence = (), names: Sequence[str] = ()) -> list[dict]:
    """The table: the defaults, then each trick, measured, what to see, and the tab's own run of it."""
    rows = [{"one change from the defaults": "none (the defaults)",
             "measured, seeds 0 / 1 / 2": measured_text(DEFAULTS_MEASURED),
             "your run": _your_run(None, reference, runs, names), "what to see": "the line each change is held to"}]
    return rows + [{"one change from the defaults": trick.label.replace("*", ""),
                    "measured, seeds 0 / 1 / 2": measured_text(trick.measured, trick.note),
                    "your run": _your_run(trick, reference, runs, names), "what to see": trick.lesson}
                   for trick in TRICKS]

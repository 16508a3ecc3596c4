"""What each trick buys: one change at a time from the Train page's defaults, as measured (three seeds each; the
commands and the machine in docs/benchmarks.md, "What each trick buys"), beside the runs a tab made of the same
change. The Train page shows it under *Compare runs*; docs/lessons.md teaches from the same table (a test keeps the
two the same). No Streamlit, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from bert_core.training.comparison import IMPLIED, KNOBS, knob_diff, other_differences

# Held-out masked-token accuracy at the end of the Train page's default run (toy, nano, 2,000 steps), seeds 0, 1, 2.
DEFAULTS_MEASURED = (0.531, 0.561, 0.546)


@dataclass(frozen=True)
class Trick:
    """One change from the defaults: the knob (bert_core.training.comparison.KNOBS) and its value, how the page
    names it, the held-out accuracy measured at the end (seeds 0, 1, 2) and what a class should see."""

    knob: str
    value: Any
    label: str
    measured: tuple[float, float, float]
    lesson: str
    note: str = ""        # said after the figures (a different measure, a baseline)


TRICKS = (
    Trick("nsp", False, "untick *Next-sentence prediction*", (0.475, 0.468, 0.437),
          "lower: in 2,000 small steps the sentence-pair task helped (RoBERTa dropped it for long inputs and big "
          "budgets)"),
    Trick("mask_rate", 0.4, "*Mask rate* 0.40", (0.555, 0.554, 0.542),
          "past 50% 100 to 400 steps sooner (2.7x the labels a step), about as good at the end"),
    Trick("model_size", "tiny", "*Size preset* tiny", (0.324, 0.273, 0.290),
          "twice the time and worse: it stays near the unigram line far longer; in a fixed number of CPU minutes a "
          "bigger model makes fewer steps"),
    Trick("learning_rate", 0.001, "*Peak learning rate* 0.001", (0.403, 0.458, 0.454),
          "a slower climb all the way (it was the page's old default): the rate matters"),
    Trick("corpus", "tinyshakespeare", "*Text to learn from* Tiny Shakespeare", (0.133, 0.139, 0.150),
          "real text is far harder than a toy grammar", "unigram 6.5-7.5%"),
    Trick("attention", "causal", "*Objective* GPT: next token", (0.607, 0.592, 0.595),
          "another question (the next word from the words before it), not comparable; Predictions then continues "
          "text", "next-token accuracy"),
    Trick("mask_only", True, "[MASK] only (`--mask-only`)", (0.539, 0.553, 0.541),
          "the same score on [MASK]s, but a model that never saw a sentence without [MASK] reads kept words badly "
          "(22-37% where they are in plain sight, against 59-65% with 80/10/10)"),
    Trick("whole_word_masking", True, "whole-word masking (`--whole-word-masking`)", (0.568, 0.550, 0.528),
          "no difference beyond seed noise: toy's words are rarely cut into pieces"),
)


def measured_text(values: Sequence[float], note: str = "") -> str:
    """'47.5 / 46.8 / 43.7%' (with the note after it in brackets)."""
    text = " / ".join(f"{v * 100:.1f}" for v in values) + "%"
    return f"{text} ({note})" if note else text


def _final_accuracy(run) -> float | None:
    evals = run.trainer.evals if run.trainer is not None else ()   # a queued run has none yet
    return float(evals[-1].mlm_acc) if evals else None


def _your_run(trick: Trick | None, reference, runs: Sequence, names: Sequence[str]) -> str:
    """The latest of `runs` that made this change (None: the defaults), with its figure and how else it differs
    from the defaults; '' when no run did."""
    knob = KNOBS[trick.knob] if trick is not None else None
    for run, name in reversed(list(zip(runs, names))):
        changed = {c.knob: c for c in knob_diff(reference, run.spec)}
        if trick is None:
            if changed:
                continue
        elif trick.knob not in changed or knob.get(run.spec) != trick.value:
            continue
        carried = {trick.knob, *IMPLIED.get(trick.knob, ())} if trick is not None else set()
        also = [c.label for k, c in changed.items() if k not in carried] + other_differences(reference, run.spec)
        acc = _final_accuracy(run)
        figure = f"{acc:.1%}" if acc is not None else "–"
        if run.phase != "finished":
            figure += f" ({run.phase})"
        return f"{name}: {figure}" + (f"; also {', '.join(also)}" if also else "")
    return ""


def trick_rows(reference, runs: Sequence = (), names: Sequence[str] = ()) -> list[dict]:
    """The table: the defaults, then each trick, with what was measured, what to see, and the tab's own run of it
    (`runs`, named `names`, compared with `reference`: the Train page's default spec)."""
    rows = [{"one change from the defaults": "none (the defaults)",
             "measured, seeds 0 / 1 / 2": measured_text(DEFAULTS_MEASURED),
             "your run": _your_run(None, reference, runs, names), "what to see": "the line each change is held to"}]
    for trick in TRICKS:
        rows.append({"one change from the defaults": trick.label.replace("*", ""),
                     "measured, seeds 0 / 1 / 2": measured_text(trick.measured, trick.note),
                     "your run": _your_run(trick, reference, runs, names), "what to see": trick.lesson})
    return rows

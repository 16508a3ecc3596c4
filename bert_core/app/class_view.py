"""The teacher's view of a led class: the class's runs as table rows (size, the knobs changed from the lesson's
default run, held-out accuracy, the unigram plateau), made from the runs, never from anything a student typed. A
corpus is named only when it is one of the page's named corpora, never a student's file name or path."""

from __future__ import annotations

from typing import Iterable, Sequence

from bert_core.serve.run_protocols import TRAIN_PAGE
from bert_core.training.comparison import knob_diff, knob_value, KNOBS
from bert_core.training.plateau import CHECK_AFTER, plateau_warning

NAMED_CORPORA = ("toy", "tinyshakespeare", "wikitext-2")


def _changes(spec, default) -> str:
    """The knobs `spec` turned away from the default run, as the legend names them ('mask rate 0.15 → 0.4')."""
    said = []
    for change in knob_diff(default, spec):
        if change.knob == "corpus":
            said.append(f"corpus → {change.after}" if change.after in NAMED_CORPORA else
                        "corpus → a file of their own")
        else:
            said.append(change.label)
    return "; ".join(said) or "none (the default run)"


def _plateau(trainer, causal: bool) -> str:
    """'yes' while the run's [MASK] accuracy sits on the unigram line past CHECK_AFTER of its steps, 'no' when it
    is above it, 'too early' before that share of the run."""
    max_steps = trainer.config.max_steps or 0
    done = trainer.step / max_steps if max_steps else None
    if done is None or done < CHECK_AFTER:
        return "too early"
    return "yes" if plateau_warning(trainer.history, trainer.baselines, done, causal=causal) else "no"


def run_row(number: int, run, default) -> dict | None:
    """One pretraining run of the class as a row of the teacher's table; None for a race."""
    spec = run.spec
    if spec.page != TRAIN_PAGE:
        return None
    size = KNOBS["model_size"].show(knob_value(spec, "model_size"))
    trainer = run.trainer
    evals = list(trainer.evals) if trainer is not None else []
    accuracy = evals[-1].mlm_acc if evals else None
    causal = knob_value(spec, "attention") == "causal"
    return {"run": f"run {number}", "phase": run.phase, "size": size, "changed": _changes(spec, default),
            "step": trainer.step if trainer is not None else 0,
            # a GPT's accuracy is of the next token, a BERT's of masked ones: not the same test, so said beside it
            "held-out accuracy (%)": None if accuracy is None else round(100 * accuracy, 1),
            "of": "the next token" if causal else "masked tokens",
            "on the unigram plateau": _plateau(trainer, causal) if trainer is not None else "not started"}


def run_rows(view_ids: Sequence[str], lookup, default) -> list[dict]:
    """The class's runs (view ids, oldest first, found by `lookup`) as rows numbered in the order they started; runs
    the server no longer has are left out."""
    rows = []
    for number, view in enumerate(view_ids, start=1):
        run = lookup(view)
        row = run_row(number, run, default) if run is not None else None
        if row is not None:
            rows.append(row)
    return rows


def step_counts(on_step: dict, titles: Iterable[tuple[str, str]]) -> str:
    """'Step 1 Tokens: 2 · Step 2 Masking: 0 ...', the students on each step (`titles`: (key, title) in order)."""
    return " · ".join(f"{i}. {title}: **{on_step.get(key, 0)}**" for i, (key, title) in enumerate(titles, start=1))

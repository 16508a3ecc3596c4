"""What the Fine-tune page tells a visitor to expect of a race before it runs, from finetune_page.json: ranges
measured on the page's defaults with each shipped model active (benchmarks/finetune_page_defaults.py; every seed in
docs/benchmarks.md, checked against them by tests/test_finetune_expectations.py)."""

from __future__ import annotations

import json
from pathlib import Path

# The page's copy and figures, as data (finetune_page.json says where each figure was measured); finetune_kinds reads
# the rest of it.
PAGE_COPY = json.loads(Path(__file__).with_name("finetune_page.json").read_text(encoding="utf-8"))
_EXPECT = PAGE_COPY["expectations"]
PAGE_FIGURES: dict[str, dict[str, dict[str, tuple[float, float]]]] = {
    model: {choice: {name: tuple(span) for name, span in got.items()} for choice, got in tasks.items()}
    for model, tasks in _EXPECT["page_figures"].items()}
NOTES: dict[str, dict[str, str]] = _EXPECT["notes"]
NAMES: dict[str, list] = _EXPECT["names"]
KIND_OF: dict[str, str] = _EXPECT["kind_of"]
REFERENCE: str = _EXPECT["reference"]
TOY_BY_DEFAULT_RUN: dict[str, str] = _EXPECT["toy_by_default_run"]
EXPECT_QA_DRILLS: str = _EXPECT["expect_qa_drills"]
EXPECT_QA_BY_MODEL: dict[str, str] = _EXPECT["expect_qa_by_model"]
EXPECT_QA_ALONE: str = _EXPECT["expect_qa_alone"]


def _span(lo: float, hi: float, unit: str) -> str:
    a, b = round(lo), round(hi)
    return f"{a}{unit}" if a == b else f"{a}-{b}{unit}"


def _figures(model: str, choice: str) -> str:
    kind = KIND_OF[choice]
    unit = "%" if kind == "labels" else ""
    got = PAGE_FIGURES[model][choice]
    parts = [f"{words} {_span(*got[name], unit)}" for name, words in NAMES[kind] if name in got]
    if kind == "tags":
        parts[0] += " chunk F1"
    return ", ".join(parts[:-1]) + f" and {parts[-1]} (seeds 0-2)"


def expectation(choice: str, shipped: str | None, train: int, steps: int, unit: str) -> str | None:
    """What to expect of a race on `choice` with shipped model `shipped` (None: another) on the page's defaults
    (`train` training `unit`, `steps` steps a model); None where nothing was measured."""
    if choice not in KIND_OF:
        return None
    settings = f"this page's defaults ({train:,} training {unit}, {steps:,} steps a model)"
    task = "CoNLL-2000 chunks" if choice == "conll2000" else None
    if shipped in PAGE_FIGURES:
        note = NOTES.get(shipped, {}).get(choice, "")
        where = f"on {task} " if task else ""
        return f"What to expect {where}with {settings} and {shipped}: {_figures(shipped, choice)}. {note}".strip()
    if choice in TOY_BY_DEFAULT_RUN:
        return TOY_BY_DEFAULT_RUN[choice]
    return (f"No figures were measured for this model{' on ' + task if task else ''}. With {settings}, the shipped "
            f"{REFERENCE} gave: {_figures(REFERENCE, choice)}.")

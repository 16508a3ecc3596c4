"""What each trick buys (bert_core.inspect.tricks): every change in the table is one the Train page can start, the
table puts a tab's own run of a change beside what was measured, and docs/lessons.md teaches the same figures."""

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

from bert_core.inspect.tricks import DEFAULTS_MEASURED, TRICKS, measured_text, trick_rows
from bert_core.training.train_spec import default_spec
from bert_core.training.comparison import KNOBS, knob_diff, one_change, suggested_changes

ROOT = Path(__file__).resolve().parent.parent


def _run(spec, acc, phase="finished"):
    evals = [SimpleNamespace(mlm_acc=acc)] if acc is not None else []
    return SimpleNamespace(spec=spec, phase=phase, trainer=SimpleNamespace(evals=evals))


def test_every_trick_is_one_change_the_page_can_start_from_its_defaults():
    base = default_spec()
    offered = {(c.knob, c.after) for c in suggested_changes(base)}
    for trick in TRICKS:
        assert trick.knob in KNOBS
        changed = one_change(base, trick.knob, trick.value)
        assert [c.knob for c in knob_diff(base, changed)][:1] == [trick.knob]
        if trick.knob not in ("mask_rate", "learning_rate", "corpus", "model_size"):
            assert (trick.knob, trick.value) in offered, trick   # offered under *Try one change*


def test_a_tabs_own_runs_stand_beside_the_measured_figures():
    base = default_spec()
    no_nsp = one_change(base, "nsp", False)
    higher_rate = one_change(base, "mask_rate", 0.4)
    other_seed = dataclasses.replace(higher_rate, train={**higher_rate.train, "seed": 1})
    runs = [_run(base, 0.5412), _run(no_nsp, 0.4633), _run(other_seed, 0.5521, phase="running")]
    rows = {r["one change from the defaults"]: r for r in trick_rows(base, runs, ["run 1", "run 2", "run 3"])}
    assert rows["none (the defaults)"]["your run"] == "run 1: 54.1%"
    assert rows["none (the defaults)"]["measured, seeds 0 / 1 / 2"] == "53.1 / 56.1 / 54.6%"
    assert rows["untick Next-sentence prediction"]["your run"] == "run 2: 46.3%"
    mask = rows["Mask rate 0.40"]["your run"]
    assert mask.startswith("run 3: 55.2% (running)") and "seed 0 → 1" in mask   # told how else it differs
    assert rows["Size preset tiny"]["your run"] == ""                            # no run of it yet
    assert len(rows) == len(TRICKS) + 1


def test_the_teachers_notes_teach_the_same_figures():
    text = (ROOT / "docs" / "lessons.md").read_text()
    section = text.split("## What does each trick buy?", 1)[1].split("\n## ", 1)[0]
    assert measured_text(DEFAULTS_MEASURED).replace("%", "") in section.replace("%", "")
    table = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(table) == len(TRICKS)
    for trick, line in zip(TRICKS, table):
        figures = re.findall(r"\d+\.\d", line.split("|")[2])[:3]
        assert figures == [f"{v * 100:.1f}" for v in trick.measured], (trick.label, line)

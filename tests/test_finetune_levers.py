"""benchmarks/finetune_levers.py: issue #28's protocol one lever at a time. Its table pairs each run with the
TF-IDF baseline and the reference lever on the same split; a run that fails is named, not dropped silently."""

import json
import subprocess
import sys

import pytest

from bert_core.paths import CHECKPOINTS_DIR
from tests.script_loading import load_script

SCRIPT = CHECKPOINTS_DIR.parent / "benchmarks" / "finetune_levers.py"


def _module():
    return load_script("benchmarks/finetune_levers.py")


def test_the_table_pairs_each_lever_with_the_baseline_and_the_reference_on_the_same_split():
    levers = _module()
    rows = [
        {"lever": "defaults", "task": "t", "seed": 0, "accuracy": 80.0, "tfidf": 78.0},
        {"lever": "defaults", "task": "t", "seed": 1, "accuracy": 70.0, "tfidf": 74.0},
        {"lever": "lr", "task": "t", "seed": 0, "accuracy": 83.0, "tfidf": None},
        {"lever": "lr", "task": "t", "seed": 1, "accuracy": 71.0, "tfidf": None},
    ]
    lines = levers.table(rows, ["defaults", "lr"], ["t"], [0, 1]).splitlines()
    assert lines[2] == "| t | TF-IDF + LR | 78.0 / 74.0 | 76.00 | | |"
    assert lines[3] == "| t | defaults | 80.0 / 70.0 | 75.00 | -1.00 | +0.00 |"
    # lr: +5.0 and -3.0 against TF-IDF (mean +1.0); +3.0 and +1.0 against defaults on the same splits (mean +2.0)
    assert lines[4] == "| t | lr | 83.0 / 71.0 | 77.00 | +1.00 | +2.00 |"
    assert levers.parse_lever("lr 2e-4=--lr 2e-4") == ("lr 2e-4", ["--lr", "2e-4"])
    assert levers.parse_lever("defaults=") == ("defaults", [])
    with pytest.raises(Exception, match="NAME=FLAGS"):
        levers.parse_lever("--lr 2e-4")


@pytest.mark.slow
def test_it_runs_the_protocol_end_to_end_and_names_a_run_that_failed(tmp_path):
    out = tmp_path / "levers"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--checkpoint", str(CHECKPOINTS_DIR / "bert-tiny-english"),
         "--lever", "defaults=", "--lever", "bad=--lr -1", "--lever", "decay 0.5=--layer-decay 0.5",
         "--tasks", "toy", "--seeds", "3", "--steps", "2",
         "--val-size", "40", "--jobs", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=CHECKPOINTS_DIR.parent)
    assert proc.returncode == 0, proc.stderr
    assert "| toy | TF-IDF + LR |" in proc.stdout and "| toy | defaults |" in proc.stdout
    assert "| toy | bad |" not in proc.stdout
    assert "error: bad toy seed 3" in proc.stderr and "--lr" in proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["levers"] == {"defaults": [], "bad": ["--lr", "-1"], "decay 0.5": ["--layer-decay", "0.5"]}
    ok = [r for r in summary["rows"] if r["lever"] == "defaults"][0]
    assert 0 <= ok["accuracy"] <= 100 and 0 <= ok["tfidf"] <= 100
    assert json.loads((out / "defaults-toy-3.json").read_text())["config"]["max_steps"] == 2
    # each run its own files, a dot in a lever's name included
    assert json.loads((out / "decay_0.5-toy-3.json").read_text())["config"]["layer_decay"] == 0.5

"""benchmarks/toy_qa_study.py's `simple` command writes the toy QA task's drills (bert_core.data.toy_qa_drills) as
SQuAD v1.1 files: --all-questions is --questions with all four kinds, and the file is the drills' own."""

import json
import subprocess
import sys

from bert_core.data.toy_qa_drills import QUESTION_KINDS, drill_squad
from bert_core.paths import CHECKPOINTS_DIR

SCRIPT = CHECKPOINTS_DIR.parent / "benchmarks" / "toy_qa_study.py"


def test_simple_writes_the_drills_and_all_questions_is_the_four_kinds(tmp_path):
    written = []
    for flags in (["--all-questions"], ["--questions", *QUESTION_KINDS], ["--questions", "where"]):
        out = tmp_path / f"{len(written)}.json"
        subprocess.run([sys.executable, str(SCRIPT), "simple", "--passages", "5", "--out", str(out), *flags],
                       check=True, cwd=CHECKPOINTS_DIR.parent)
        written.append(json.loads(out.read_text()))
    assert written[0] == written[1] == drill_squad(5, questions=QUESTION_KINDS)
    assert written[2] == drill_squad(5, questions=("where",)) != written[0]

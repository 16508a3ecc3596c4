"""benchmarks/toy_qa_study.py's `simple` task: the binding of a name to its place as SQuAD v1.1 that the project's
own reader accepts, every answer at its answer_start and the name of the sentence that names the place."""

import importlib.util
import re

from bert_core.data.answer_spans_data import parse_squad
from bert_core.paths import CHECKPOINTS_DIR

SCRIPT = CHECKPOINTS_DIR.parent / "benchmarks" / "toy_qa_study.py"


def test_the_simple_task_is_valid_squad_and_each_answer_is_the_name_that_went_there():
    spec = importlib.util.spec_from_file_location("toy_qa_study", SCRIPT)
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    squad = study.simple_squad(passages=40, seed=3)
    assert squad == study.simple_squad(passages=40, seed=3) and squad != study.simple_squad(passages=40, seed=4)
    data = parse_squad(squad, source="simple")   # checks each answer's text at its answer_start
    assert len(data.examples) >= 80
    for ex in data.examples:
        place = re.fullmatch(r"Who went to the (\w+)\?", ex.question).group(1)
        went = dict((p, n) for n, p in re.findall(r"(\w+) went to the (\w+)\.", ex.context))
        assert ex.answers == [went[place]] and 2 <= len(went) <= 3

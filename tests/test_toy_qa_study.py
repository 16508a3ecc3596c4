"""benchmarks/toy_qa_study.py's `simple` task: the binding of a name to its place as SQuAD v1.1 that the project's
own reader accepts, every answer at its answer_start and the name of the sentence that names the place."""

import importlib.util
import re
import subprocess
import sys

import pytest

from bert_core.data.answer_spans_data import parse_squad
from bert_core.paths import CHECKPOINTS_DIR

SCRIPT = CHECKPOINTS_DIR.parent / "benchmarks" / "toy_qa_study.py"


def _study():
    spec = importlib.util.spec_from_file_location("toy_qa_study", SCRIPT)
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    return study


def test_the_simple_task_is_valid_squad_and_each_answer_is_the_name_that_went_there():
    study = _study()
    squad = study.simple_squad(passages=40, seed=3)
    assert squad == study.simple_squad(passages=40, seed=3) and squad != study.simple_squad(passages=40, seed=4)
    data = parse_squad(squad, source="simple")   # checks each answer's text at its answer_start
    assert len(data.examples) >= 80
    for ex in data.examples:
        place = re.fullmatch(r"Who went to the (\w+)\?", ex.question).group(1)
        went = dict((p, n) for n, p in re.findall(r"(\w+) went to the (\w+)\.", ex.context))
        assert ex.answers == [went[place]] and 2 <= len(went) <= 3


def test_the_find_variant_adds_a_find_to_each_sentence_and_keeps_the_names_places_and_questions():
    study = _study()
    plain, found = study.simple_squad(passages=30, seed=5), study.simple_squad(passages=30, seed=5, find=True)
    data = parse_squad(found, source="find")
    for p, f in zip(plain["data"], found["data"]):
        p, f = p["paragraphs"][0], f["paragraphs"][0]
        assert [q["question"] for q in p["qas"]] == [q["question"] for q in f["qas"]]
        assert [q["answers"][0]["text"] for q in p["qas"]] == [q["answers"][0]["text"] for q in f["qas"]]
        sentences = re.findall(r"(\w+) went to the (\w+) and found a (\w+) (\w+)\.", f["context"])
        assert [(n, pl) for n, pl, _, _ in sentences] == re.findall(r"(\w+) went to the (\w+)\.", p["context"])
    assert len(data.examples) == sum(len(d["paragraphs"][0]["qas"]) for d in found["data"])


def test_all_questions_asks_four_things_of_each_name_and_each_answer_is_what_its_sentence_says():
    study = _study()
    data = parse_squad(study.simple_squad(passages=30, seed=2, questions=study.QUESTION_KINDS), source="all")
    asked = {}
    for ex in data.examples:
        said = {n: (p, f) for n, p, f in re.findall(r"(\w+) went to the (\w+) and found a (\w+ \w+)\.", ex.context)}
        by_place = {p: n for n, (p, _) in said.items()}
        by_find = {f: n for n, (_, f) in said.items()}
        if m := re.fullmatch(r"Who went to the (\w+)\?", ex.question):
            want = by_place[m.group(1)]
        elif m := re.fullmatch(r"Where did (\w+) go\?", ex.question):
            want = f"the {said[m.group(1)][0]}"
        elif m := re.fullmatch(r"What did (\w+) find\?", ex.question):
            want = f"a {said[m.group(1)][1]}"
        else:
            want = by_find[re.fullmatch(r"Who found the (\w+ \w+)\?", ex.question).group(1)]
        assert ex.answers == [want]
        assert len(by_find) == len(said)   # one of each find a passage, so "Who found ...?" has one answer
        asked[ex.context] = asked.get(ex.context, 0) + 1
    assert all(n == 4 * len(re.findall(r"went to", c)) for c, n in asked.items())


def test_questions_picks_which_of_the_four_are_asked_and_refuses_an_unknown_one(tmp_path):
    study = _study()
    where = parse_squad(study.simple_squad(passages=20, seed=1, questions=("where",)), source="where")
    for ex in where.examples:
        went = dict(re.findall(r"(\w+) went to the (\w+)\.", ex.context))   # no find: "where" alone needs none
        name = re.fullmatch(r"Where did (\w+) go\?", ex.question).group(1)
        assert ex.answers == [f"the {went[name]}"]
    what = parse_squad(study.simple_squad(passages=20, seed=1, questions=("what",)), source="what")
    assert all(re.fullmatch(r"What did \w+ find\?", ex.question) and ex.answers[0].startswith("a ")
               for ex in what.examples)
    # the command's --all-questions is --questions with all four
    written = []
    for flags in (["--all-questions"], ["--questions", *study.QUESTION_KINDS]):
        out = tmp_path / f"{len(written)}.json"
        subprocess.run([sys.executable, str(SCRIPT), "simple", "--passages", "5", "--out", str(out), *flags],
                       check=True, cwd=CHECKPOINTS_DIR.parent)
        written.append(out.read_text())
    assert written[0] == written[1] and "Who found the" in written[0]
    with pytest.raises(ValueError):
        study.simple_squad(passages=5, questions=("why",))


def test_the_curriculum_reads_each_question_s_kind_in_the_stories_and_in_the_simple_files():
    """`curriculum` reports exact match per kind of question: the toy stories ask four a character, in the order
    where, what, who went, who found (their ids count them), in several wordings each."""
    from bert_core.data.answer_spans_data import toy_qa_task

    study = _study()
    order = ("where", "what", "who", "finder")
    examples = toy_qa_task(seed=2, num_stories=40).examples
    assert {ex.question.split()[0] for ex in examples} >= {"Where", "Which", "What", "Who"}
    for ex in examples:
        assert study.question_kind(ex.question) == order[int(ex.id.rsplit("-", 1)[1]) % 4], ex.question
    for kind in order:
        data = parse_squad(study.simple_squad(passages=10, questions=(kind,)), source=kind)
        assert {study.question_kind(ex.question) for ex in data.examples} == {kind}

"""The toy QA task's drills and the fine-tuning loop's stages: each drill is valid SQuAD whose answers are what its
sentences say, the task carries its drills in order, and Finetuner trains them first, each until it is learnt or
at its deadline (its share of the budget and what the drills before it left), with its own schedule and optimizer,
then the stories for the rest, scored on the held-out stories only, the same for the same seed."""

import dataclasses
import re

import pytest

from bert_core.data.answer_spans_data import drill_data, parse_squad, toy_qa_task
from bert_core.data.toy_qa_drills import (
    DRILL_SHARES,
    FIND_VERBS,
    GO_VERBS,
    QUESTION_KINDS,
    Drill,
    drill_squad,
    question_kind,
    toy_qa_drills,
)
from bert_core.model.config import BertConfig
from bert_core.model.tokenization import train_tokenizer
from bert_core.training.answer_spans import AnswerSpans
from bert_core.training.finetune import Finetuner, finetune, split_task
from bert_core.training.finetune_results import FinetuneStage
from bert_core.training.finetune_settings import FinetuneConfig
from bert_core.training.optimization import lr_multiplier


def test_a_drill_is_valid_squad_and_each_answer_is_the_name_that_went_there():
    squad = drill_squad(passages=40, seed=3)
    assert squad == drill_squad(passages=40, seed=3) and squad != drill_squad(passages=40, seed=4)
    data = parse_squad(squad, source="who")   # checks each answer's text at its answer_start
    assert len(data.examples) >= 80
    for ex in data.examples:
        place = re.fullmatch(r"Who went to the (\w+)\?", ex.question).group(1)
        went = dict((p, n) for n, p in re.findall(r"(\w+) went to the (\w+)\.", ex.context))
        assert ex.answers == [went[place]] and 2 <= len(went) <= 3


def test_the_find_variant_adds_a_find_to_each_sentence_and_keeps_the_names_places_and_questions():
    plain, found = drill_squad(passages=30, seed=5), drill_squad(passages=30, seed=5, find=True)
    data = parse_squad(found, source="find")
    for p, f in zip(plain["data"], found["data"]):
        p, f = p["paragraphs"][0], f["paragraphs"][0]
        assert [q["question"] for q in p["qas"]] == [q["question"] for q in f["qas"]]
        assert [q["answers"][0]["text"] for q in p["qas"]] == [q["answers"][0]["text"] for q in f["qas"]]
        sentences = re.findall(r"(\w+) went to the (\w+) and found a (\w+) (\w+)\.", f["context"])
        assert [(n, pl) for n, pl, _, _ in sentences] == re.findall(r"(\w+) went to the (\w+)\.", p["context"])
    assert len(data.examples) == sum(len(d["paragraphs"][0]["qas"]) for d in found["data"])


def test_all_four_questions_are_answered_by_what_their_sentence_says():
    data = parse_squad(drill_squad(passages=30, seed=2, questions=QUESTION_KINDS), source="all")
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
    with pytest.raises(ValueError):
        drill_squad(passages=5, questions=("why",))


def test_finds_told_in_a_sentence_of_their_own_point_the_finder_at_that_sentence_s_name():
    joined = drill_squad(passages=40, seed=6, questions=QUESTION_KINDS)
    mixed = drill_squad(passages=40, seed=6, questions=QUESTION_KINDS, own_sentence=0.5)
    forms = {"own": 0, "joined": 0}
    for j, m in zip(joined["data"], mixed["data"]):
        j, m = j["paragraphs"][0], m["paragraphs"][0]
        # The same names, places, finds, questions and answers: only how each find is told differs.
        assert [(q["question"], q["answers"][0]["text"]) for q in j["qas"]] == \
            [(q["question"], q["answers"][0]["text"]) for q in m["qas"]]
        own = dict(re.findall(r"\b(\w+) went to the \w+\. \1 found a (\w+ \w+)\.", m["context"]))
        forms["own"] += len(own)
        forms["joined"] += len(re.findall(r" and found a ", m["context"]))
        for q in m["qas"]:
            answer = q["answers"][0]
            assert m["context"][answer["answer_start"]:].startswith(answer["text"])
            found = re.fullmatch(r"Who found the (\w+ \w+)\?", q["question"])
            if found and found.group(1) in own.values():
                # the name of the sentence that says "tom found a red stone", not of the one before it
                assert m["context"][answer["answer_start"]:].startswith(f"{answer['text']} found a {found.group(1)}")
    assert forms["own"] > 20 and forms["joined"] > 20
    # The toy task's what and finder drills tell half their finds so, as the stories do, with the stories' verbs.
    data = drill_data(Drill("finder", 0.1, seed=1, passages=30))
    assert any(re.search(r"\. (\w+) (found|discovered|spotted) a ", ex.context) for ex in data.examples)
    assert any(re.search(r" and (found|discovered|spotted) a ", ex.context) for ex in data.examples)
    contexts = " ".join(ex.context for ex in data.examples)
    assert {v for v in GO_VERBS + FIND_VERBS if f" {v} " in contexts} == set(GO_VERBS + FIND_VERBS)
    for ex in data.examples:
        start = ex.answer_starts[0]
        assert re.match(rf"{ex.answers[0]} ({'|'.join(GO_VERBS + FIND_VERBS)}) ", ex.context[start:])
    # ... and the plain drills keep "went" (their wording is what the sentence -> where order was measured on).
    assert all(" went to " in ex.context and " ran " not in ex.context
               for ex in drill_data(Drill("where", 0.1, seed=1, passages=30)).examples)


def test_the_sentence_drill_answers_with_the_name_s_whole_sentence_on_the_where_drill_s_passages():
    sentence = parse_squad(drill_squad(passages=20, seed=4, questions=("sentence",)), source="sentence")
    where = parse_squad(drill_squad(passages=20, seed=4, questions=("where",)), source="where")
    assert [ex.context for ex in sentence.examples] == [ex.context for ex in where.examples]
    for ex in sentence.examples:
        name = re.fullmatch(r"What did (\w+) do\?", ex.question).group(1)
        went = dict(re.findall(r"(\w+) went to the (\w+)", ex.context))
        assert ex.answers == [f"{name} went to the {went[name]}"]
    found = parse_squad(drill_squad(passages=5, seed=4, questions=("sentence", "what")), source="both")
    assert all(" and found a " in ex.answers[0] for ex in found.examples if ex.question.endswith(" do?"))


def test_the_happened_drill_asks_by_the_place_for_the_same_sentence():
    happened = parse_squad(drill_squad(passages=20, seed=4, questions=("happened",)), source="happened")
    sentence = parse_squad(drill_squad(passages=20, seed=4, questions=("sentence",)), source="sentence")
    assert [(ex.answers, ex.answer_starts) for ex in happened.examples] == \
        [(ex.answers, ex.answer_starts) for ex in sentence.examples]
    for ex in happened.examples:
        place = re.fullmatch(r"What happened at the (\w+)\?", ex.question).group(1)
        assert ex.answers[0].endswith(f" went to the {place}")


def test_question_kind_reads_the_stories_and_the_drills_alike():
    """The toy stories ask four questions a character, in the order where, what, who went, who found (their ids
    count them), in several wordings each."""
    order = ("where", "what", "who", "finder")
    examples = toy_qa_task(seed=2, num_stories=40).examples
    assert {ex.question.split()[0] for ex in examples} >= {"Where", "Which", "What", "Who"}
    for ex in examples:
        assert question_kind(ex.question) == order[int(ex.id.rsplit("-", 1)[1]) % 4], ex.question
    for drill in toy_qa_drills(0):
        data = drill_data(Drill(drill.kind, drill.share, passages=10))
        assert {question_kind(ex.question) for ex in data.examples} == {drill.kind}
        assert question_kind(drill.example) == drill.kind


def test_the_toy_task_carries_its_drills_in_order_and_seeded_and_can_leave_them_out():
    data = toy_qa_task(3, 20)
    assert [d.kind for d in data.drills] == [kind for kind, _ in DRILL_SHARES] == ["sentence", "where", "happened",
                                                                                    "who", "what", "finder"]
    assert all(d.seed == 3 for d in data.drills) and 0 < sum(d.share for d in data.drills) < 1
    assert toy_qa_task(3, 20, drills=False).drills == ()
    assert toy_qa_task(3, 20, drills=False).examples == data.examples   # the stories are the same either way
    first = drill_data(Drill("where", 0.3, seed=1, passages=20))
    assert first.examples == drill_data(Drill("where", 0.3, seed=1, passages=20)).examples
    assert first.examples != drill_data(Drill("where", 0.3, seed=2, passages=20)).examples
    # A split's task keeps the drills; validation is the held-out stories only.
    task = split_task(data, None, 20, seed=0)
    assert isinstance(task, AnswerSpans) and task.drills == data.drills
    assert all(ex.id.startswith("toy3-") for ex in task.val_data.examples + task.train_data.examples)
    keep, pick = task.hold_back(0.1, seed=0)
    assert keep.drills == pick.drills == data.drills


@pytest.fixture(scope="module")
def tiny():
    """A nano model config and a tokenizer that knows the stories' and the drills' words."""
    texts = [ex.context for ex in toy_qa_task(0, 30).examples]
    texts += [ex.context for d in toy_qa_drills(0) for ex in drill_data(Drill(d.kind, d.share, passages=30)).examples]
    tokenizer = train_tokenizer(texts, vocab_size=400)
    return BertConfig.preset("nano", vocab_size=tokenizer.vocab_size, max_position_embeddings=128), tokenizer


def _staged_task(drills=True):
    data = toy_qa_task(0, 24, drills=drills)
    data.drills = tuple(Drill(d.kind, d.share, d.seed, passages=40) for d in data.drills)  # small drills: quick
    return split_task(data, None, 30, seed=0)


def _run(tiny, task, steps=40, seed=0, eval_points=2):
    config, tokenizer = tiny
    model = task.new_head(config, seed)
    cfg = FinetuneConfig(max_steps=steps, time_budget_s=None, batch_size=8, learning_rate=1e-3, max_length=96,
                         eval_points=eval_points, seed=seed, device="cpu", precision="fp32")
    seen = []
    tuner = Finetuner(model, tokenizer, config=cfg, task=task, callbacks=[seen.append])
    result = tuner.run()
    assert tuner.error is None, tuner.error
    seen.append(tuner.optimizer)
    return result, seen, cfg


def test_each_drill_takes_its_share_by_its_deadline_with_its_own_schedule_then_the_stories_the_rest(tiny):
    result, seen, cfg = _run(tiny, _staged_task())
    stages = [e for e in seen if isinstance(e, FinetuneStage)]
    assert stages == result.stages
    assert [s.name for s in stages] == ["drill: sentence", "drill: where", "drill: happened", "drill: who",
                                        "drill: what", "drill: finder", "toy QA stories (seed 0)"]
    # 40 steps, no drill learnt (a nano model in a few steps): each runs to its deadline, where the shares so far
    # add up (15%, 27%, 39%, 54%, 66% and 78% of the budget), and takes at least its own share: 6, 5, 5, 6, 5 and
    # 5 steps; the stories the rest (8).
    assert [s.step for s in stages] == [0, 6, 11, 16, 22, 27, 32] and all(s.count == 7 for s in stages)
    # Each stage says how well the one before it ended: its last steps' mean training score.
    scores = [e.train_acc for e in result.history if 6 < e.step <= 11]
    assert stages[0].previous_score is None and stages[2].previous_score == pytest.approx(sum(scores) / 5)
    # Each stage warms up again from its own first step: a drill holds its peak after the warmup (wsd over its
    # share), the stories decay over what is left.
    lrs = {e.step: e.lr for e in result.history}
    for stage, length in zip(stages, (6, 5, 5, 6, 5, 5, 8)):
        stage_config = dataclasses.replace(cfg.train_config(), max_steps=length,
                                           schedule="wsd" if stage.name.startswith("drill") else "linear")
        for k in range(length):
            assert lrs[stage.step + 1 + k] == pytest.approx(cfg.learning_rate * lr_multiplier(stage_config, k))
    # A drill's peak held mid-way; one that takes all its share decays at its end, and the next starts again.
    assert lrs[2] == lrs[5] == cfg.learning_rate and lrs[6] < lrs[5] and lrs[7] > lrs[6]
    # Every figure is on the held-out stories: a validation pass at the start of each stage, and the final one.
    assert [e.step for e in result.evals][:8] == [0, 6, 11, 16, 20, 22, 27, 32]
    assert result.to_dict()["stages"][1]["name"] == "drill: where"
    # ... and a fresh optimizer: the last one's moments count the stories' 8 updates only.
    assert {int(state["step"]) for state in seen[-1].state.values()} == {8}


def test_a_drill_ends_as_soon_as_it_is_learnt_and_passes_its_rest_to_the_next(tiny, monkeypatch):
    from bert_core.training import finetune as finetune_module

    monkeypatch.setattr(finetune_module, "MASTERY_STEPS", 5)
    task = _staged_task()
    # `sentence` counts as learnt at once (mastery 0: its first 5 steps), `where` never (all it may take).
    task.drills = (dataclasses.replace(task.drills[0], mastery=0.0), dataclasses.replace(task.drills[1], mastery=1.01),
                   *task.drills[2:])
    result, _, cfg = _run(tiny, task, steps=80)
    # 80 steps: sentence's share is 12 and it ends after 5, so `where` may run to its deadline, 27% of the budget
    # (step 22): its own 10 steps and sentence's 7. The later drills keep their own shares (happened 10, who 12,
    # what 10, finder 10: at least its own share, where rounding puts a deadline a step earlier), the stories the
    # 16 left.
    assert [s.step for s in result.stages] == [0, 5, 22, 32, 44, 54, 64]
    assert result.steps == 80
    lrs = {e.step: e.lr for e in result.history}
    # `where` is scheduled over its 17 steps, with the warmup its own 10 would have had (wsd: it decays at the end).
    where = dataclasses.replace(cfg.train_config(), schedule="wsd", max_steps=17,
                                warmup_ratio=cfg.train_config().warmup_ratio * 10 / 17)
    for k in range(17):
        assert lrs[6 + k] == pytest.approx(cfg.learning_rate * lr_multiplier(where, k))
    assert lrs[6 + 12] == cfg.learning_rate and lrs[22] < lrs[21]
    stories = dataclasses.replace(cfg.train_config(), max_steps=16)
    assert lrs[65] == pytest.approx(cfg.learning_rate * lr_multiplier(stories, 0))
    assert lrs[80] == pytest.approx(cfg.learning_rate * lr_multiplier(stories, 15))


def test_with_a_time_budget_a_drill_runs_to_its_deadline_in_seconds(tiny):
    config, tokenizer = tiny
    task = _staged_task()
    cfg = FinetuneConfig(max_steps=None, time_budget_s=40.0, batch_size=8, learning_rate=1e-3, max_length=96,
                         seed=0, device="cpu", precision="fp32")
    tuner = Finetuner(task.new_head(config, 0), tokenizer, config=cfg, task=task)
    task.prepare(tokenizer, cfg.max_length)
    tuner._enter_stage(0)
    assert tuner._stage_config.time_budget_s == pytest.approx(0.15 * 40)
    tuner.step, tuner.elapsed_s = 30, 3.0   # sentence learnt after 3 s of its 6
    tuner._enter_stage(1)
    # `where` may take 27% of 40 s from the start, less the 3 s gone: 7.8 s, its own 4.8 and sentence's 3, with the
    # warmup its own 4.8 s would have had.
    assert tuner._stage_config.time_budget_s == pytest.approx(0.27 * 40 - 3)
    assert tuner._stage_config.warmup_ratio == pytest.approx(cfg.train_config().warmup_ratio * 4.8 / 7.8)
    assert tuner._stage_config.max_steps is None and tuner._stage_config.schedule == "wsd"


def test_a_stage_that_begins_at_an_evaluation_point_is_evaluated_once(tiny):
    result, _, _ = _run(tiny, _staged_task(), steps=40, eval_points=20)  # points every 2 steps, stages at 6, 18...
    steps = [e.step for e in result.evals]
    assert len(steps) == len(set(steps)) and {6, 11, 16, 22, 27, 32} <= set(steps)


def test_without_drills_the_schedule_is_the_run_s_own_and_seeds_repeat(tiny):
    result, seen, cfg = _run(tiny, _staged_task(drills=False), steps=12)
    assert [s.name for s in result.stages] == ["toy QA stories (seed 0)"]
    for e in result.history:
        assert e.lr == pytest.approx(cfg.learning_rate * lr_multiplier(cfg.train_config(), e.step - 1))
    again, _, _ = _run(tiny, _staged_task(drills=False), steps=12)
    assert [e.loss for e in again.history] == pytest.approx([e.loss for e in result.history], rel=1e-5)
    staged, _, _ = _run(tiny, _staged_task(), steps=12)
    staged_again, _, _ = _run(tiny, _staged_task(), steps=12)
    assert [e.loss for e in staged.history] == pytest.approx([e.loss for e in staged_again.history], rel=1e-5)
    assert staged.history[0].loss != pytest.approx(result.history[0].loss, rel=1e-3)  # the first batch is a drill's


def test_drills_whose_shares_leave_nothing_for_the_task_are_refused(tiny):
    from bert_core.errors import BertCoreError

    task = _staged_task()
    task.drills = (Drill("where", 0.6), Drill("who", 0.4))
    config, tokenizer = tiny
    with pytest.raises(BertCoreError, match="shares of the budget"):
        finetune(task.new_head(config, 0), tokenizer, task=task,
                 config=FinetuneConfig(max_steps=4, time_budget_s=None, device="cpu"))


@pytest.fixture(scope="module")
def folder(tiny, tmp_path_factory):
    from bert_core.model.bert import BertForPreTraining
    from bert_core.model.hf import save_pretrained
    from bert_core.training.finetune_tasks import seeded

    config, tokenizer = tiny
    path = tmp_path_factory.mktemp("drills-base")
    with seeded(0):
        save_pretrained(BertForPreTraining(config), path, tokenizer=tokenizer)
    return path


def test_the_cli_trains_the_drills_first_at_the_answer_spans_rate_and_no_drills_leaves_them_out(folder, capsys):
    import json

    from bert_core.cli.finetune import config_from_args
    from bert_core.cli.main import build_parser, main
    from bert_core.training.finetune import finetune_learning_rate
    from bert_core.training.finetune_settings import TOY_QA_STEPS

    config = config_from_args(build_parser().parse_args(["finetune", "--task", "toy-qa"]))
    assert config.max_steps == TOY_QA_STEPS and config.time_budget_s is None   # the same run on every machine
    assert config_from_args(build_parser().parse_args(["finetune", "--task", "toy-qa", "--time-budget", "9"])) \
        .time_budget_s == 9
    runs = {}
    for flags in ([], ["--no-drills"]):
        code = main(["finetune", "--checkpoint", str(folder), "--task", "toy-qa", "--steps", "10", "--max-length",
                     "96", "--device", "cpu", "--json", *flags])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        runs[bool(flags)] = json.loads(captured.out)
    staged, alone = runs[False], runs[True]
    rate = finetune_learning_rate(BertConfig.load(folder), None, kind="labels")
    assert staged["config"]["learning_rate"] == pytest.approx(rate / 2)
    assert [s["name"] for s in staged["results"][0]["stages"]][:2] == ["drill: sentence", "drill: where"]
    assert [s["name"] for s in alone["results"][0]["stages"]] == ["toy QA stories (seed 0)"]
    assert staged["data"]["validation"] == alone["data"]["validation"]   # the same held-out stories either way
    code = main(["finetune", "--checkpoint", str(folder), "--no-drills", "--steps", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and err[0].startswith("error:") and "--task toy-qa" in err[0], err


def test_the_curve_marks_where_each_stage_began(tiny):
    from bert_core.inspect.finetune_figures import accuracy_curves_figure

    result, _, _ = _run(tiny, _staged_task(), steps=20)
    fig = accuracy_curves_figure({"pretrained": result.evals}, x="step", metric="macro_f1", stages=result.stages)
    lines = [shape for shape in fig.layout.shapes if shape.line.dash == "dot"]
    assert [line.x0 for line in lines] == [s.step for s in result.stages] == [0, 3, 5, 8, 11, 13, 16]
    assert [a.text for a in fig.layout.annotations] == ["sentence", "where", "happened", "who", "what", "finder",
                                                        "toy QA stories"]
    assert not accuracy_curves_figure({"pretrained": result.evals}, stages=result.stages[:1]).layout.shapes

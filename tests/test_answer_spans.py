"""Answer spans end to end: the AnswerSpans kind learns where answers sit, the CLI trains on a SQuAD-format file and
saves a folder transformers loads as BertForQuestionAnswering with the same logits, bad files are one error line,
answer_question reads a passage longer than the model in windows, and the Fine-tune page answers a question."""

import json
import random
from pathlib import Path

import pytest
import torch

from bert_core.data.answer_spans_data import QAData, QAExample, split_by_passage, toy_qa_task
from bert_core.model.bert import BertForPreTraining, BertForQuestionAnswering
from bert_core.model.config import BertConfig
from bert_core.model.hf import load_pretrained, save_pretrained
from bert_core.model.tokenization import train_tokenizer
from bert_core.training.answer_spans import SPAN_ANSWER_METRICS, AnswerSpans, answer_question
from bert_core.training.finetune import finetune
from bert_core.training.finetune_settings import TOY_QA_STEPS, FinetuneConfig
from tests.app_fixtures import finish_page_run

transformers = pytest.importorskip("transformers")

COLOURS = ["red", "blue", "green", "yellow", "white", "black", "brown", "grey"]
THINGS = ["boat", "hat", "door", "car", "kite", "cup", "shoe", "bag"]


def colour_questions(n: int = 300) -> QAData:
    """'What colour is the X?' over passages naming four things and their colours (one fact a sentence), a
    question about each of the four: n questions on n / 4 different passages."""
    examples = []
    for p in range((n + 3) // 4):
        rng = random.Random(p)
        things, colours = rng.sample(THINGS, 4), rng.sample(COLOURS, 4)
        context = " ".join(f"The {t} is {c}." for t, c in zip(things, colours))
        for k in range(4):
            start = context.index(f"The {things[k]} is ") + len(f"The {things[k]} is ")
            examples.append(QAExample(f"p{p}q{k}", f"What colour is the {things[k]}?", context, [colours[k]],
                                      [start]))
    return QAData(examples[:n], source="colours")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qa-base")
    texts = [ex.context for ex in colour_questions(40).examples] + [ex.question for ex in colour_questions(8).examples]
    tokenizer = train_tokenizer(texts + [ex.context for ex in toy_qa_task(0, 30).examples], vocab_size=300)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=tokenizer.vocab_size, max_position_embeddings=128))
    save_pretrained(model, folder, tokenizer=tokenizer)
    return folder


def squad_file(path: Path, data: QAData) -> Path:
    paragraphs = {}
    for ex in data.examples:
        paragraphs.setdefault(ex.context, []).append(
            {"id": ex.id, "question": ex.question,
             "answers": [{"text": a, "answer_start": s} for a, s in zip(ex.answers, ex.answer_starts)]})
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": c, "qas": q} for c, q in paragraphs.items()]}]}))
    return path


def test_an_answer_span_head_learns_to_find_answers(checkpoint):
    # Questions about each passage's first thing: the answer sits at one place of a varying passage, so the labels,
    # the loss, the windows and the decoding back to characters must all be right for exact match to reach 1.
    # (Telling which of four things a question asks about needs the question matched against the passage, which
    # a 2-layer model learns far more slowly: docs/benchmarks.md, "Token tags and answer spans".)
    data = colour_questions(1200)
    data = QAData([ex for i, ex in enumerate(data.examples) if i % 4 == 0], source="first colours")
    task = AnswerSpans(*split_by_passage(data, 240, 60, seed=0))
    model, tokenizer = task.head_from_checkpoint(checkpoint, seed=0)
    result = finetune(model, tokenizer, task=task, config=FinetuneConfig(
        max_steps=100, time_budget_s=None, batch_size=16, learning_rate=1e-3, max_length=64, eval_points=2,
        device="cpu"))
    assert result.kind == "spans" and result.metric_names == SPAN_ANSWER_METRICS
    first, last = result.evals[0], result.evals[-1]
    assert first.accuracy < 0.3, first
    assert last.accuracy > 0.9 and last.macro_f1 >= last.accuracy, last  # F1 counts partial overlaps too


def test_answer_question_reads_a_long_passage_in_windows(checkpoint):
    task = AnswerSpans(*split_by_passage(colour_questions(40), 24, 12, seed=0))
    model, tokenizer = task.head_from_checkpoint(checkpoint, seed=0)
    passage = " ".join(f"The {t} is {c}." for t in THINGS for c in COLOURS)  # about 200 tokens
    answer = answer_question(model, tokenizer, "What colour is the kite?", passage, max_length=48)
    assert passage[answer.start_char:answer.end_char] == answer.text
    assert 0 < answer.probability <= 1
    assert len(answer.tokens) == len(answer.start_probs) == len(answer.end_probs) <= 48
    assert sum(p for p, keep in zip(answer.start_probs, answer.passage_token) if keep) <= 1 + 1e-6


def test_cli_trains_on_a_squad_file_and_saves_what_transformers_loads(checkpoint, tmp_path, capsys):
    from bert_core.cli.main import main

    squad = squad_file(tmp_path / "colours.json", colour_questions(80))
    out = tmp_path / "qa"
    code = main(["finetune", "--checkpoint", str(checkpoint), "--squad", str(squad), "--steps", "3",
                 "--max-length", "64", "--device", "cpu", "--compare-scratch", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    header = captured.out.splitlines()[0]
    assert "exact match" in header and "F1" in header
    assert "BertForQuestionAnswering" in captured.out
    for folder in (out, out / "from-scratch"):
        ref, info = transformers.BertForQuestionAnswering.from_pretrained(
            folder, attn_implementation="eager", output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"]
        ours = load_pretrained(folder, BertForQuestionAnswering)
        ids = torch.tensor([[2, 10, 11, 3, 12, 13, 14, 3], [2, 15, 3, 16, 17, 3, 0, 0]])
        mask, types = (ids != 0).long(), torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 0, 0]])
        with torch.no_grad():
            a = ours(ids, mask, types)
            b = ref.eval()(input_ids=ids, attention_mask=mask, token_type_ids=types)
        assert (a.start_logits - b.start_logits).abs().max() <= 1e-5
        assert (a.end_logits - b.end_logits).abs().max() <= 1e-5


@pytest.mark.parametrize("change, message", [
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start=3), "is not at answer_start"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].pop("question"), "question"),
])
def test_cli_refuses_a_bad_squad_file_with_one_error_line(checkpoint, tmp_path, capsys, change, message):
    from bert_core.cli.main import main

    path = squad_file(tmp_path / "bad.json", colour_questions(10))
    raw = json.loads(path.read_text())
    change(raw)
    path.write_text(json.dumps(raw))
    code = main(["finetune", "--checkpoint", str(checkpoint), "--squad", str(path), "--steps", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0], err


def test_the_page_fine_tunes_question_answering_and_answers_a_question():
    from streamlit.testing.v1 import AppTest

    script = str(Path(__file__).parent.parent / "pages" / "5_Fine-tune.py")
    at = AppTest.from_file(script, default_timeout=60)
    at.run()
    labels_rate = at.number_input(key="ft_lr").value
    at.radio(key="ft_kind").set_value("spans").run()
    assert at.radio(key="ft_data").value == "toy_qa"
    assert at.number_input(key="ft_maxlen").value == 256
    # The toy stories: their drills first, the CLI's steps under the page's longest cap, and answer spans' half rate.
    assert at.checkbox(key="ft_drills").value is True and at.number_input(key="ft_budget").value == 600
    assert at.number_input(key="ft_steps").value == TOY_QA_STEPS
    assert at.number_input(key="ft_lr").value == pytest.approx(labels_rate / 2)
    # What to expect names the drills and, with the shipped tiny active, that it reads the stories at some seeds.
    assert any("What did tom do?" in c.value for c in at.caption)
    assert any("drills click at some seeds only" in c.value for c in at.caption)
    at.radio(key="ft_data").set_value("upload_squad").run()
    # the kind's budget again for another dataset
    assert at.number_input(key="ft_budget").value == 300 and at.number_input(key="ft_steps").value == 600
    at.radio(key="ft_data").set_value("toy_qa").run()
    for key, value in (("ft_train", 200), ("ft_val", 40), ("ft_steps", 8)):
        at.number_input(key=key).set_value(value)
    at.run()
    start = [b for b in at.button if "Fine-tune both" in b.label]
    assert start, f"no start button: {[b.label for b in at.button]}"
    start[0].click().run()
    job = finish_page_run(at)   # waits on the race's own end, however loaded the machine
    assert not at.exception, at.exception
    assert job.phase == "finished", f"the race ended {job.phase}: {job.error}"
    tables = [d.value for d in at.dataframe if "run" in d.value.columns]
    assert tables, f"the race finished but the page drew no results table: {[e.value for e in at.error]}"
    table = tables[0]
    assert list(table["run"]) == ["from pretrained", "from scratch"] and "exact match" in table.columns
    assert any(h.value == "Ask each a question" for h in at.subheader)
    assert any("each drill at its end" in c.value and "where" in c.value for c in at.caption)
    assert any("answers" in m.value for m in at.markdown)
    assert not at.error

"""Each kind of fine-tuning answers the Fine-tune page's questions (bert_core.inspect.finetune_kinds), and the run panel
the Train and Fine-tune pages share says how a run stands (bert_core.app.run_panel): both without Streamlit."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from bert_core.data.answer_spans_data import toy_qa_task
from bert_core.data.classification_data import toy_order_task
from bert_core.data.token_tags_data import read_conll
from bert_core.inspect import finetune_kinds
from bert_core.app import run_panel
from bert_core.inspect.finetune_kinds import KIND_PAGES, SIZES, Block

CONLL = b"He PRP B-NP\nreckons VBZ B-VP\nthe DT B-NP\ndeficit NN I-NP\n. . O\n\nRates NNS B-NP\nrose VBD B-VP\n. . O\n"


def test_the_kinds_are_the_tasks_kinds_in_the_pages_order_with_their_own_defaults():
    assert list(KIND_PAGES) == ["labels", "tags", "spans"]
    for kind, kp in KIND_PAGES.items():
        assert kp.name == kind and set(kp.settings) == {"steps", "budget", "maxlen"}
        choices = kp.choices(None)
        assert list(choices)[-1] in finetune_kinds.UPLOADED, "an upload is always the last choice"
        assert all(c in SIZES for c in choices), "every choice has its split sizes"
        assert kp.try_title and kp.fetch_instead and kp.unit
    assert [KIND_PAGES[k].has_baseline for k in KIND_PAGES] == [True, True, False]
    assert KIND_PAGES["tags"].tag_columns and KIND_PAGES["labels"].tag_columns is None


def test_a_kind_offers_its_real_tasks_when_the_server_has_them_and_prefers_them(tmp_path, monkeypatch):
    monkeypatch.setattr(finetune_kinds, "TASKS", {})   # nothing fetchable: only what the shared folder holds
    labels = KIND_PAGES["labels"]
    assert list(labels.choices(tmp_path)) == ["toy_order", "toy", "upload"]
    (tmp_path / "sentence_polarity").mkdir()
    (tmp_path / "sentence_polarity" / "polarity.csv").write_text("text,label\na,0\n")
    choices = labels.choices(tmp_path)
    assert list(choices) == ["toy_order", "toy", "polarity", "upload"]
    assert labels.default_data(choices, lambda c: True) == "polarity"
    assert labels.default_data(choices, lambda c: False) == "toy_order"   # listed (fetchable), not on the server
    assert KIND_PAGES["spans"].default_data(KIND_PAGES["spans"].choices(tmp_path), lambda c: True) == "toy_qa"
    assert labels.offers_drop_empty("polarity") and not labels.offers_drop_empty("toy_order")
    assert not KIND_PAGES["tags"].offers_drop_empty("upload_conll")


def test_labels_say_what_to_expect_and_the_chance_line():
    data = toy_order_task(0, num_examples=40)
    kp = KIND_PAGES["labels"]
    view = kp.describe(data, "toy_order", None)
    assert view.captions[0] == finetune_kinds.EXPECT["toy_by_default_run"]["toy_order"]
    assert "40 examples" in view.captions[1]
    assert len(view.rows) == 8 and set(view.rows[0]) == {"label", "text"}
    mini = kp.describe(data, "polarity", "bert-mini-english").captions[0]
    assert mini == kp.expectation("polarity", "bert-mini-english") and "bert-mini-english:" in mini
    assert len(kp.describe(data, "upload", "bert-mini-english").captions) == 1   # an upload: its summary only
    assert kp.chance(data) == max(data.label_counts()) / len(data)
    assert "per label" in kp.split_caption(data, data)
    assert kp.explained({"ft_sentence": "  "}, data) is None
    assert kp.explained({"ft_sentence": "the cat sat"}, data) == ("the cat sat", None, None)
    assert [f.key for f in kp.try_fields(data)] == ["ft_sentence"]


def test_tags_say_what_to_expect_of_chunks_and_explain_the_typed_or_held_out_sentence():
    data = read_conll(CONLL)
    kp = KIND_PAGES["tags"]
    view = kp.describe(data, "upload_conll", None)
    assert len(view.captions) == 1 and "chunk F1" in view.captions[0]   # no CoNLL-2000 promise for an upload
    chunks = kp.describe(data, "conll2000", "bert-tiny-english").captions[0]
    assert chunks == kp.expectation("conll2000", "bert-tiny-english") and "CoNLL-2000 chunks" in chunks
    assert view.rows[0] == {"sentence": "He reckons the deficit .", "tags": "B-NP B-VP B-NP I-NP O"}
    assert kp.chance(data) is None
    fields = kp.try_fields(data)
    assert [f.key for f in fields] == ["ft_tag_example", "ft_tag_sentence"] and fields[0].options["max_value"] == 1
    assert kp.explained({"ft_tag_example": 1, "ft_tag_sentence": ""}, data) == ("Rates rose .", None, None)
    assert kp.explained({"ft_tag_example": 1, "ft_tag_sentence": "a b"}, data) == ("a b", None, None)
    per_type = {"NP": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2}}
    results = {n: SimpleNamespace(details={"per_type": per_type}) for n in ("a", "b", "c", "d", "e")}
    expander, = kp.result_blocks(results)
    columns, = expander.parts
    assert expander.what == "expander" and len(columns.parts) == 4 and len(columns.parts[0]) == 4   # a, then e


def test_spans_say_what_the_drills_bring_and_explain_the_question_in_its_passage():
    data = toy_qa_task(0, num_stories=6)
    kp = KIND_PAGES["spans"]
    view = kp.describe(data, "toy_qa", "bert-mini-english")
    assert "drills" in view.captions[0]
    assert view.captions[1] == (finetune_kinds.EXPECT["expect_qa_drills"] + " "
                                + finetune_kinds.EXPECT["expect_qa_by_model"]["bert-mini-english"])
    alone = toy_qa_task(0, num_stories=6, drills=False)
    assert kp.describe(alone, "toy_qa", None).captions[1] == finetune_kinds.EXPECT["expect_qa_alone"]
    passage, question = kp.try_fields(data)
    assert (passage.key, question.key) == ("ft_passage", "ft_question")
    assert passage.options["value"] == data.examples[0].context
    assert kp.explained({"ft_passage": "tom went home .", "ft_question": "who ?"}, data) == (
        "who ?", "tom went home .", None)
    assert kp.explained({"ft_passage": "tom went home .", "ft_question": ""}, data) is None


def test_the_page_draws_only_the_block_kinds_it_knows():
    page = (Path(__file__).parent.parent / "pages" / "5_Fine-tune.py").read_text()
    assert 'kind == "' not in page and 'task_kind == "' not in page, "the page asks the kind, never its name"
    assert Block("caption", "x").options == {}


# ------------------------------------------------------------------------------------------------ the run panel


def _run(phase="running", note=None, record_failed=None, error=None, ended_note=None, trained=None):
    trainer = SimpleNamespace(step=trained) if trained is not None else None
    job = SimpleNamespace(error=error, ended_note=ended_note, trainer=trainer)
    return SimpleNamespace(phase=phase, note=note, record_failed=record_failed, job=job)


@pytest.mark.parametrize("words", [run_panel.TRAIN_WORDS, run_panel.FINETUNE_WORDS])
def test_the_panel_says_a_lost_record_on_both_pages_and_stop_only_to_the_owner(words):
    lost = "Its record could not be written (No space left on device): it would be lost if the server restarted"
    said = run_panel.status_notices(_run(note="stopped by the server", record_failed=lost), words, False, None)
    assert [(n.level, n.text) for n in said] == [("warning", f"This {words.noun} was stopped by the server."),
                                                 ("warning", lost)]
    queued = _run("queued", trained=1200)
    owner, = run_panel.status_notices(queued, words, False, (2, 95))
    viewer, = run_panel.status_notices(queued, words, True, (2, 95))
    assert owner.text.startswith(f"**Queued**: 2 run(s) ahead of {words.whose}, estimated wait 1m 35s.")
    assert owner.text.endswith("*Stop* cancels it.") and not viewer.text.endswith("*Stop* cancels it.")
    assert "Its turn was up" in owner.text and not run_panel.waiting(queued) and run_panel.waiting(_run("queued"))
    failed, = run_panel.status_notices(_run("failed", error="exit code -9"), words, False, None)
    assert (failed.level, failed.text) == ("error", f"{words.doing} failed: exit code -9")
    watch = "watch" if words.noun == "run" else "ftwatch"
    assert words.share_link("http://host/Train?run=abc", "v1") == f"http://host/Train?{watch}=v1"

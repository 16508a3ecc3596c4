"""The lesson page under AppTest: Next and Back move the step in the URL, a link opens its step, each step's notice
is the one computed from the model on the page, and an answer is revealed with its reason."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out
pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from bert_core.inspect import lesson  # noqa: E402
from bert_core.serve import app_state  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGE = "pages/0_Lesson.py"


def _lesson(step: str | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    if step is not None:
        at.query_params["step"] = step
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _notice(at: AppTest) -> str:
    found = [i.value for i in at.info if str(i.value).startswith("**What to notice.**")]
    assert len(found) == 1, [i.value for i in at.info]
    return found[0].removeprefix("**What to notice.** ")


@pytest.fixture(autouse=True)
def _end_runs():
    yield
    for run in app_state.RUNS.runs():
        app_state.RUNS.discard(run.run_id, wait=30)


def test_next_and_back_walk_the_steps_and_the_url_follows():
    at = _lesson()
    assert at.query_params["step"] == ["tokens"] or at.query_params["step"] == "tokens"
    for key in lesson.STEP_KEYS[1:]:
        at.button(key="lesson_next").click().run()
        assert not at.exception, (key, [e.value for e in at.exception])
        assert at.query_params["step"] in (key, [key])
        assert any(f"of {len(lesson.STEPS)}" in str(p.proto.text) for p in at.get("progress"))
    assert at.button(key="lesson_next").disabled
    at.button(key="lesson_back").click().run()
    assert at.query_params["step"] in ("bert-or-gpt", ["bert-or-gpt"])


def test_the_two_inside_steps_draw_their_figure_and_a_notice_from_the_model():
    at = _lesson("embedding")
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) == 1 and at.selectbox(key="lesson_emb_token").value == 1
    text = _notice(at)
    assert text.startswith("Token 2 “the”") and "positions 2 and 5" in text
    at.selectbox(key="lesson_emb_token").set_value(2).run()
    assert _notice(at).startswith("Token 3 “dog”")
    at = _lesson("attends")
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) == 1
    assert "sum to 1.00" in _notice(at) and "Undivided by √" in _notice(at)
    at.selectbox(key="lesson_attends_token").set_value(1).run()
    assert _notice(at).startswith("Token 2 ")


def test_a_link_opens_its_step_and_a_bad_one_the_first():
    assert _lesson("predictions").query_params["step"] in ("predictions", ["predictions"])
    assert _lesson("nonsense").query_params["step"] in ("tokens", ["tokens"])


def test_the_tokens_and_masking_notices_are_those_of_the_model_on_the_page():
    from bert_core.inspect.inspection import group_word_pieces, word_text

    at = _lesson("tokens")
    at.text_input(key="lesson_text").set_value("The gardeners were replanting everything.").run()
    active = app_state.shipped_model("bert-tiny-english")
    words = group_word_pieces(active.tokenizer.tokenize("The gardeners were replanting everything."))
    assert _notice(at) == lesson.notice_tokens([word_text(w) for w in words], words, active.tokenizer.vocab_size)

    at = _lesson("masking")
    at.number_input(key="lesson_seed").set_value(3).run()
    text = _notice(at)
    data = app_state.toy_pretraining_data(active)
    from bert_core.inspect.inspection import masking_stats
    from bert_core.inspect.masked_guesses import accuracy_by_decision

    instances = data.build_instances(0)[:app_state.DECISION_POOL]
    stats = masking_stats(active.tokenizer, [x.input_ids for x in instances], seed=3)
    acc = accuracy_by_decision(active.model, active.tokenizer, [(x.input_ids, x.token_type_ids) for x in instances],
                               seed=3)
    assert text == lesson.notice_masking(stats, acc)


def test_one_step_then_another_and_the_answer_with_its_reason():
    at = _lesson("step")
    assert not [i for i in at.info if str(i.value).startswith("**What to notice.**")]
    at.button(key="lesson_step_go").click().run()
    assert _notice(at).startswith("Update 1: the masked-LM loss was")
    at.button(key="lesson_step_go").click().run()
    assert _notice(at).startswith("Update 2:")
    q = lesson.STEPS[lesson.STEP_KEYS.index("step")].question
    at.radio(key="lesson_q_step").set_value(q.answer).run()
    assert any(q.reason in str(s.value) and str(s.value).startswith("Right.") for s in at.success)
    at.radio(key="lesson_q_step").set_value((q.answer + 1) % len(q.choices)).run()
    assert any(q.reason in str(w.value) for w in at.warning)
    at.button(key="lesson_step_reset").click().run()
    assert not [i for i in at.info if str(i.value).startswith("**What to notice.**")]


def test_step_once_on_the_train_page_takes_the_next_update_of_a_stopped_run():
    import time

    at = AppTest.from_file(str(ROOT / "pages/2_Train.py"), default_timeout=120)
    at.run()
    assert next(b for b in at.button if b.label == "Step once").disabled   # no run: nothing to step
    next(b for b in at.button if b.label == "Start").click().run()
    deadline = time.time() + 120
    while time.time() < deadline:
        run = app_state.RUNS.runs()[0]
        if run.trainer is not None and run.trainer.step >= 5:
            break
        time.sleep(0.2)
    at.run()
    assert next(b for b in at.button if b.label == "Step once").disabled   # running: stop it first
    next(b for b in at.button if b.label == "Stop").click().run()
    at.run()
    stopped_at = app_state.RUNS.runs()[0].trainer.step
    next(b for b in at.button if b.label == "Step once").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(m.label == "Update" and m.value == f"{stopped_at + 1:,}" for m in at.metric)
    assert any("Step once" in str(md.value) for md in at.markdown)
    assert any("Gradient by part of the model" in str(c.proto.spec) for c in at.get("plotly_chart"))


def test_layers_and_heads_count_from_1_in_the_boxes_the_figure_and_an_old_link():
    at = _lesson("bert-or-gpt")
    layer, head = at.number_input(key="lesson_gpt_layer"), at.number_input(key="lesson_gpt_head")
    assert (layer.min, layer.value, head.min, head.value) == (1, 1, 1, 1)
    bert = app_state.shipped_model("bert-tiny-english")
    assert layer.max == bert.config.num_hidden_layers and head.max == bert.config.num_attention_heads
    figure = next(c for c in at.get("plotly_chart") if "L1 H1" in str(c.proto.spec))
    assert not counted_from_0(figure.proto.spec)
    at.number_input(key="lesson_gpt_head").set_value(2).run()
    assert any("L1 H2" in str(c.proto.spec) for c in at.get("plotly_chart"))
    at = _lesson_with(step="bert-or-gpt", lesson_gpt_layer="0", lesson_gpt_head="0")   # a link from before
    assert at.number_input(key="lesson_gpt_layer").value == 1 and at.number_input(key="lesson_gpt_head").value == 1


def _texts(node):
    """Every string a reader sees in a Plotly figure's JSON: titles, annotations, tick labels, hover text (not the
    arrays Plotly writes in base64)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key not in ("bdata", "z", "x", "y", "customdata"):
                yield from _texts(value)
    elif isinstance(node, list):
        for value in node:
            yield from _texts(value)
    elif isinstance(node, str):
        yield node


def counted_from_0(spec: str) -> list[str]:
    """The figure's texts that name a layer or head 0 ("L0", "H0", "layer 0", "head 0")."""
    import json
    import re

    return [t for t in _texts(json.loads(spec)) if re.search(r"\b[LH]0\b|\b(layer|head) 0\b", t, re.I)]


def _lesson_with(**query) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    for name, value in query.items():
        at.query_params[name] = value
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_race_button_sets_the_lessons_race_and_the_fine_tune_page_leads_back():
    at = _lesson("fine-tune")
    at.button(key="lesson_race_go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    for name, value in lesson.LESSON_RACE.items():
        assert at.session_state[f"ft_{name}"] == value, name
    at.switch_page("pages/5_Fine-tune.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.radio(key="ft_data").value == "toy_order" and at.number_input(key="ft_steps").value == 300
    back = [link for link in at.get("page_link") if "Back to the lesson" in str(link.proto.label)]
    assert back and "step=fine-tune" in str(back[0].proto.page) + str(back[0].proto.query_string), back[0].proto


def test_the_lesson_reopens_at_the_step_left_and_its_last_step_sums_up_what_was_seen():
    at = _lesson("tokens")
    seen = _notice(at)
    at.button(key="lesson_next").click().run()
    at.switch_page("pages/3_Attention.py").run()
    del at.query_params["step"]
    at.switch_page(PAGE).run()   # the sidebar's *Lesson*: no step in its link
    assert at.query_params["step"] in ("embedding", ["embedding"])
    at.query_params["step"] = "fine-tune"
    at.run()
    summary = next(str(m.value) for m in at.markdown if "**Tokens.**" in str(m.value))
    assert seen in summary and "**What an embedding is.**" in summary
    assert any("What to try next" in str(m.value) for m in at.markdown)


def test_every_step_that_looks_at_a_model_names_it():
    for key in ("tokens", "masking", "attention", "predictions", "fine-tune"):
        at = _lesson(key)
        assert any("Model in use (the sidebar's): **bert-tiny-english**" in str(c.value) for c in at.caption), key

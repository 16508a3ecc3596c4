"""The lesson page under AppTest: Next and Back move the step in the URL, a link opens its step, each step's notice
is the one computed from the model on the page, and an answer is revealed with its reason."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out
pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from bert_core.inspect import lesson  # noqa: E402
from bert_core.inspect.safe_text import WORD_JOINER  # noqa: E402
from bert_core.app import app_models, app_state  # noqa: E402

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


def _shown(markdown: str) -> str:
    """Markdown as a reader sees it: the page escapes what a visitor's text could open (`\\[`, `\\:`)."""
    return re.sub(r"\\(.)", r"\1", str(markdown)).replace(WORD_JOINER, "")


def _notice(at: AppTest) -> str:
    found = [i.value for i in at.info if str(i.value).startswith("**What to notice.**")]
    assert len(found) == 1, [i.value for i in at.info]
    return _shown(found[0].removeprefix("**What to notice.** "))


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
    assert len(at.get("plotly_chart")) == 2   # the scores and weights; the values and their weighted sum
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
    active = app_models.shipped_model("bert-tiny-english")
    words = group_word_pieces(active.tokenizer.tokenize("The gardeners were replanting everything."))
    assert _notice(at) == lesson.notice_tokens([word_text(w) for w in words], words, active.tokenizer.vocab_size)

    at = _lesson("masking")
    at.number_input(key="lesson_seed").set_value(3).run()
    text = _notice(at)
    data = app_models.toy_pretraining_data(active)
    from bert_core.inspect.inspection import masking_stats
    from bert_core.inspect.inspection import accuracy_by_decision

    instances = data.build_instances(0)[:app_models.DECISION_POOL]
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
    bert = app_models.shipped_model("bert-tiny-english")
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
    summary = next(_shown(m.value) for m in at.markdown if "**Tokens**" in str(m.value))
    assert seen in summary and "**What an embedding is** (on bert-tiny-english)." in summary
    assert "- **Tokens** (on bert-tiny-english). " in summary
    assert any("What to try next" in str(m.value) for m in at.markdown)


def test_every_step_that_looks_at_a_model_names_it():
    for key in ("tokens", "masking", "attention", "predictions", "fine-tune"):
        at = _lesson(key)
        assert any("Model in use (the sidebar's): **bert-tiny-english**" in str(c.value) for c in at.caption), key


def test_the_feed_forward_step_draws_the_block_its_activation_and_a_unit_with_a_notice_from_the_model():
    at = _lesson("feed-forward")
    assert not at.exception, [e.value for e in at.exception]
    bert = app_models.shipped_model("bert-tiny-english")
    layers, hidden, units = bert.config.num_hidden_layers, bert.config.hidden_size, bert.config.intermediate_size
    assert at.number_input(key="lesson_ffn_layer").value == layers and at.selectbox(key="lesson_ffn_token").value == 2
    specs = [str(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(specs) == 3   # the block's strips, the activation with this token's units, where the top unit fires
    assert f"Layer {layers}'s feed-forward block for token 3" in specs[0] and "fires most" in specs[2]
    text = _notice(at)
    assert text.startswith("Token 3 ") and f"layer {layers}: W1·x + b1 turns its {hidden} numbers into {units} units" \
        in text and re.search(r"tokens of the (held-out text|built-in sentences), unit \d+ fires most on", text)
    at.number_input(key="lesson_ffn_layer").set_value(1).run()
    assert f"layer 1: W1·x + b1" in _notice(at) and "Layer 1's feed-forward block" in str(at.get("plotly_chart")[0].proto.spec)
    assert any("Model in use (the sidebar's): **bert-tiny-english**" in str(c.value) for c in at.caption)


def test_the_layers_step_fits_the_probes_on_the_model_and_offers_the_fetch_without_conll(monkeypatch):
    from bert_core.data import task_downloads
    if task_downloads.local_task_csv("conll2000") is None:
        pytest.skip("CoNLL-2000 is not on this machine")
    at = _lesson("layers")
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) == 1
    text = _notice(at)
    layers = app_models.shipped_model("bert-tiny-english").config.num_hidden_layers
    assert text.startswith("Of ") and "held-out words in 100 sentences" in text
    assert f"layer {layers} " in text and f"layer {layers + 1}" not in text and "a random model of the same shape" in text
    monkeypatch.setattr(task_downloads, "local_task_csv", lambda *a, **k: None)
    monkeypatch.setattr(task_downloads, "fetch_task_csv", lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
    at = _lesson("layers")
    assert not at.exception and not at.get("plotly_chart")
    assert any("not on this server yet" in str(i.value) for i in at.info)
    at.button(key="lesson_fetch_conll").click().run()
    assert not at.exception and any("python -m bert_core download conll2000" in str(e.value) for e in at.error)


def test_the_attends_step_picks_its_layer_and_head_counted_from_1_and_names_them():
    at = _lesson("attends")
    bert = app_models.shipped_model("bert-tiny-english")
    layers, heads = bert.config.num_hidden_layers, bert.config.num_attention_heads
    layer, head = at.number_input(key="lesson_attends_layer"), at.number_input(key="lesson_attends_head")
    assert (layer.min, layer.max, layer.value, head.min, head.max, head.value) == (1, layers, layers, 1, heads, 1)
    assert f"layer {layers}, head 1:" in _notice(at)
    at.number_input(key="lesson_attends_layer").set_value(1).run()
    at.number_input(key="lesson_attends_head").set_value(heads).run()
    assert f"layer 1, head {heads}:" in _notice(at) and "The weighted sum of the" in _notice(at)
    specs = [str(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(specs) == 2 and all(f"Layer 1, head {heads}" in spec for spec in specs)
    assert "the weighted sum" in specs[1] and not any(counted_from_0(spec) for spec in specs)
    at = _lesson_with(step="attends", lesson_attends_layer="0", lesson_attends_head="99")   # held to the range
    assert at.number_input(key="lesson_attends_layer").value == 1
    assert at.number_input(key="lesson_attends_head").value == heads


def test_a_step_opened_scrolls_to_its_top_once():
    at = _lesson("tokens")

    def frames():
        return [str(f.proto.srcdoc) for f in at.sidebar.get("iframe") if "stMain" in str(f.proto.srcdoc)]

    assert frames() == [lesson.to_top_script(1)]
    at.button(key="lesson_next").click().run()
    assert frames() == [lesson.to_top_script(2)]   # a new step: a new script, which the browser runs
    at.selectbox(key="lesson_emb_token").set_value(2).run()
    assert frames() == []                          # the same step: the page stays where the reader scrolled


@pytest.fixture(scope="module")
def toy_folder(tmp_path_factory):
    """A nano BERT trained a few steps on the toy stories, in a folder: a lesson's own model that is not shipped."""
    from tests.app_fixtures import train_nano_checkpoint

    return train_nano_checkpoint(tmp_path_factory.mktemp("lesson-model") / "class-model")


def test_the_side_trip_to_the_shipped_model_keeps_the_lessons_model_for_the_sidebar_the_race_and_the_end(
        toy_folder):
    at = _lesson("tokens")
    at.sidebar.radio(key="model_source").set_value(app_models.SOURCE_FOLDER).run()
    at.sidebar.text_input(key="model_folder").input(str(toy_folder)).run()
    at.query_params["step"] = "predictions"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    ours = _notice(at)
    at.toggle(key="lesson_pred_english").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    # The shipped model's guesses are drawn on this step, named; the lesson's model is still the sidebar's.
    assert any("bert-tiny-english's guesses" in str(c.proto.spec) for c in at.get("plotly_chart"))
    assert any("On bert-tiny-english:" in _shown(c.value) and "The lesson's model is still class-model." in
               _shown(c.value) for c in at.caption)
    assert at.session_state["model_source"] == app_models.SOURCE_FOLDER and _notice(at) == ours
    assert any("Model in use (the sidebar's): **class-model**" in str(c.value) for c in at.caption)
    for key in ("bert-or-gpt", "fine-tune"):
        at.button(key="lesson_next").click().run()
        assert not at.exception, (key, [e.value for e in at.exception])
    assert any("Model in use (the sidebar's): **class-model**" in str(c.value) for c in at.caption)
    summary = next(_shown(m.value) for m in at.markdown if "**Predictions**" in str(m.value)).splitlines()
    summary = summary[next(i for i, line in enumerate(summary) if line.startswith("- **Predictions**")):]
    assert summary[0].startswith("- **Predictions** (on class-model). ")
    assert summary[1].startswith("- **Predictions, side trip** (on bert-tiny-english). The model")
    assert summary[2].startswith("- **BERT or GPT** (on bert-tiny-english and gpt-tiny-english). ")
    at.button(key="lesson_race_go").click().run()
    at.switch_page("pages/5_Fine-tune.py").run()
    assert not at.exception, [e.value for e in at.exception]
    # The race fine-tunes the lesson's model: the sidebar there is the lesson's.
    assert at.sidebar.radio(key="model_source").value == app_models.SOURCE_FOLDER
    assert at.sidebar.text_input(key="model_folder").value == str(toy_folder)


def test_the_page_script_is_functions():
    """Its code is in functions, which the function-size check reads; at module level only imports, constants,
    the functions and the one call of main() (issue 72: 226 lines of module-level code before)."""
    import ast

    tree = ast.parse((ROOT / PAGE).read_text())
    loose = [ast.unparse(node).splitlines()[0] for node in tree.body
             if not isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign))
             and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]   # the docstring
    assert loose == ["main()"], loose
    assigned = [ast.unparse(node.value) for node in tree.body if isinstance(node, ast.Assign)]
    assert all("(" not in value for value in assigned), assigned   # names for things, never a call that draws


def test_the_lesson_and_its_scroll_frame_work_on_a_streamlit_without_st_iframe(monkeypatch):
    """requirements.txt allows Streamlit 1.53, before st.iframe (1.56): there the step's scroll-to-top frame is
    drawn by the components module (the page called st.iframe itself and raised an AttributeError)."""
    import streamlit

    monkeypatch.delattr(streamlit, "iframe")
    at = _lesson("tokens")
    assert not at.exception, [e.value for e in at.exception]
    html = [str(e.proto) for e in at.sidebar if "to_top" in str(e.proto) or "stMain" in str(e.proto)]
    assert any("stMain" in h for h in html), html

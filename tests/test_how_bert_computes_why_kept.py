"""The How BERT computes page's fifth tab ("Why a fine-tuned model decided") keeps its inputs when the user leaves
the page and comes back, as the page's other widgets do (app_widgets.persist_keys)."""

import pytest

pytestmark = pytest.mark.slow  # AppTest runs of a page with a model
pytest.importorskip("streamlit")

from tests.test_how_bert_computes_why import PAGE, WHY, _open, ended_race  # noqa: E402, F401  (a fixture)

SENTENCE = "the film was a long and rather dull story ."


def test_the_why_tabs_inputs_survive_a_visit_to_another_page(monkeypatch, ended_race):  # noqa: F811
    at = _open(monkeypatch, ended_race)
    at.session_state["hbc_tab"] = WHY   # lazy tabs: only the open one runs; the open tab is kept too
    at.run()
    at.text_input(key="hbc_why_ft_sentence").input(SENTENCE).run()
    at.toggle(key="hbc_why_on").set_value(True).run()
    at.switch_page("pages/1_Tokens_and_masking.py").run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.label for t in at.tabs][-1] == WHY
    assert at.text_input(key="hbc_why_ft_sentence").value == SENTENCE
    assert at.toggle(key="hbc_why_on").value is True
    assert at.selectbox(key="hbc_why_model").value == "pretrained"
    assert not at.warning, [w.value for w in at.warning]   # no "default value and Session State" warning

"""The "How BERT computes" page under `streamlit.testing.v1.AppTest`, on the shipped BERT and GPT twin and on a
nano model trained for the test: every view draws, pickers count from 1, the temperature is marked as a what-if,
heads switch off, the grammar check scores pairs, and bad input gets a message, never a traceback."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # ~30 s of AppTest runs
pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from bert_core.inspect.built_in_text import MINIMAL_PAIRS  # noqa: E402
from bert_core.inspect.safe_text import markdown  # noqa: E402
from bert_core.paths import DEFAULT_CHECKPOINT  # noqa: E402
from bert_core.serve import model_sources  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGE = "pages/7_How_BERT_computes.py"
TIMEOUT = 120
SHIPPED = DEFAULT_CHECKPOINT.parent


@pytest.fixture(scope="module")
def nano(tmp_path_factory):
    from tests.app_fixtures import train_nano_checkpoint

    return train_nano_checkpoint(tmp_path_factory.mktemp("ckpt") / "nano-toy")


def _open(folder, monkeypatch, **query) -> AppTest:
    if not (Path(folder) / "config.json").is_file():
        pytest.skip(f"{folder} is not in this checkout")
    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(folder))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(PAGE).run()
    _clean(at)
    return at


def _clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def _tab(at: AppTest, name: str) -> AppTest:
    """Open the tab `name` (the tabs are lazy: only the open one runs)."""
    at.session_state["hbc_tab"] = name
    at.run()
    _clean(at)
    return at


def _errors(at: AppTest) -> list[str]:
    return [str(e.value) for e in at.error]


@pytest.mark.parametrize("folder", [SHIPPED / "bert-mini-english", SHIPPED / "gpt-tiny-english", "nano"])
def test_every_view_draws_on_bert_the_gpt_twin_and_a_trained_nano(folder, nano, monkeypatch):
    at = _open(nano if folder == "nano" else folder, monkeypatch)
    assert not at.error, _errors(at)
    assert [t.label for t in at.tabs] == ["Inside attention", "Each layer's guess", "Embeddings", "Grammar check",
                                         "The whole pass"]
    # Inside attention: vectors, scores, context; the weights as matrices and q × k; the feed-forward block, its
    # activation and a unit. Only the open tab runs.
    assert len(at.get("plotly_chart")) == 8
    assert at.selectbox(key="hbc_layer").options[0] == "1" and at.selectbox(key="hbc_head").options[0] == "1"
    assert at.selectbox(key="hbc_token").options[0].startswith("1 [CLS]")
    causal = "gpt" in str(folder)
    assert any("causal mask" in c.value for c in at.caption) == causal
    # lens table and lines; embedding parts and lengths, neighbours in context, neighbours, word map; grammar x2;
    # the whole pass
    for name, charts in (("Embeddings", 5), ("Grammar check", 2), ("The whole pass", 1), ("Each layer's guess", 2)):
        assert len(_tab(at, name).get("plotly_chart")) == charts, name
        assert not at.error, (name, _errors(at))
    lens_label = at.text_input(key="hbc_lens").label
    assert ("next token" in lens_label) == causal and ("[MASK]" in lens_label) != causal


def test_pickers_and_the_temperature_what_if(monkeypatch):
    at = _open(SHIPPED / "bert-mini-english", monkeypatch)
    assert not any("what-if" in i.value for i in at.info)  # temperature 1 is the model itself
    at.selectbox(key="hbc_layer").set_value(4).run()
    at.selectbox(key="hbc_head").set_value(2).run()
    at.selectbox(key="hbc_token").set_value(3).run()
    at.slider(key="hbc_temperature").set_value(0.5).run()
    _clean(at)
    assert any("what-if at temperature 0.5" in i.value for i in at.info)
    assert any("row 3 of layer 4, head 2" in c.value for c in at.caption)


def test_out_of_range_picks_from_a_link_are_clamped(monkeypatch):
    at = _open(SHIPPED / "bert-tiny-english", monkeypatch, hbc_layer="99", hbc_head="0", hbc_token="500")
    assert not at.error, _errors(at)
    assert at.selectbox(key="hbc_layer").value == 2 and at.selectbox(key="hbc_head").value == 1


def test_switching_heads_off_shows_the_changed_guess(monkeypatch):
    at = _tab(_open(SHIPPED / "bert-mini-english", monkeypatch), "Each layer's guess")
    before = len(at.get("plotly_chart"))
    at.multiselect(key="hbc_off").set_value(["layer 4, head 1", "layer 4, head 2"]).run()
    _clean(at)
    assert len(at.get("plotly_chart")) == before + 1
    assert any(m.label == "with those heads off" for m in at.metric)


def test_the_grammar_check_uses_a_builtin_pair_and_scores_them_all(monkeypatch):
    at = _tab(_open(SHIPPED / "gpt-tiny-english", monkeypatch), "Grammar check")
    at.selectbox(key="hbc_builtin").set_value(7).run()
    at.button[0].click().run()
    _clean(at)
    assert at.text_input(key="hbc_pair_a").value == MINIMAL_PAIRS[7].good
    assert at.text_input(key="hbc_pair_b").value == MINIMAL_PAIRS[7].bad
    assert [m.label for m in at.metric][:3] == ["Score of A", "Score of B", "Prefers"]
    at.checkbox(key="hbc_all_pairs").check().run()
    _clean(at)
    assert any(f"of {len(MINIMAL_PAIRS)}** pairs" in m.value for m in at.markdown)


def test_bad_input_gets_a_message_not_a_traceback(monkeypatch):
    at = _tab(_open(SHIPPED / "bert-tiny-english", monkeypatch), "Each layer's guess")
    at.text_input(key="hbc_lens").input("no blank here").run()
    _clean(at)
    assert any(markdown("no [MASK]") in e for e in _errors(at))
    _tab(at, "Grammar check").text_input(key="hbc_pair_b").input("   ").run()
    _clean(at)
    assert any("empty" in e for e in _errors(at))
    _tab(at, "Inside attention").text_area(key="hbc_a").input("").run()
    _clean(at)
    assert any("empty" in e for e in _errors(at))
    _tab(at, "Embeddings").text_input(key="hbc_neighbour").input(" ").run()
    _clean(at)
    assert any("type a word" in e for e in _errors(at))

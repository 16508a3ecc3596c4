"""The feed-forward block on the How BERT computes page under AppTest, on the shipped BERT, its GPT twin and a nano
model trained for the test: it draws with no exception, the unit starts at the token's most active one and
follows a pick, and a visitor's sentence reaches the figures escaped."""

import json

import pytest

pytestmark = pytest.mark.slow  # ~20 s of AppTest runs
pytest.importorskip("streamlit")

from bert_core.inspect.attention_steps import attention_steps  # noqa: E402
from bert_core.inspect.feed_forward import feed_forward_steps  # noqa: E402
from bert_core.model.checkpoint import load_checkpoint  # noqa: E402
from tests.test_how_bert_computes_page import SHIPPED, _clean, _errors, _open, nano  # noqa: E402,F401

TITLES = ("feed-forward block for", "with this token's", "where it fires most")


def _charts(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")
            if any(t in c.proto.spec for t in TITLES)]


@pytest.mark.parametrize("folder", [SHIPPED / "bert-mini-english", SHIPPED / "gpt-tiny-english", "nano"])
def test_the_block_draws_and_its_unit_follows_the_token(folder, nano, monkeypatch):
    folder = nano if folder == "nano" else folder
    at = _open(folder, monkeypatch)
    assert not at.error, _errors(at)
    assert "The feed-forward block" in [h.value for h in at.subheader]
    assert len(_charts(at)) == 3
    ckpt = load_checkpoint(folder, require_tokenizer=True)
    layer, query = at.selectbox(key="hbc_layer").value - 1, at.selectbox(key="hbc_token").value - 1
    steps = attention_steps(ckpt.model.eval(), ckpt.tokenizer, at.text_area(key="hbc_a").value, layer, 0, query)
    assert at.number_input(key="hbc_unit").value == feed_forward_steps(ckpt.model, steps).most_active + 1
    at.number_input(key="hbc_unit").set_value(3).run()
    _clean(at)
    assert any("unit 3:" in json.dumps(c["layout"]["title"]) for c in _charts(at))


def test_a_visitors_sentence_reaches_the_block_escaped(monkeypatch):
    at = _open(SHIPPED / "bert-tiny-english", monkeypatch)
    at.text_area(key="hbc_a").input("<a href=x>dogs</a> bark .").run()
    _clean(at)
    at.selectbox(key="hbc_token").set_value(2).run()   # the "<" piece
    _clean(at)
    assert not at.error, _errors(at)
    spec = json.dumps(_charts(at)[0], ensure_ascii=False)
    assert "“&lt;”" in spec and "“<”" not in spec

"""The weights as matrices on the How BERT computes page under AppTest, on the shipped BERT and its GPT twin: the
section draws W_Q·x + b for the query token and q × k with no exception, W_K and W_V follow the key token picked
(first the key the query attends to most), and a visitor's sentence reaches both figures escaped."""

import base64
import json

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # ~15 s of AppTest runs
pytest.importorskip("streamlit")

from bert_core.inspect.attention_steps import attention_steps  # noqa: E402
from bert_core.model.checkpoint import load_checkpoint  # noqa: E402
from tests.test_how_bert_computes_page import SHIPPED, _clean, _errors, _open  # noqa: E402

TITLES = ("·x + b for token", "query against every key")


def _charts(at) -> list[dict]:
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return [c for c in charts if any(t in _title(c) for t in TITLES)]


def _title(chart: dict) -> str:
    return chart["layout"]["title"]["text"]


def _numbers(trace: dict) -> np.ndarray:
    """A heatmap's z as Plotly's JSON carries it (a typed array in base64), flattened."""
    z = trace["z"]
    return np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"]) if isinstance(z, dict) else np.ravel(z)


@pytest.mark.parametrize("name", ["bert-mini-english", "gpt-tiny-english"])
def test_the_section_draws_and_its_key_follows_the_pick(name, monkeypatch):
    folder = SHIPPED / name
    at = _open(folder, monkeypatch)
    assert not at.error, _errors(at)
    assert "The weights as matrices" in [h.value for h in at.subheader]
    matrix, products = _charts(at)
    query = at.selectbox(key="hbc_token").value - 1
    assert "q = W_Q·x + b" in _title(matrix) and at.selectbox(key="hbc_key").disabled
    ckpt = load_checkpoint(folder, require_tokenizer=True)
    steps = attention_steps(ckpt.model.eval(), ckpt.tokenizer, at.text_area(key="hbc_a").value,
                            at.selectbox(key="hbc_layer").value - 1, at.selectbox(key="hbc_head").value - 1, query)
    np.testing.assert_allclose(_numbers(matrix["data"][-1]), steps.q, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_numbers(products["data"][1]), steps.scores, rtol=1e-5, atol=1e-4)
    strongest = int(steps.probs.argmax())
    assert at.selectbox(key="hbc_key").value == strongest   # first the key the query attends to most
    at.radio(key="hbc_matrix").set_value("value").run()
    _clean(at)
    assert f"v = W_V·x + b for token {strongest + 1} “" in _title(_charts(at)[0])
    at.selectbox(key="hbc_key").set_value(0).run()
    _clean(at)
    matrix = _charts(at)[0]
    assert "v = W_V·x + b for token 1 “[CLS]”" in _title(matrix) and not at.error, _errors(at)
    np.testing.assert_allclose(_numbers(matrix["data"][-1]), steps.v[0], rtol=1e-5, atol=1e-5)


def test_a_visitors_sentence_reaches_both_figures_escaped(monkeypatch):
    at = _open(SHIPPED / "bert-tiny-english", monkeypatch)
    at.text_area(key="hbc_a").input("<a href=x>dogs</a> bark .").run()
    _clean(at)
    at.selectbox(key="hbc_token").set_value(2).run()   # the "<" piece
    _clean(at)
    assert not at.error, _errors(at)
    for chart in _charts(at):
        spec = json.dumps(chart, ensure_ascii=False)
        assert "“&lt;”" in spec and "“<”" not in spec

"""BERT beside GPT on the Attention page: one figure with each model's map for the same text, the causal one a
lower triangle with its hidden future grey (figures.side_by_side_figure); the page's Side by side tab (AppTest)."""

import base64
import json
from pathlib import Path

import numpy as np

from bert_core.inspect.figures import side_by_side_figure
from bert_core.inspect.inspection import AttentionResult
from tests.test_race import racers, task  # noqa: F401  (fixtures: a nano BERT and a nano GPT side by side)
from tests.test_race_page import open_page


def _array(z) -> np.ndarray:
    """A heatmap's z as Plotly's JSON carries it: a list, or a typed array ({dtype, bdata (base64), shape})."""
    if isinstance(z, dict):
        shape = [int(n) for n in str(z["shape"]).split(",")]
        return np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"]).reshape(shape).astype(float)
    return np.array(z, dtype=float)


def _result(layers, heads, seq, causal, seed):
    rng = np.random.default_rng(seed)
    att = rng.random((layers, heads, seq, seq)).astype(np.float32)
    if causal:
        att = np.tril(att)
    att /= att.sum(-1, keepdims=True)
    tokens = ["[CLS]", *(f"w{i}" for i in range(seq - 2)), "[SEP]"]
    return AttentionResult(tokens=tokens, attentions=att, token_type_ids=[0] * seq,
                           special_mask=[t.startswith("[") for t in tokens], causal=causal)


def test_side_by_side_draws_each_model_and_greys_only_the_causal_future():
    bert, gpt = _result(2, 2, 6, False, 0), _result(1, 4, 5, True, 1)
    fig = side_by_side_figure([("bert", bert), ("gpt", gpt)], layer=1, head=None)
    left, right = fig.data
    np.testing.assert_allclose(np.asarray(left.z, dtype=float), bert.attentions[1].mean(0), rtol=1e-6)
    z = np.asarray(right.z, dtype=float)  # the GPT has one layer: clipped to it
    assert np.isnan(z[np.triu_indices(5, k=1)]).all() and not np.isnan(z[np.tril_indices(5)]).any()
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["bert: L2, mean of 2 heads", "gpt: L1, mean of 4 heads (causal)"]
    assert fig.layout.coloraxis.cmax == max(float(left.z.max()), float(np.nanmax(z)))
    one = side_by_side_figure([("bert", bert), ("gpt", gpt)], layer=0, head=3)
    np.testing.assert_allclose(np.asarray(one.data[0].z, dtype=float), bert.attentions[0, 1], rtol=1e-6)
    assert [a.text for a in one.layout.annotations][1] == "gpt: L1 H4 (causal)"


def test_the_attention_page_puts_the_gpt_beside_the_active_bert(racers, monkeypatch, tmp_path):
    import shutil

    from bert_core.serve.app_storage import save_run

    save_run(lambda folder: shutil.copytree(racers[1], folder, dirs_exist_ok=True), "gpt toy", "someone", tmp_path)
    at = open_page("3_Attention.py", racers[0], monkeypatch, tmp_path)
    at.session_state["att_tab"] = "Side by side"
    at.run()
    # The checkpoints beside the active one (not the active one itself), then the app's saved runs.
    assert at.selectbox(key="att_other").options == ["gpt-nano", "saved: gpt-toy"]
    at.text_area(key="att_a").input("the farmer feeds the cows").run()
    at.selectbox(key="att_pair_head").set_value("2").run()
    assert not at.exception, at.exception
    (chart,) = [c for c in at.get("plotly_chart") if "side by side" in c.proto.spec]
    spec = json.loads(chart.proto.spec)
    titles = [a["text"] for a in spec["layout"]["annotations"]]
    assert titles == ["bert-nano: L1 H2", "gpt-nano: L1 H2 (causal)"]
    right = _array(spec["data"][1]["z"])
    assert np.isnan(right[np.triu_indices(len(right), k=1)]).all() and not np.isnan(_array(spec["data"][0]["z"])).any()
    assert spec["data"][0]["x"] == spec["data"][1]["x"]  # one tokenizer here: the same tokens on both axes


def test_the_second_model_choices_leave_out_the_active_one_shipped_or_saved(racers, monkeypatch, tmp_path):
    import shutil

    from bert_core.serve.app_storage import save_run
    from bert_core.serve.model_sources import checkpoints_beside_default

    bert_folder, gpt_folder, _ = racers
    monkeypatch.setenv("BERT_EXPLORER_CHECKPOINT", str(bert_folder))
    monkeypatch.setenv("BERT_EXPLORER_RUNS_DIR", str(tmp_path))
    saved = save_run(lambda folder: shutil.copytree(gpt_folder, folder, dirs_exist_ok=True), "mine", "me", tmp_path)
    assert checkpoints_beside_default() == {"bert-nano": bert_folder, "gpt-nano": gpt_folder, "saved: mine": saved}
    assert list(checkpoints_beside_default(exclude=gpt_folder)) == ["bert-nano", "saved: mine"]
    assert list(checkpoints_beside_default(exclude=Path("mine"))) == ["bert-nano", "gpt-nano"]  # a saved active run

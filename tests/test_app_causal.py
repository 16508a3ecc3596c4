"""The explorer with a GPT-style (causal) model beside BERT, under `streamlit.testing.v1.AppTest`: Predictions
continues text (greedy, and sampled with a seed that repeats), each kind says what the other cannot do, Attention
shows the causal triangle, and the Train page's Objective choice becomes the job spec."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from bert_core.data.objectives import objective_settings  # noqa: E402
from bert_core.inspect import figures  # noqa: E402
from bert_core.inspect.inspection import BIDIRECTIONAL_CANNOT_CONTINUE, CAUSAL_CANNOT_FILL, AttentionResult  # noqa: E402
from bert_core.serve import jobs, model_sources  # noqa: E402
from bert_core.training.train_config import TrainConfig

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120


@pytest.fixture(scope="module")
def gpt_checkpoint(tmp_path_factory):
    """A nano GPT-style model trained 30 steps on the toy corpus, saved with its tokenizer and trainer state."""
    import torch

    from bert_core.data.corpora import generate_toy_corpus
    from bert_core.data.pretraining_data import PretrainingData
    from bert_core.model.bert import BertLMHeadModel
    from bert_core.model.config import BertConfig
    from bert_core.model.tokenization import train_tokenizer
    from bert_core.training.trainer import Trainer

    corpus = generate_toy_corpus(num_documents=60, seed=0)
    tok = train_tokenizer(corpus.texts(), vocab_size=300)
    data = PretrainingData(corpus, tok, max_seq_length=32, batch_size=8, nsp=False, objective="clm")
    torch.manual_seed(0)
    model = BertLMHeadModel(BertConfig.preset("nano", vocab_size=tok.vocab_size, max_position_embeddings=48,
                                              attention="causal"))
    config = TrainConfig(max_steps=30, batch_size=8, max_seq_length=32, nsp=False, objective="clm",
                         learning_rate=3e-3, device="cpu", eval_batches=1)
    trainer = Trainer(model, tok, data, config, eval_data=data,
                      metadata={"corpora": ["toy"], "unigram_counts": data.token_counts.tolist()})
    trainer.run()
    assert trainer.state == "finished", trainer.error
    folder = tmp_path_factory.mktemp("gpt") / "nano-gpt"
    trainer.save(folder)
    return folder


def _open(page: str, checkpoint, monkeypatch) -> AppTest:
    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(checkpoint))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _texts(elements) -> list[str]:
    return [str(e.value) for e in elements]


def test_predictions_continue_text_with_a_causal_model_greedy_and_seeded(gpt_checkpoint, monkeypatch):
    at = _open("pages/4_Predictions.py", gpt_checkpoint, monkeypatch)
    assert CAUSAL_CANNOT_FILL in _texts(at.info)
    assert not at.error and not at.text_area(key="gen_prompt").value == ""
    assert not any("[MASK]" in t.label for t in at.text_area)  # no fill-in box for a model that cannot fill
    at.text_area(key="gen_prompt").input("the dog").run()
    greedy = at.dataframe[0].value
    assert len(greedy) == 20 and list(greedy.columns[:3]) == ["step", "token", "probability"]
    at.radio(key="gen_strategy").set_value("sample").run()
    at.slider(key="gen_temperature").set_value(1.5).run()
    at.number_input(key="gen_seed").set_value(11).run()
    first = at.dataframe[0].value
    at.number_input(key="gen_seed").set_value(12).run()
    at.number_input(key="gen_seed").set_value(11).run()
    assert not at.exception
    assert first.equals(at.dataframe[0].value)  # the same seed, the same text
    at.text_area(key="gen_prompt").input("   ").run()
    assert any("prompt is empty" in t for t in _texts(at.error))


def test_predictions_with_a_bert_say_what_it_cannot_do(monkeypatch, tmp_path_factory):
    from tests.app_fixtures import train_nano_checkpoint

    bert = train_nano_checkpoint(tmp_path_factory.mktemp("bert") / "nano", steps=1)
    at = _open("pages/4_Predictions.py", bert, monkeypatch)
    assert BIDIRECTIONAL_CANNOT_CONTINUE in _texts(at.info)
    assert not any(t.key == "gen_prompt" for t in at.text_area)


def test_attention_shows_the_causal_triangle(gpt_checkpoint, monkeypatch):
    at = _open("pages/3_Attention.py", gpt_checkpoint, monkeypatch)
    assert not at.error
    assert any("lower triangle" in t for t in _texts(at.info))


def test_causal_maps_leave_the_future_empty_and_bidirectional_ones_do_not():
    att = np.full((1, 1, 3, 3), 1 / 3, dtype=np.float32)
    for causal in (True, False):
        result = AttentionResult(tokens=["[CLS]", "a", "b"], attentions=att, token_type_ids=[0] * 3,
                                 special_mask=[True, False, False], causal=causal)
        for fig in (figures.head_view_figure(result, 0, 0), figures.model_view_figure(result)):
            z = np.asarray(fig.data[0].z, dtype=float)
            above = np.triu(np.ones((3, 3), dtype=bool), 1)
            assert np.isnan(z[above]).all() == causal and not np.isnan(z[~above]).any()
            assert (figures.FUTURE_NOTE in fig.layout.title.text) == causal


def test_train_page_objective_becomes_the_job_spec(monkeypatch, gpt_checkpoint):
    at = _open("pages/2_Train.py", gpt_checkpoint, monkeypatch)
    assert at.radio(key="train_objective").value == "mlm"
    assert not at.slider(key="train_mask").disabled
    at.radio(key="train_objective").set_value("clm").run()
    assert not at.exception
    assert at.slider(key="train_mask").disabled and at.checkbox(key="train_nsp").disabled
    assert at.query_params["train_objective"] in ("clm", ["clm"])
    # What _spec adds to the page's train settings: a valid GPT TrainConfig even with the NSP box still ticked.
    train = {"max_steps": 5, "nsp": True, **objective_settings("clm")}
    assert TrainConfig(**train).objective == "clm" and TrainConfig(**train).nsp is False
    assert objective_settings("mlm") == {"objective": "mlm"}


@pytest.fixture(scope="module")
def shipped_pair(gpt_checkpoint, tmp_path_factory):
    """A checkpoints/ folder as shipped: a BERT (the default) and its GPT-style twin beside it."""
    import shutil

    from tests.app_fixtures import train_nano_checkpoint

    parent = tmp_path_factory.mktemp("checkpoints")
    shutil.copytree(gpt_checkpoint, parent / "gpt-nano")
    return train_nano_checkpoint(parent / "bert-nano")


def _shows_a_causal_model(at: AppTest) -> bool:
    """Predictions with a GPT-style model active has the prompt box to continue; with a BERT, the [MASK] box."""
    keys = {t.key for t in at.text_area}
    assert keys & {"gen_prompt", "pred_text"}, keys
    return "gen_prompt" in keys


def test_the_sidebar_picks_either_shipped_checkpoint_and_the_url_keeps_it(shipped_pair, monkeypatch):
    at = _open("pages/4_Predictions.py", shipped_pair, monkeypatch)
    box = at.sidebar.selectbox(key="model_shipped")
    assert box.options == ["bert-nano", "gpt-nano"] and box.value == "bert-nano"
    assert not _shows_a_causal_model(at) and "ckpt" not in at.query_params
    box.set_value("gpt-nano").run()
    assert not at.exception and _shows_a_causal_model(at)  # the GPT continues text here
    assert at.query_params["ckpt"] == "gpt-nano"
    # A shared link opens the same checkpoint; a name that is not a shipped folder opens the default one.
    for ckpt, expected in (("gpt-nano", "gpt-nano"), ("../../etc", "bert-nano"), ("", "bert-nano")):
        again = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
        again.query_params["ckpt"] = ckpt
        again.run()
        assert not again.exception and not again.error
        assert again.sidebar.selectbox(key="model_shipped").value == expected, ckpt
        assert _shows_a_causal_model(again.switch_page("pages/4_Predictions.py").run()) == (expected == "gpt-nano")


def test_a_gpt_run_on_the_train_page_is_labelled_next_token_throughout(monkeypatch, gpt_checkpoint):
    """Issue #29: a GPT run's tiles and charts say next-token, it draws no masking-decision chart and no empty probe
    table, and nothing on the page calls its figures MLM or masked."""
    import json
    import time

    from bert_core.app import app_state

    monkeypatch.delenv(jobs.MAX_TRAININGS_ENV, raising=False)
    at = _open("pages/2_Train.py", gpt_checkpoint, monkeypatch)
    at.radio(key="train_objective").set_value("clm").run()
    for key, value in (("train_steps", 6), ("train_batch", 4), ("train_seq", 32), ("train_vocab", 300),
                       ("train_eval_every", 3), ("train_probe_every", 3)):
        at.number_input(key=key).set_value(value)
    at.button[0].click().run()
    try:
        run = max(app_state.RUNS.runs(), key=lambda r: r.created)
        deadline = time.time() + TIMEOUT
        while run.active and time.time() < deadline:
            time.sleep(0.1)
        assert run.phase == "finished", (run.phase, run.job and run.job.error)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        labels = [m.label for m in at.metric]
        assert "Next-token accuracy" in labels and "Held-out next-token acc." in labels, labels
        charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
        titles = [str((c.get("layout", {}).get("title") or {}).get("text", "")) for c in charts]
        # The word map's time-lapse (a word's contextual vectors, no objective in it) is drawn after the curves.
        curves = [c for c, t in zip(charts, titles) if "“" not in t]
        assert len(curves) == 3 and not any("masking decision" in t for t in titles), titles
        charts = curves
        names = " ".join(str(t.get("name", "")) for c in charts for t in c.get("data", []))
        assert "next-token" in names and "MLM" not in names and "mlm" not in names and "NSP" not in names, names
        assert any("cannot fill a [MASK]" in t for t in _texts(at.caption))
        assert not any(str(t.value).startswith("Probe sentences") for t in at.subheader)
    finally:
        for r in app_state.RUNS.runs():
            app_state.RUNS.discard(r.run_id, wait=30)

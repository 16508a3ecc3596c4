"""The How BERT computes page's "Why a fine-tuned model decided" tab under `streamlit.testing.v1.AppTest`: it is
there only once this tab's fine-tuning race (the Fine-tune page's) has ended with fine-tuned models, and it explains
one model's answer to an input typed there (the panel the Fine-tune page draws), on request."""

from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.slow  # AppTest runs of a page with a model
pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from bert_core.paths import DEFAULT_CHECKPOINT  # noqa: E402
from bert_core.app import app_tab
from bert_core.serve import model_sources  # noqa: E402
from bert_core.serve.run_protocols import FINETUNE_PAGE, TRAIN_PAGE  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGE = "pages/7_How_BERT_computes.py"
WHY = "Why a fine-tuned model decided"


@pytest.fixture(scope="module")
def ended_race():
    """A race as the Fine-tune page's run holds it once it has ended: one fine-tuned sentence classifier (the shipped
    encoder under a seeded head; its steps do not matter to the panel), its kind, validation data and config."""
    import torch

    from bert_core.model.bert import BertForSequenceClassification
    from bert_core.model.checkpoint import load_checkpoint

    if not (DEFAULT_CHECKPOINT / "config.json").is_file():
        pytest.skip(f"{DEFAULT_CHECKPOINT} is not in this checkout")
    ckpt = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    torch.manual_seed(0)
    model = BertForSequenceClassification(ckpt.model.config, num_labels=2)
    model.bert.load_state_dict(ckpt.model.bert.state_dict(), strict=False)
    result = SimpleNamespace(model=model.eval(), tokenizer=ckpt.tokenizer, label_names=["negative", "positive"],
                             name="pretrained")
    trainer = SimpleNamespace(results={"pretrained": result}, task_kind="labels", val_data=None,
                              config=SimpleNamespace(max_length=64))
    return SimpleNamespace(run_id="race-1", active=False, job=SimpleNamespace(trainer=trainer))


def _open(monkeypatch, race) -> AppTest:
    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(DEFAULT_CHECKPOINT))
    if race is not None:
        tab_run = app_tab.current_run
        monkeypatch.setattr(app_tab, "current_run", lambda page=TRAIN_PAGE: (
            (race, app_tab.OWNER) if page == FINETUNE_PAGE else tab_run(page)))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_no_race_no_tab(monkeypatch):
    at = _open(monkeypatch, None)
    assert WHY not in [t.label for t in at.tabs]


def test_an_ended_race_is_explained_on_request(monkeypatch, ended_race):
    at = _open(monkeypatch, ended_race)
    assert [t.label for t in at.tabs][-1] == WHY
    at.session_state["hbc_tab"] = WHY   # lazy tabs: only the open one runs
    at.run()
    assert at.selectbox(key="hbc_why_model").value == "pretrained"
    charts = len(at.get("plotly_chart"))
    at.text_input(key="hbc_why_ft_sentence").input("the film was a long and rather dull story .").run()
    assert len(at.get("plotly_chart")) == charts   # nothing computed until asked
    at.toggle(key="hbc_why_on").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert len(at.get("plotly_chart")) == charts + 2   # the saliences and the heads grid
    assert any("The model says" in m.value for m in at.markdown)
    assert any("integrated gradients" in c.value and "baseline" in c.value for c in at.caption)


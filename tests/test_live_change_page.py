"""The Train page's *Change while it trains* (AppTest, a real run in its training process): a bad value gets a message
and changes nothing, a good one changes the run's learning rate from its next step, the charts mark it at its step,
and the page shows the command with its --change; someone watching the shared run has no such control."""

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from bert_core.app import app_state  # noqa: E402
from bert_core.serve import jobs, model_sources  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from tests.app_fixtures import train_nano_checkpoint

    return train_nano_checkpoint(tmp_path_factory.mktemp("ckpt") / "nano-toy")


@pytest.fixture(autouse=True)
def _app_env(checkpoint, monkeypatch):
    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(checkpoint))
    monkeypatch.delenv(jobs.MAX_TRAININGS_ENV, raising=False)
    yield
    for run in app_state.RUNS.runs():
        app_state.RUNS.discard(run.run_id, wait=30)


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _train_page(**query) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    at.switch_page("pages/2_Train.py").run()
    return at


def _change(at: AppTest, typed: str) -> None:
    at.text_input(key="train_live_value").input(typed)
    at.button(key="train_live_apply").click().run()
    assert not at.exception, [e.value for e in at.exception]


def test_the_learning_rate_changes_while_the_run_trains_and_the_chart_and_command_show_it():
    at = _train_page()
    for key, value in (("train_steps", 100_000), ("train_batch", 4), ("train_seq", 32), ("train_vocab", 300),
                       ("train_eval_every", 0), ("train_probe_every", 0)):
        at.number_input(key=key).set_value(value)
    at.button[0].click().run()   # Start
    run = max(app_state.RUNS.runs(), key=lambda r: r.created)
    _until(lambda: run.job is not None and run.job.trainer is not None and run.job.trainer.step >= 2,
           "the run did not start training")
    at.run()
    peak = run.job.trainer.config.learning_rate
    assert any(f"now {peak:g}" in t.label for t in at.text_input)

    for typed, words in (("", "type the new learning rate"), ("fast", "must be a number"),
                         ("-0.01", "between 1e-06 and 1"), ("1e9", "between 1e-06 and 1")):
        _change(at, typed)
        assert any(words in e.value for e in at.error), (typed, [e.value for e in at.error])
        assert run.job.trainer.config.changes == ()

    _change(at, "0.0005")
    changes = run.job.trainer.config.changes
    assert len(changes) == 1 and changes[0][1:] == ("learning_rate", 0.0005), changes
    step = changes[0][0]
    label = f"lr {peak:g} → 0.0005 at step {step}"
    assert any(label in s.value for s in at.success), [s.value for s in at.success]
    # The new peak from the next update on, and the checkpoint the run keeps records the change.
    _until(lambda: run.job.trainer.step >= step + 2, "the run did not go on after the change")
    lrs = {e.step: e.lr for e in run.job.trainer.history}
    assert lrs[step + 1] < 0.0005 * 1.0001 and lrs[step] > lrs[step + 1] * 2, (step, lrs)
    at.run()
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    marked = [c for c in charts if any(a.get("text") == label for a in c["layout"].get("annotations", []))]
    assert len(marked) >= 4, "each live chart marks the change at its step"
    assert any(s["x0"] == step for c in marked for s in c["layout"].get("shapes", []))
    assert any(f"--change {step}:lr=0.0005" in c.value for c in at.code)

    # Whoever watches the shared run sees the marks, never the control.
    viewer = _train_page(watch=run.view_id)
    assert not [b for b in viewer.button if b.key == "train_live_apply"]
    assert not [t for t in viewer.text_input if t.key == "train_live_value"]
    app_state.RUNS.stop(run.run_id, wait=TIMEOUT)
    saved = run.job.trainer.config.to_dict()["changes"]
    assert saved == [[step, "learning_rate", 0.0005]]

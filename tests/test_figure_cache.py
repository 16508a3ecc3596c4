"""Figures built once for everyone who looks at the same thing (bert_core.inspect.figures.FigureCache): the Train page's word
map time-lapse, drawn by every viewer of a run at every poll, is built once per snapshot and word for all of them."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import plotly.graph_objects as go
import pytest

from bert_core.inspect.figures import FigureCache, laid_out
from bert_core.inspect.figure_floor import MIN_FONT_PX

ROOT = Path(__file__).resolve().parent.parent


class Owner:
    """A stand-in for a run's probe store: anything a weak reference can hold."""


def _figure() -> go.Figure:
    return laid_out(go.Figure(go.Scatter(x=[1, 2], y=[3, 4]), layout=dict(title="t", font=dict(size=8))))


def test_a_figure_is_built_once_per_owner_and_key_laid_out_for_the_projector_and_gone_with_its_owner():
    cache, a, b = FigureCache(keep=2), Owner(), Owner()
    first = cache.get(a, ("map", 1), _figure)
    assert cache.get(a, ("map", 1), _figure) is first and cache.builds == 1
    assert first.layout.font.size >= MIN_FONT_PX and first.layout.title.pad.t   # the floor and the toolbar, once
    assert cache.get(b, ("map", 1), _figure) is not first and cache.builds == 2   # each run its own
    cache.get(a, ("map", 2), _figure)
    cache.get(a, ("map", 3), _figure)
    assert cache.get(a, ("map", 1), _figure) is not first and cache.builds == 5   # only the `keep` latest stay
    del a
    gc.collect()
    assert len(cache._built) == 1   # the run's figures went with it


@pytest.mark.slow
def test_two_sessions_watching_one_run_build_its_word_map_once(monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from bert_core.app import app_state
    from bert_core.inspect import computation_figures
    from bert_core.serve import jobs

    monkeypatch.delenv(jobs.MAX_TRAININGS_ENV, raising=False)
    made = []
    build = computation_figures.word_map_figure
    monkeypatch.setattr(computation_figures, "word_map_figure", lambda *a, **k: made.append(1) or build(*a, **k))
    owner = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    owner.run()
    owner.switch_page("pages/2_Train.py").run()
    for key, value in (("train_steps", 6), ("train_batch", 4), ("train_seq", 32), ("train_vocab", 300),
                       ("train_eval_every", 3), ("train_probe_every", 3)):
        owner.number_input(key=key).set_value(value)
    owner.button[0].click().run()
    try:
        run = max(app_state.RUNS.runs(), key=lambda r: r.created)
        deadline = time.monotonic() + 120
        while (run.job is None or run.job.phase in ("new", "preparing", "running")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert run.phase == "finished", run.phase
        owner.run()
        assert not owner.exception, [e.value for e in owner.exception]
        assert owner.get("plotly_chart") and any(k.key == "train_map" for k in owner.get("plotly_chart")), \
            "the word map time-lapse is on the page"
        built = len(made)
        assert built >= 1
        viewer = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        viewer.query_params["watch"] = run.view_id
        viewer.run()
        viewer.switch_page("pages/2_Train.py").run()
        assert not viewer.exception, [e.value for e in viewer.exception]
        assert any(k.key == "train_map" for k in viewer.get("plotly_chart"))
        assert len(made) == built   # the viewer drew the owner's figure
    finally:
        for r in app_state.RUNS.runs():
            app_state.RUNS.discard(r.run_id, wait=30)

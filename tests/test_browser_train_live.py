"""The Train page's two views that follow a run as it trains, in a real browser at a projector's 1280 x 720 (issue
73): the learning rate changed while the run trains, marked on every live chart at its step with the command that
repeats it; and what each layer knows at each probe snapshot of a run on English text, drawn against the step.
Every chart's text is checked (none under 12 px, too light or past its edge). Screenshots: train-live-change.png
and train-word-classes.png (docs/screenshots with BERT_UPDATE_SCREENSHOTS=1).

The word classes are a long check (`--long`: a run on English text with its probes, one to three minutes on a
loaded 2-core CPU); the change is 20 to 40 s."""

from __future__ import annotations

import re

import pytest

from bert_core.data.downloads import SOURCES
from bert_core.data.task_downloads import local_task_csv
from bert_core.paths import shared_data_dir
from tests.browser_support import _chart_text, _open, _settle
from tests.test_browser_how_bert_computes import PROJECTOR, _no_error_on_page, _shoot_chart, _wait_for_charts

pytestmark = pytest.mark.slow

LOSS = "loss"   # a part of the live loss chart's title
WORD_CLASSES = "Part of speech read off each layer, snapshot by snapshot"


def _start(page) -> None:
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Start", exact=True).click()


def test_the_learning_rate_changed_as_the_run_trains_is_marked_on_its_charts(server, browser, screenshot_dirs):
    base, _ = server
    page = browser.new_page(viewport=PROJECTOR)
    try:
        _open(page, base, "Train", "?train_steps=100000&train_eval_every=0&train_probe_every=0")
        _start(page)
        page.get_by_text("Change while it trains").first.wait_for(timeout=120_000)
        _settle(page)
        box = page.get_by_role("textbox", name=re.compile(r"^New value \(now "))
        box.fill("0.0005")
        box.press("Enter")
        _settle(page)
        page.get_by_role("button", name="Change at the next step").click()
        said = page.get_by_text("the run trains at it from its next update on", exact=False)
        said.first.wait_for(timeout=60_000)
        label = re.search(r"lr \S+ → 0\.0005 at step \d+", said.first.inner_text()).group(0)
        # Each live chart marks the change at its step, and the command that repeats the run carries it.
        page.wait_for_function(
            "(label) => Array.from(document.querySelectorAll('.js-plotly-plot svg text'))"
            ".some(t => t.textContent.includes(label))", arg=label, timeout=120_000)
        step = label.rsplit(" ", 1)[1]
        assert page.get_by_text(f"--change {step}:lr=0.0005", exact=False).count() >= 1
        _no_error_on_page(page, "live change")
        titles = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                               ".filter(d => d.offsetParent !== null).map(d => String((d.layout.title || {}).text))")
        marked = [t for t in titles if LOSS in t.lower()]
        assert marked, titles
        for title in marked:
            _chart_text(page, title)
        _shoot_chart(page, marked[0], "train-live-change", screenshot_dirs)
        page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop").click()
        page.get_by_text("Run stopped at step").wait_for(timeout=60_000)
    finally:
        page.close()


@pytest.mark.long
@pytest.mark.parametrize("objective", ["mlm", "clm"])   # BERT and its GPT twin
def test_the_layers_learn_word_classes_snapshot_by_snapshot(server, browser, screenshot_dirs, objective):
    shared = shared_data_dir()
    if shared is None or not (shared / SOURCES["tinyshakespeare"].shared_copy).is_file() \
            or local_task_csv("conll2000") is None:
        pytest.skip("needs Tiny Shakespeare and CoNLL-2000 in the shared data folder")
    base, _ = server
    page = browser.new_page(viewport=PROJECTOR)
    try:
        _open(page, base, "Train", "?train_corpus=tinyshakespeare&train_steps=60&train_eval_every=30"
                                   f"&train_probe_every=20&train_objective={objective}")
        _start(page)
        page.get_by_text("Run finished at step 60").wait_for(timeout=600_000)
        _settle(page)
        _wait_for_charts(page, (WORD_CLASSES,), "word classes", timeout=120)
        _no_error_on_page(page, "word classes")
        texts = _chart_text(page, WORD_CLASSES)
        assert any(t["text"].startswith("layer") for t in texts), texts
        if objective == "mlm":
            _shoot_chart(page, WORD_CLASSES, "train-word-classes", screenshot_dirs)
        else:
            _shoot_chart(page, WORD_CLASSES, "train-gpt-word-classes", screenshot_dirs[:1])
    finally:
        page.close()

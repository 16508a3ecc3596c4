"""Every chart's text, as the browser draws it at a projector's 1280 x 720: no SVG text under 12 px and none lighter
than a projector shows (issue 74). What Python sets is checked without a browser in tests/test_figure_floor.py;
this reads what Streamlit's theme and Plotly.js make of it, on each page that draws charts as it opens."""

from __future__ import annotations

import pytest

from bert_core.inspect.figure_floor import MIN_FONT_PX, too_light
from tests.browser_support import _no_exception, _open, _rgb, _shoot

pytestmark = pytest.mark.slow

# Pages that draw charts as they open (the Train and Fine-tune pages draw theirs once a run has trained).
CHART_PAGES = {"": "home", "Tokens_and_masking": "tokens-and-masking", "Attention": "attention",
               "Predictions": "predictions", "How_BERT_computes": "how-bert-computes"}

# Every visible text element of every chart: its computed size, its fill and its characters.
READ_TEXT = """() => Array.from(document.querySelectorAll('.js-plotly-plot svg text')).filter(t => {
    const r = t.getBoundingClientRect(); return r.width > 0 && r.height > 0 && t.textContent.trim() !== '';
}).map(t => { const s = getComputedStyle(t);
    return {size: parseFloat(s.fontSize), fill: s.fill, text: t.textContent.slice(0, 40)}; })"""


def test_chart_text_is_at_least_12px_and_dark_at_1280x720(server, browser, screenshot_dirs):
    base, _ = server
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    small, light, seen = [], [], 0
    try:
        for path, name in CHART_PAGES.items():
            _open(page, base, path)
            _no_exception(page, path or "home")
            page.wait_for_selector(".js-plotly-plot svg text", timeout=60_000)
            texts = page.evaluate(READ_TEXT)
            seen += len(texts)
            small += [(name, t["text"], t["size"]) for t in texts if t["size"] < MIN_FONT_PX - 0.01]
            light += [(name, t["text"], t["fill"]) for t in texts
                      if t["fill"].startswith("rgb") and too_light(_rgb(t["fill"]))]
            _shoot(page, f"projector-{name}", screenshot_dirs[:1])   # test-artifacts only: for a look, not docs
    finally:
        page.close()
    assert seen > 50, "the pages drew no chart text"
    assert not small, f"chart text under {MIN_FONT_PX} px: {small[:12]}"
    assert not light, f"chart text too light for a projector: {light[:12]}"

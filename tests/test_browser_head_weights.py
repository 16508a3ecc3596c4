"""The weights as matrices on *How BERT computes* in a real browser at a projector's 1280 x 720, on the shipped BERT
and its GPT twin: both charts (W·x + b, and q × k for every key) draw under *Inside attention*, their text is 12 px
or more and dark, none of it runs past its chart's edge, and the page shows no error. Screenshots:
how-weights-as-matrices.png and how-query-key-products.png (docs/screenshots with BERT_UPDATE_SCREENSHOTS=1, the
shipped BERT's)."""

from __future__ import annotations

import pytest

from tests.browser_support import _chart_text, _settle
from tests.test_browser_how_bert_computes import PAGE, PROJECTOR, _no_error_on_page, _shoot_chart, _wait_for_charts

pytestmark = pytest.mark.slow

CHARTS = {"·x + b for token": "weights-as-matrices", "its query against every key": "query-key-products"}

@pytest.mark.parametrize("label", ["shipped-bert", "shipped-gpt"])
def test_the_weights_as_matrices_draw_readable_and_unclipped(server, browser, screenshot_dirs, model_folder, label):
    base, _ = server
    checkpoint = model_folder.name.replace("bert", "gpt") if label == "shipped-gpt" else None
    if checkpoint is not None and not (model_folder.parent / checkpoint / "config.json").is_file():
        pytest.skip(f"no GPT twin shipped beside {model_folder}")
    page = browser.new_page(viewport=PROJECTOR)
    try:
        page.goto(f"{base}/{PAGE}?model=shipped" + (f"&ckpt={checkpoint}" if checkpoint else ""))
        _settle(page, timeout=300)
        page.get_by_text("The weights as matrices", exact=True).first.wait_for(timeout=60_000)
        _wait_for_charts(page, tuple(CHARTS), label)
        _no_error_on_page(page, label)
        for title, slug in CHARTS.items():
            _shoot_chart(page, title, f"how-{slug}" if label == "shipped-bert" else f"how-{label}-{slug}",
                         screenshot_dirs if label == "shipped-bert" else screenshot_dirs[:1])
            assert len(_chart_text(page, title)) > 10, title
    finally:
        page.close()

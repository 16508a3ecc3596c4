"""Heads that follow syntax on the Attention page in a real browser at a projector's 1280 x 720, on the shipped BERT:
the toggle under *What heads do* measures the treebank in the server's cache (here the 33 test sentences under the
EWT file's name: no network), the chart draws with no text under 12 px or too light and none past its edge, the
table and the caption show, and the page shows no error."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from bert_core.data.treebank import UD_EWT
from tests.browser_support import _chart_text, _settle
from tests.test_browser_how_bert_computes import PROJECTOR, _no_error_on_page, _shoot_chart, _wait_for_charts
from tests.test_syntax_heads import SENTENCES

pytestmark = pytest.mark.slow
TITLE = "Heads that follow syntax"


def test_the_syntax_heads_draw_readable_and_unclipped(server, browser, server_home, screenshot_dirs):
    if os.environ.get("BERT_CORE_CACHE") or os.environ.get("XDG_CACHE_HOME"):
        pytest.skip("the server's cache is a folder of this machine's, not the test's own")
    cache = server_home / ".cache" / "bert_core"
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SENTENCES, cache / UD_EWT.filename)
    base, _ = server
    page = browser.new_page(viewport=PROJECTOR)
    try:
        page.goto(f"{base}/Attention?model=shipped")
        _settle(page, timeout=300)
        page.get_by_role("tab", name="What heads do").click()
        page.get_by_text("Find the heads that follow syntax").click()
        _settle(page, timeout=300)
        page.get_by_role("tab", name="What heads do").click()
        time.sleep(0.5)
        _wait_for_charts(page, (TITLE,), "syntax heads")
        _no_error_on_page(page, "syntax heads")
        assert page.get_by_text("words of 33 sentences").count() > 0
        assert len(_chart_text(page, TITLE)) > 5
        _shoot_chart(page, TITLE, "attention-syntax-heads-33-sentences", screenshot_dirs[:1])   # a look: not docs
    finally:
        page.close()
        (cache / UD_EWT.filename).unlink(missing_ok=True)

"""In a real browser: runs compared one knob at a time (two toy runs overlaid, NSP on and off) and BERT against
GPT (a toy BERT and its causal twin side by side on the Attention page, the GPT continuing a text)."""

from __future__ import annotations

import pytest

from tests.browser_support import _no_exception, _open, _settle, _shoot, _visible_plots

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out


def _run_then_one_change(page, base: str, steps: int, change: str) -> None:
    """Train a short toy run from the Train page, then start 'Try one change' (the option whose label starts with
    `change`) and wait for that second run to finish too."""
    _open(page, base, "Train", f"?train_steps={steps}&train_eval_every={steps // 4}&train_probe_every=0")
    main = page.get_by_test_id("stMainBlockContainer")
    main.get_by_role("button", name="Start", exact=True).click()
    page.get_by_text(f"Run finished at step {steps}").wait_for(timeout=120_000)
    _settle(page)
    choice = page.get_by_test_id("stSelectbox").filter(has_text="Try one change").locator("input")
    choice.click()
    choice.fill(change)
    page.keyboard.press("Enter")
    _settle(page)
    assert choice.input_value().startswith(change) or page.get_by_text(change).count() >= 1
    main.get_by_role("button", name="Start with this change").click()
    page.get_by_text("running: step", exact=False).or_(page.get_by_text("Preparing", exact=False)).first.wait_for(
        timeout=30_000)
    page.get_by_text(f"Run finished at step {steps}").wait_for(timeout=120_000)
    _settle(page)


@pytest.mark.long  # a long check (`--long`): two runs trained in a browser
def test_two_toy_runs_overlaid_nsp_on_and_off(server, browser, screenshot_dirs):
    """'Try one change' from a finished run: NSP off, the rest the same; both runs on one chart, the legend
    naming the knob."""
    base, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _run_then_one_change(page, base, 60, "NSP on")
        overlay = _visible_plots(page, "Runs compared")
        assert len(overlay) == 1, overlay
        assert {"run 1: reference (NSP on)", "run 2: NSP on → off"} <= set(overlay[0]["names"]), overlay
        _no_exception(page, "train (two runs overlaid)")
        page.get_by_text("Compare runs, one knob at a time").scroll_into_view_if_needed()
        _shoot(page, "train-compare-runs", screenshot_dirs)
    finally:
        page.close()


def test_bert_and_gpt_trained_on_toy_side_by_side_and_gpt_continues_text(server, browser, screenshot_dirs):
    """docs/lessons.md, 'BERT or GPT?': a BERT on toy, then the same run with causal attention; the two models'
    attention on one sentence (a full square against a lower triangle), and the GPT continuing a text."""
    base, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _run_then_one_change(page, base, 60, "attention bidirectional")
        # The GPT run on Train and the two runs compared, at a projector's 1280 x 720: nothing of the GPT's is
        # called MLM or masked, and the comparison keeps BERT's masked-token figures apart from GPT's next-token.
        page.set_viewport_size({"width": 1280, "height": 720})
        _settle(page)
        labels = page.locator('[data-testid="stMetricLabel"]').all_inner_texts()
        assert labels and not [t for t in labels if "MLM" in t or "masked" in t.lower()], labels
        plots = page.evaluate(
            """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => ({
                title: String((d.layout.title || {}).text || d.layout.title || ''),
                names: (d.data || []).map(t => t.name || ''),
                notes: (d.layout.annotations || []).map(a => a.text || '')}))""")
        live = [p for p in plots if "Runs compared" not in p["title"]]
        assert live and all("MLM" not in " ".join([p["title"], *p["names"], *p["notes"]]) and "masked" not in
                            " ".join([p["title"], *p["names"]]).lower() for p in live), live
        compared = [p for p in plots if "Runs compared" in p["title"]]
        assert compared, [p["title"] for p in plots]
        notes = " ".join(compared[0]["notes"]).lower()
        assert "next-token" in notes and "masked" in notes, compared[0]["notes"]
        _no_exception(page, "train (a GPT run beside its BERT)")
        _shoot(page, "train-gpt-run", screenshot_dirs)
        page.get_by_text("Compare runs, one knob at a time").scroll_into_view_if_needed()
        _shoot(page, "train-compare-bert-and-gpt", screenshot_dirs)
        page.set_viewport_size({"width": 1400, "height": 1000})
        sidebar = page.get_by_test_id("stSidebar")
        sidebar.get_by_test_id("stRadioGroup").get_by_text("Model trained in this session").click()
        _settle(page)
        sidebar.get_by_role("link", name="Attention").click()
        _settle(page)
        page.get_by_role("tab", name="Side by side").click()
        page.get_by_text("run 1 of this tab").first.wait_for(timeout=30_000)
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .heatmaplayer').length >= 2",
                               timeout=30_000)
        _no_exception(page, "attention (BERT and GPT side by side)")
        _shoot(page, "attention-bert-and-gpt", screenshot_dirs)
        sidebar.get_by_role("link", name="Predictions").click()
        _settle(page)
        page.get_by_role("heading", name="Continue the text").wait_for(timeout=30_000)
        # The heading comes before the continuation: under load the table follows seconds later.
        page.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=60_000)
        _settle(page)
        assert page.locator('[data-testid="stDataFrame"]').count() == 1   # one row per generated token
        _no_exception(page, "predictions (the GPT continues a text)")
        _shoot(page, "predictions-gpt-continues", screenshot_dirs)
    finally:
        page.close()

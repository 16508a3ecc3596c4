"""In a real browser: the classroom walkthrough (docs/lessons.md) with the defaults (the default run past 50% held-out
accuracy, probes from the toy stories, the time-lapse on one colour scale, the guesses chart), and fine-tuning's
status and tables. The life of a run on a shared server is in test_browser_class.py (its own file, so that the two
long browser tests run on different workers)."""

from __future__ import annotations

import time

import pytest

from tests.browser_support import (
    DEFAULT_RUN_TARGET,
    FEEDBACK_S,
    ROOT,
    _filled_value,
    _metric,
    _no_exception,
    _open,
    _settle,
    _shoot,
    _trace_lengths,
    _visible_plots,
    _words,
)

pytestmark = [pytest.mark.slow, pytest.mark.long]  # long checks (`--long`): the README's walkthrough on its defaults, a promise measured as a user presses it


def test_readme_walkthrough_with_the_defaults(server, browser, screenshot_dirs):
    """docs/lessons.md, "A classroom walkthrough", steps 2 to 4, as a student does them: the Train page's defaults,
    Start, the run to its end, then the Attention time-lapse and the Predictions page on the trained model."""
    from tests.toy_words import toy_vocabulary

    base, _ = server
    vocab = toy_vocabulary()
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _open(page, base, "Train")
        sidebar = page.get_by_test_id("stSidebar")
        assert sidebar.get_by_role("link", name="Home", exact=True).count() == 1
        assert sidebar.get_by_role("link", name="app", exact=True).count() == 0
        # The probe sentences come from the held-out toy stories: every word is one the toy grammar writes.
        probes = _filled_value(page, "Sentences the model fills in while it trains").splitlines()
        assert len(probes) == 4 and all("[MASK]" in p for p in probes), probes
        assert set().union(*map(_words, probes)) <= vocab, set().union(*map(_words, probes)) - vocab
        attention_probe = _filled_value(page, "Sentence for the attention time-lapse")
        assert attention_probe and _words(attention_probe) <= vocab
        main = page.get_by_test_id("stMainBlockContainer")
        main.get_by_role("button", name="Start", exact=True).click()
        page.get_by_text("Starting", exact=False).or_(page.get_by_text("Preparing", exact=False)).first.wait_for(
            timeout=FEEDBACK_S * 1000)
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
            ".some(d => (d.data || []).some(t => (t.x || []).length >= 3))", timeout=120_000)
        first = max(max(x, default=0) for x in _trace_lengths(page))
        page.wait_for_function(  # the live loss chart gains points while the page is left alone
            f"() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
            f".some(d => (d.data || []).some(t => (t.x || []).length > {first}))", timeout=30_000)
        _no_exception(page, "train (running)")
        # Past the unigram plateau (step 1,000 of 2,000), the picture the walkthrough shows.
        page.get_by_text("running: step 1,", exact=False).or_(page.get_by_text("Run finished")).first.wait_for(
            timeout=300_000)
        _shoot(page, "train-running", screenshot_dirs)
        page.get_by_text("Run finished at step 2,000").wait_for(timeout=300_000)
        _settle(page)
        held_out = float(_metric(page, "Held-out MLM acc.").rstrip("%")) / 100
        assert held_out >= DEFAULT_RUN_TARGET, f"the default run ended at {held_out:.1%} held-out accuracy"
        # The probe table: the held-out sentences shown before Start, each with the model's guesses now.
        table = page.locator('[data-testid="stTable"]').filter(has_text=probes[0]).last   # the probes' table
        assert table.locator("tbody tr td").first.inner_text() == probes[0]
        assert "%" in table.locator("tbody tr").first.locator("td").nth(1).inner_text()
        # A finished run has nothing to resume: the page says so and offers a new run from its weights.
        assert main.get_by_role("button", name="Resume").is_disabled()
        assert page.get_by_text("This run has finished").count() == 1
        assert main.get_by_role("button", name="Train on from these weights").count() == 1
        _no_exception(page, "train (finished)")
        _shoot(page, "train-finished", screenshot_dirs)

        # Step 3: the trained model's attention, and its time-lapse on one colour scale.
        sidebar.get_by_test_id("stRadioGroup").get_by_text("Model trained in this session").click()
        _settle(page)
        sidebar.get_by_role("link", name="Attention").click()
        _settle(page)
        assert _words(page.get_by_role("textbox", name="Sentence A").input_value()) <= vocab
        page.get_by_role("tab", name="Time-lapse").click()
        time.sleep(1)
        last = _visible_plots(page, "Model view")
        assert len(last) == 1 and (last[0]["cmin"], last[0]["cmax"]) == (0, 1), last
        _shoot(page, "attention-timelapse", screenshot_dirs)
        page.get_by_role("tab", name="Time-lapse").click()
        page.get_by_role("slider").first.focus()
        page.keyboard.press("Home")  # the first snapshot: step 0, an untrained model
        _settle(page)
        page.get_by_role("tab", name="Time-lapse").click()
        time.sleep(1)
        assert page.get_by_text("at step 0.", exact=False).count() >= 1
        start = _visible_plots(page, "Model view")
        assert len(start) == 1 and (start[0]["cmin"], start[0]["cmax"]) == (0, 1), start
        _no_exception(page, "attention (time-lapse)")
        _shoot(page, "attention-timelapse-step0", screenshot_dirs)
        page.get_by_role("tab", name="What heads do").click()
        time.sleep(1)
        assert page.get_by_text("Entropy", exact=False).first.is_visible()
        _shoot(page, "attention-heads", screenshot_dirs)

        # Step 4: predictions on a toy sentence, and how the guesses changed during training.
        sidebar.get_by_role("link", name="Predictions").click()
        _settle(page)
        assert _words(page.get_by_role("textbox", name="Text with one or more [MASK]").input_value()) <= vocab
        history = _visible_plots(page, "“")
        assert len(history) == 1, history
        names = history[0]["names"]
        assert 1 <= len(names) <= 6 and not {"[CLS]", "[SEP]", "[MASK]", "[PAD]"} & set(names), names
        assert len(set(history[0]["colors"])) == len(names)
        _no_exception(page, "predictions (session model)")
        _shoot(page, "predictions-trained", screenshot_dirs)
    finally:
        page.close()


def test_fine_tune_shows_status_at_once_and_tables_with_labels_and_confidence(server, browser, screenshot_dirs):
    """The walkthrough's step 5 (docs/lessons.md), one-second budget: the click says at once that work has started,
    each model's most confident mistakes show the true label, the predicted label and the confidence on screen, and
    a reload keeps the results."""
    if not (ROOT / "pages" / "5_Fine-tune.py").exists():
        pytest.skip("no Fine-tune page in this install")
    base, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _open(page, base, "Fine-tune", "?ft_steps=20")
        main = page.get_by_test_id("stMainBlockContainer")
        main.get_by_role("button", name="Fine-tune both").click()
        page.get_by_text("Starting", exact=False).or_(page.get_by_text("Preparing", exact=False)).first.wait_for(
            timeout=FEEDBACK_S * 1000)
        page.get_by_role("heading", name="Results").wait_for(timeout=180_000)
        _settle(page)
        tables = page.locator('[data-testid="stTable"]')
        mistakes = [tables.nth(i) for i in range(tables.count())]
        assert len(mistakes) == 2, [t.inner_text()[:200] for t in mistakes]
        width = page.viewport_size["width"]
        for table in mistakes:
            headers = table.locator("th").all_inner_texts()
            assert headers[:3] == ["true label", "predicted", "confidence"], headers
            first_row = table.locator("tbody tr").first.locator("td").all_inner_texts()
            assert first_row[2].endswith("%") and first_row[0] and first_row[1], first_row
            for cell in table.locator("thead th").all()[:3]:
                box = cell.bounding_box()
                assert box is not None and 0 <= box["x"] and box["x"] + box["width"] <= width, "a column is off-screen"
        _no_exception(page, "fine-tune (results)")
        _shoot(page, "fine-tune-results", screenshot_dirs)
        assert "ft=" in page.url, page.url
        page.reload()  # a new session: the key in the URL finds the same results
        _settle(page)
        page.get_by_role("heading", name="Results").wait_for(timeout=30_000)
        # The heading is drawn before the tables below it: on a loaded machine the first settle can end before the
        # new session's script has started, so wait for the tables themselves, then for the run to end.
        page.locator('[data-testid="stTable"]').nth(1).wait_for(timeout=30_000)
        _settle(page)
        assert page.locator('[data-testid="stTable"]').count() == 2
        from bert_core.paths import shared_data_dir

        shared = shared_data_dir()
        if shared is not None and (shared / "sentence_polarity" / "polarity.csv").is_file():
            page.get_by_text("Data and settings").click()  # folded once a run has results
            page.get_by_text("Movie-review polarity (2 classes)").click()
            _settle(page)
            page.get_by_text("2 labels (negative", exact=False).first.wait_for(timeout=30_000)
            assert page.get_by_text("(0 ", exact=False).count() == 0
    finally:
        page.close()

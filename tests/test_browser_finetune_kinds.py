"""In a real browser: the Fine-tune page's other two kinds of task, each fine-tuned for a second from the page. A
tagger (CoNLL-2000 chunks, from the shared data) colours the words of a held-out sentence beside their true tags,
and a question-answering model (the built-in toy stories, after their six drills, whose stages the curve marks)
highlights its answer in a passage with the start and end probabilities drawn over the tokens. Both views are
screenshotted."""

from __future__ import annotations

import pytest

from bert_core.paths import shared_data_dir
from tests.browser_support import FEEDBACK_S, _no_exception, _open, _settle, _shoot, _visible_plots

pytestmark = [pytest.mark.slow, pytest.mark.long]  # long checks (`--long`): the tagger and QA views in a browser; the pages' AppTests are in the suite


def _fine_tune(page) -> None:
    main = page.get_by_test_id("stMainBlockContainer")
    main.get_by_role("button", name="Fine-tune both").click()
    page.get_by_text("Starting", exact=False).or_(page.get_by_text("Preparing", exact=False)).first.wait_for(
        timeout=FEEDBACK_S * 1000)
    page.get_by_role("heading", name="Results").wait_for(timeout=180_000)
    _settle(page)


def test_a_tagger_colours_the_words_of_a_held_out_sentence(server, browser, screenshot_dirs):
    if shared_data_dir() is None or not (shared_data_dir() / "conll2000" / "train.txt").is_file():
        pytest.skip("the CoNLL-2000 file of ../shared/data is absent")
    base, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    try:
        _open(page, base, "Fine-tune", "?ft_kind=tags&ft_data=conll2000&ft_steps=20&ft_train=200&ft_val=50")
        _fine_tune(page)
        assert page.get_by_text("chunk F1").first.is_visible()
        page.get_by_role("heading", name="Tag a sentence with each").scroll_into_view_if_needed()
        boxes = page.locator('[title^="B-"], [title^="I-"], [title^="O:"]')
        assert boxes.count() >= 10, boxes.count()  # the held-out sentence's words, for each of the two models
        assert page.get_by_text("✓").count() + page.locator('span[title] div[style*="c0392b"]').count() >= 10
        _no_exception(page, "fine-tune (token tags)")
        _shoot(page, "fine-tune-token-tags", screenshot_dirs)
    finally:
        page.close()


def test_a_question_answering_model_highlights_its_answer(server, browser, screenshot_dirs):
    base, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    try:
        _open(page, base, "Fine-tune", "?ft_kind=spans&ft_data=toy_qa&ft_steps=20&ft_train=200&ft_val=40"
                                       "&ft_maxlen=128")
        _fine_tune(page)
        # The toy stories are trained through their six drills: the curve marks where each stage began, and the
        # results say how each drill ended.
        page.wait_for_function("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
            .some(d => d.layout && (d.layout.annotations || []).length > 0)""", timeout=15_000)
        plots = page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
            .map(d => [String((d.layout && d.layout.title && (d.layout.title.text || d.layout.title)) || ''),
                       ((d.layout && d.layout.annotations) || []).map(a => a.text)])""")
        marks = [notes for title, notes in plots if "Validation F1" in title]
        assert marks and marks[0] == ["sentence", "where", "happened", "who", "what", "finder", "toy QA stories"], plots
        assert page.get_by_text("each drill at its end", exact=False).count() >= 1
        page.get_by_role("heading", name="Ask each a question").scroll_into_view_if_needed()
        _settle(page)
        assert page.locator("mark").count() >= 1  # each model's answer, highlighted in the passage
        plots = _visible_plots(page, "Where the answer starts and ends")
        assert len(plots) == 2, plots
        _no_exception(page, "fine-tune (answer spans)")
        _shoot(page, "fine-tune-answer-spans", screenshot_dirs)
    finally:
        page.close()

"""In a real browser at a projector's 1280 x 720, with both cores kept busy by other work: the lesson keeps its
thread. Every step opens at its top after Next (its title and its notice inside the screen), counts tokens, layers
and heads from 1, and names the model it looks at: after the live run, the model the class trained, also after the
predictions step's side trip to the shipped English model and on the Fine-tune page the last step sends it to. The
lesson's own race runs there, and the end summary names the model of every line. Each step is screenshotted
(docs/screenshots/lesson-N-*.png with BERT_UPDATE_SCREENSHOTS=1).

A long check (`--long`): the default run and the race on loaded cores take minutes."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.browser_support import _no_exception, _settle, _shoot
from tests.test_browser_lesson_race import _busy, _next   # the load generator; Next, pressed again if swallowed
from tests.test_browser_tour import _plot
from bert_core.inspect import lesson

pytestmark = [pytest.mark.slow, pytest.mark.long]

TRAINED = "the model trained in this session"   # the sidebar's name for the model this tab's run trained
SIDEBAR_TRAINED = "Model trained in this session"
# Anything a reader would take for counting from 0: "token 0", "layer 0", "head 0", "L0", "H0", "#0", "0 [CLS]".
FROM_0 = re.compile(r"\b(token|layer|head|position)s? 0\b|\b[LH]0\b|#0\b|(^|\s)0:? ?\[CLS\]", re.I)


def _inside(page, locator, what: str) -> None:
    """`locator`'s first element lies wholly inside the viewport: on the screen, without scrolling."""
    box = locator.first.bounding_box()
    size = page.viewport_size
    assert box is not None, f"{what}: not drawn"
    assert 0 <= box["y"] and box["y"] + box["height"] <= size["height"] and 0 <= box["x"] and \
        box["x"] + box["width"] <= size["width"], f"{what} is off the screen at {size}: {box}"


def _notice_box(page):
    return page.get_by_test_id("stMain").locator('[data-testid="stAlert"]', has_text="What to notice.")


def _opened(page, n: int, notice: str | None) -> str:
    """The step just opened: its title and its notice (holding `notice`; None: the line that says where the notice
    will appear) inside the screen, nothing counted from 0 in its text. Returns the notice's text."""
    title = page.get_by_text(re.compile(rf"^Step {n} of {len(lesson.STEPS)}: "))
    _inside(page, page.get_by_role("heading", name="The lesson: how BERT learns"), f"step {n}'s page title")
    _inside(page, title, f"step {n}'s title")
    if notice is None:
        box = page.get_by_test_id("stMain").get_by_text("What to notice appears here", exact=False)
    else:
        box = _notice_box(page).filter(has_text=notice)
        box.first.wait_for(timeout=120_000)
    _inside(page, box, f"step {n}'s notice")
    text = box.first.inner_text()
    main = page.get_by_test_id("stMain").inner_text()
    assert not FROM_0.search(main), (n, FROM_0.search(main).group(0), main[:3000])
    return text


def _shot(page, name: str, dirs, charts: bool = True) -> None:
    """The step's screenshot (the page at its full height: every chart drawn), then every text of its charts
    (titles, labels, boxes, hovers) checked: nothing counted from 0 there either."""
    _shoot(page, name, dirs)
    texts = page.evaluate(
        """() => Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(d => {
              const strings = v => Array.isArray(v) ? v.flat().filter(s => typeof s === 'string')
                                                    : (typeof v === 'string' ? [v] : []);
              return [String((d.layout.title || {}).text || ''),
                      ...(d.layout.annotations || []).map(a => String(a.text || '')),
                      ...(d.data || []).flatMap(t => [t.text, t.hovertext, t.x, t.y, t.name].flatMap(strings))];
           })""")
    assert texts or not charts, f"{name}: no chart"
    counted = [s for s in texts if FROM_0.search(s)]
    assert not counted, (name, counted[:5])


def _model_named(page, name: str, n: int) -> None:
    line = page.get_by_text(re.compile(r"^Model in use \(the sidebar's\): "))
    line.first.wait_for(timeout=30_000)
    assert line.first.inner_text().startswith(f"Model in use (the sidebar's): {name},"), (n, line.first.inner_text())
    _sidebar_model(page, SIDEBAR_TRAINED if name == TRAINED else "Shipped checkpoint")


def _sidebar_model(page, source: str) -> None:
    picked = page.get_by_test_id("stSidebar").get_by_role("radio", checked=True)
    assert picked.count() == 1 and source in picked.first.evaluate("e => e.closest('label').innerText"), \
        picked.first.evaluate("e => e.closest('label').innerText")


def _next_step(page, key: str) -> None:
    """Next as a reader presses it: at the foot of the step, scrolled down to it."""
    page.get_by_role("button", name="Next").scroll_into_view_if_needed()
    _next(page, key)


def test_each_step_opens_at_its_top_counts_from_1_and_keeps_the_model_the_class_trained(
        server, browser, screenshot_dirs):
    base, _ = server
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    load: list[subprocess.Popen] = []
    try:
        load = _busy()
        page.goto(f"{base}/Lesson")
        _settle(page)

        # 1-3, before the class has trained anything: the sidebar's shipped model, named.
        _opened(page, 1, "word pieces")
        _model_named(page, "bert-tiny-english", 1)
        hovers = [t for trace in _plot(page, "tokens, as the model reads them")["data"] for t in trace["text"] or []]
        assert hovers, "the tokens figure has no boxes"
        _shot(page, "lesson-1-tokens", screenshot_dirs)

        _next_step(page, "embedding")
        text = _opened(page, 2, "token vector is")
        assert text.split("What to notice.", 1)[1].strip().startswith("Token 2 “the”"), text
        assert "positions 2 and 5" in text   # the sentence's two "the"s, counted from 1
        assert page.get_by_role("textbox", name="A sentence").input_value() == lesson.EMBEDDING_SENTENCE
        _model_named(page, "bert-tiny-english", 2)
        _shot(page, "lesson-2-embedding", screenshot_dirs)

        _next_step(page, "masking")
        _opened(page, 3, "guesses right")
        _model_named(page, "bert-tiny-english", 3)
        _shot(page, "lesson-3-masking", screenshot_dirs)

        _next_step(page, "step")
        _opened(page, 4, None)
        page.get_by_role("button", name="Take one step").click()
        _settle(page)
        _opened(page, 4, "Update 1:")
        _shot(page, "lesson-4-one-step", screenshot_dirs)

        # 5. The class trains its model: the lesson's own default run, to its end.
        _next_step(page, "run")
        _opened(page, 5, None)
        page.get_by_role("button", name="Start the default run").click()
        page.get_by_text("Run finished", exact=False).first.wait_for(timeout=900_000)
        _settle(page)
        _opened(page, 5, "went under it at step")
        _shot(page, "lesson-5-run", screenshot_dirs)

        # 6-12: the model the class trained, named on every step.
        _next_step(page, "layers")
        text = _opened(page, 6, "held-out words in")
        assert "the embeddings" in text and "layer 2 " in text and "layer 3" not in text, text   # the nano's 2 layers
        _model_named(page, TRAINED, 6)
        _shot(page, "lesson-5b-layers", screenshot_dirs)

        _next_step(page, "attention")
        text = _opened(page, 7, "of its attention")
        assert re.search(r"Head L[1-9]\d* H[1-9]\d* \(layer [1-9]\d*, head [1-9]\d*\)", text), text
        _model_named(page, TRAINED, 7)
        _shot(page, "lesson-6-attention", screenshot_dirs)

        _next_step(page, "attends")
        layer, head = (page.get_by_role("spinbutton", name=n) for n in ("Layer", "Head"))
        assert (layer.get_attribute("min"), layer.input_value(), head.get_attribute("min"), head.input_value()) == \
            ("1", "2", "1", "1")   # the nano model's last layer, its first head: counted from 1
        text = _opened(page, 8, "layer 2, head 1:")
        assert "The weighted sum of the" in text
        for title in ("its scores and weights", "and their weighted sum"):
            assert _plot(page, title)["title"].startswith("Layer 2, head 1"), title
        head.fill("2")
        head.press("Enter")
        _settle(page)
        _opened(page, 8, "layer 2, head 2:")
        assert _plot(page, "and their weighted sum")["title"].startswith("Layer 2, head 2")
        _model_named(page, TRAINED, 8)
        _shot(page, "lesson-7-attends", screenshot_dirs)

        _next_step(page, "feed-forward")
        assert page.get_by_role("spinbutton", name="Layer").input_value() == "2"   # the nano's last layer, from 1
        text = _opened(page, 9, "layer 2: W1·x + b1 turns its 64 numbers into 256 units")
        assert text.split("What to notice.")[-1].strip().startswith("Token 3 "), text   # after its icon
        _model_named(page, TRAINED, 9)
        _shot(page, "lesson-7b-feed-forward", screenshot_dirs)

        # 8. The side trip to the shipped English model: drawn on this step, the lesson's model kept.
        _next_step(page, "predictions")
        ours = _opened(page, 10, "top guess is")
        _model_named(page, TRAINED, 10)
        page.get_by_text("Side trip: try your own sentences on the shipped English model", exact=False).click()
        _settle(page)
        assert _plot(page, "bert-tiny-english's guesses for the first [MASK]", timeout=60)
        page.get_by_text(f"The lesson's model is still {TRAINED}.", exact=False).first.wait_for(timeout=30_000)
        assert _notice_box(page).filter(has_text="top guess is").first.inner_text() == ours   # the lesson's model's
        _model_named(page, TRAINED, 10)
        _shot(page, "lesson-8-predictions", screenshot_dirs)

        _next_step(page, "bert-or-gpt")
        text = _opened(page, 11, "GPT's [CLS] looks at 1 of the")
        assert "(1 [CLS]), as only itself can be seen" in text, text
        _sidebar_model(page, SIDEBAR_TRAINED)
        _shot(page, "lesson-9-bert-or-gpt", screenshot_dirs)

        _next_step(page, "fine-tune")
        _opened(page, 12, None)
        _model_named(page, TRAINED, 12)
        _shot(page, "lesson-10-fine-tune", screenshot_dirs, charts=False)

        # The race, on the Fine-tune page the step opens: the model the class trained, not the shipped one.
        page.get_by_role("button", name="Run the lesson's race").click()
        page.wait_for_url(re.compile(r"Fine-tune"), timeout=60_000)
        _settle(page)
        _sidebar_model(page, SIDEBAR_TRAINED)
        page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Run the race").click()
        page.get_by_role("heading", name="Results").wait_for(timeout=900_000)
        _settle(page)
        _no_exception(page, "fine-tune (the lesson's race)")
        page.get_by_role("link", name=re.compile("Back to the lesson")).click()
        page.wait_for_url(re.compile(r"step=fine-tune"), timeout=60_000)
        _settle(page)
        text = _opened(page, 12, f"(it fine-tuned {TRAINED})")
        _model_named(page, TRAINED, 12)

        # The end: every line names the model its figures came from.
        page.get_by_role("heading", name="What this lesson showed").wait_for(timeout=30_000)
        summary = page.get_by_test_id("stMain").locator("li").all_inner_texts()   # its only list
        models = {title: re.match(r"^(.+?) \(on (.+?)\)\. ", line) for line in summary
                  for title in [line.split(" (on ", 1)[0]]}
        assert all(models.values()) and len(models) == len(summary), summary
        on = {title: m.group(2) for title, m in models.items()}
        expected = {"Tokens": "bert-tiny-english", "What an embedding is": "bert-tiny-english",
                    "Masking": "bert-tiny-english", "One training step": "a fresh nano BERT, the Train page's default",
                    "A live run": "the default run's nano BERT, as it trained", "Attention": TRAINED,
                    "How one token attends": TRAINED, "Predictions": TRAINED, "What each layer knows": TRAINED,
                    "The feed-forward block": TRAINED,
                    "Predictions, side trip": "bert-tiny-english",
                    "BERT or GPT": "bert-tiny-english and gpt-tiny-english",
                    "Fine-tuning against a bag of words": TRAINED}
        assert on == expected, summary
        _no_exception(page, "lesson: the end")
        _shot(page, "lesson-10-fine-tune-reported", screenshot_dirs, charts=False)
    finally:
        for proc in load:
            proc.kill()
            proc.wait()
        page.close()

"""In a real browser at a projector's 1280 x 720: the whole lesson from the home page's *Start the lesson*, step by
step on the default settings. Each step's "What to notice" is checked against the figure on the page, each question
is answered, each step is screenshotted (docs/screenshots/lesson-*.png with BERT_UPDATE_SCREENSHOTS=1), and a
reload opens the same step."""

from __future__ import annotations

import re
import time

import pytest

from tests.browser_support import READ_CHART_TEXT, _no_exception, _settle, _shoot
from bert_core.inspect import lesson
from bert_core.inspect.figure_floor import MIN_FONT_PX

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out


def _notice(page, expect: str | re.Pattern = "") -> str:
    """The step's "What to notice" text, once it holds `expect` (the previous step's box stays on the page until the
    new one is drawn: on a loaded machine a read right after Next can find the old one)."""
    box = page.locator('[data-testid="stAlert"]', has_text="What to notice.")
    if expect:
        box = box.filter(has_text=expect)
    box = box.last
    box.wait_for(timeout=60_000)
    return box.inner_text().split("What to notice.", 1)[1].strip()


def _plots(page) -> list[dict]:
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => ({
              title: String((d.layout.title || {}).text || d.layout.title || '').replace(/<[^>]+>/g, ''),
                        data: (d.data || []).map(t => ({name: t.name, x: t.x, y: t.y, text: t.text}))}))""")


def _plot(page, title: str, timeout: float = 30.0) -> dict:
    """The chart whose title holds `title`, once drawn (a chart below the fold is drawn when scrolled to)."""
    deadline = time.time() + timeout
    while True:
        found = [p for p in _plots(page) if title in p["title"]]
        if found or time.time() > deadline:
            break
        page.mouse.wheel(0, 600)
        time.sleep(0.3)
    assert found, [p["title"] for p in _plots(page)]
    return found[0]


def _answer(page, key: str) -> None:
    q = lesson.STEPS[lesson.STEP_KEYS.index(key)].question
    page.get_by_text(q.choices[q.answer], exact=True).click()
    page.get_by_text("Right.", exact=False).first.wait_for(timeout=10_000)
    _settle(page)


def _next(page, key: str) -> None:
    page.get_by_role("button", name="Next").click()
    page.wait_for_url(re.compile(rf"step={key}"), timeout=30_000)
    _settle(page)


def _readable(page, title: str) -> None:
    """The chart whose title holds `title`: no text under 12 px and none past the chart's edges."""
    _plot(page, title)
    texts = page.evaluate(READ_CHART_TEXT, title)
    assert texts, title
    assert not [x for x in texts if x["size"] < MIN_FONT_PX - 0.01], (title, texts)
    assert not [x for x in texts if x["out"] > 1], (title, [x for x in texts if x["out"] > 1])


def test_the_whole_lesson_on_the_defaults(server, browser, screenshot_dirs):
    base, _ = server
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        page.goto(base)
        _settle(page)
        page.get_by_text("Start the lesson").click()
        page.wait_for_url(re.compile(r"Lesson"), timeout=30_000)
        _settle(page)
        assert "step=tokens" in page.url

        # 1. Tokens: the notice's count of pieces is the figure's count of tokens, less [CLS] and [SEP].
        text = _notice(page, "word pieces")
        pieces = int(re.search(r"became (\d+) word pieces", text).group(1))
        assert _plot(page, "tokens, as the model reads them")["title"].startswith(f"{pieces + 2} tokens")
        _answer(page, "tokens")
        _no_exception(page, "lesson: tokens")
        _shoot(page, "lesson-1-tokens", screenshot_dirs)

        # 1b. What an embedding is: the notice names the picked token the figure's title names.
        _next(page, "embedding")
        text = _notice(page, "token vector is")
        token = re.match(r"Token (\d+ \S+):", text).group(1).replace("“", "").replace("”", "")
        assert token in _plot(page, "its embeddings")["title"], (token, text)
        _answer(page, "embedding")
        _shoot(page, "lesson-2-embedding", screenshot_dirs)

        # 2. Masking: the notice's accuracies by decision are the bars' heights.
        _next(page, "masking")
        text = _notice(page, "guesses right")
        bars = _plot(page, "Right guesses by decision")["data"][0]
        said = dict(re.findall(r"the (kept tokens|\[MASK\]ed ones|random ones) (\d+)%", text))
        names = {"kept": "kept tokens", "[MASK]": "[MASK]ed ones", "random": "random ones"}
        for decision, value in zip(bars["x"], bars["y"]):
            assert int(said[names[decision]]) == round(value * 100), (decision, value, text)
        _answer(page, "masking")
        _shoot(page, "lesson-3-masking", screenshot_dirs)

        # 3. One step: the notice's loss is the tile's, and a second press is update 2.
        _next(page, "step")
        page.get_by_role("button", name="Take one step").click()
        _settle(page)
        text = _notice(page, "Update 1:")
        assert text.startswith("Update 1:")
        tile = page.locator('[data-testid="stMetric"]', has_text="Masked-LM loss").locator(
            '[data-testid="stMetricValue"]').inner_text()
        assert f"loss was {float(tile):.2f}" in text
        page.get_by_role("button", name="Take one step").click()
        _settle(page)
        assert _notice(page, "Update 2:").startswith("Update 2:")
        assert _plot(page, "Gradient by part of the model, update 2")
        _answer(page, "step")
        _shoot(page, "lesson-4-one-step", screenshot_dirs)

        # 4. A live run: the default run until its held-out loss is under the unigram line, then Stop (the
        # walkthrough test, test_browser_lesson.py, runs it to its end); the notice's last held-out loss is then the
        # chart's last point.
        _next(page, "run")
        page.get_by_role("button", name="Start the default run").click()
        page.locator('[data-testid="stAlert"]', has_text="went under it at step").first.wait_for(timeout=300_000)
        page.get_by_role("button", name="Stop").click()
        page.get_by_text("Run stopped", exact=False).first.wait_for(timeout=60_000)
        _settle(page)
        text = _notice(page, "went under it at step")
        held = [t for t in _plot(page, "Loss")["data"] if "held-out" in (t["name"] or "")][0]
        assert f"{held['y'][-1]:.2f} at step {held['x'][-1]:,}" in text
        assert "went under it at step" in text
        _answer(page, "run")
        _no_exception(page, "lesson: run")
        _shoot(page, "lesson-5-run", screenshot_dirs)

        # 4b. What each layer knows, on the model the run trained: the notice counts the held-out words the chart's
        # title counts, and names the embeddings and each of the run's layers (counted from 1), no more.
        _next(page, "layers")
        text = _notice(page, "held-out words in")
        words = re.match(r"Of ([\d,]+) held-out words", text).group(1)
        probes = _plot(page, "What each layer knows")
        assert f"linear probes on {words} held-out words" in probes["title"]
        layers = probes["data"][0]["x"]   # "embeddings", "layer 1", ...: the model's own depth
        assert all(f"{x} " in text for x in layers) and f"layer {len(layers)} " not in text, (layers, text)
        _readable(page, "What each layer knows")
        _answer(page, "layers")
        _no_exception(page, "lesson: layers")
        _shoot(page, "lesson-5b-layers", screenshot_dirs)

        # 5. Attention, now on the model the run trained: the named head's share is in its panel's label.
        _next(page, "attention")
        text = _notice(page, "of its attention")
        head, share = re.search(r"Head (L\d+ H\d+) .*? puts (\d+)% of its attention", text).groups()
        titles = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot .annotation-text'))"
                               ".map(e => e.textContent)")
        # The panel's label names its share when it is 30% or more (inspection.LEANS_SHARE); below, "mixed".
        assert any(t.startswith(f"{head}:") and (f"{share}%" in t or int(share) < 30) for t in titles), \
            (head, share, titles)
        page.get_by_text("Does sentence B look back at sentence A?", exact=False).click()
        pairs = _plot(page, "Sentence B's attention on sentence A")
        assert len(pairs["data"]) == 2   # B follows A, B is random
        _answer(page, "attention")
        _shoot(page, "lesson-6-attention", screenshot_dirs)

        # 5b. How one token attends: the notice's top weight is the softmax panel's tallest bar, read from the bars'
        # labels (their heights reach the browser as a binary array, not a list).
        _next(page, "attends")
        text = _notice(page, "sum to 1.00")
        share = int(re.search(r"the most, (\d+)%, go to", text).group(1))
        weights = [t for t in _plot(page, "its scores and weights")["data"] if t["name"] == "the model (temperature 1)"]
        assert round(max(float(w) for w in weights[0]["text"] if w) * 100) == share, (share, text)
        _answer(page, "attends")
        _shoot(page, "lesson-7-attends", screenshot_dirs)

        # 5c. The feed-forward block: the notice's token, layer and units are the charts' (the run's last layer).
        _next(page, "feed-forward")
        text = _notice(page, "W1·x + b1 turns its")
        token, layer, units = re.match(r"Token (\d+ “[^”]+”), layer (\d+): W1·x \+ b1 turns its \d+ numbers into (\d+)",
                                       text).groups()
        assert f"Layer {layer}'s feed-forward block for token {token}" in _plot(page, "feed-forward block for")["title"]
        assert f"with this token's {units} units" in _plot(page, "with this token's")["title"]
        unit = re.search(r"Unit (\d+) fires most", text).group(1)
        assert _plot(page, f"unit {unit}: where it fires most")
        for title in ("feed-forward block for", "with this token's", "where it fires most"):
            _readable(page, title)
        _answer(page, "feed-forward")
        _no_exception(page, "lesson: feed-forward")
        _shoot(page, "lesson-7b-feed-forward", screenshot_dirs)

        # 6. Predictions: the notice's top guess is the first bar.
        _next(page, "predictions")
        text = _notice(page, "top guess is")
        top = _plot(page, "Guesses for the first [MASK]")["data"][0]
        assert f"“{top['y'][0]}” at {round(top['x'][0] * 100)}%" in text
        _answer(page, "predictions")
        _shoot(page, "lesson-8-predictions", screenshot_dirs)

        # 7. BERT or GPT: GPT's [CLS] sees itself only.
        _next(page, "bert-or-gpt")
        assert "GPT's [CLS] looks at 1 of the" in _notice(page, "GPT's [CLS]")
        _answer(page, "bert-or-gpt")
        _shoot(page, "lesson-9-bert-or-gpt", screenshot_dirs)

        # 8. Fine-tuning: no race yet, so the step says where to run one; the last step has no Next.
        _next(page, "fine-tune")
        assert page.get_by_text("this step then reports your race", exact=False).count() == 1
        _answer(page, "fine-tune")
        assert page.get_by_role("button", name="Next").is_disabled()
        _shoot(page, "lesson-10-fine-tune", screenshot_dirs)

        # A reload opens the same step; Back goes one step back.
        page.reload()
        _settle(page)
        last = f"Step {len(lesson.STEPS)} of {len(lesson.STEPS)}"
        assert "step=fine-tune" in page.url and page.get_by_text(last, exact=False).count() == 1
        page.get_by_role("button", name="Back").click()
        page.wait_for_url(re.compile(r"step=bert-or-gpt"), timeout=30_000)
        _no_exception(page, "lesson: back")
    finally:
        page.close()


def test_a_class_follows_the_teacher_through_the_lesson(server, browser, screenshot_dirs):
    """The teacher leads a class; a student's own browser context opens the class link and moves when the teacher
    moves, until the student switches following off."""
    base, _ = server
    teacher = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    student = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    try:
        teacher.goto(f"{base}/Lesson")
        _settle(teacher)
        teacher.get_by_text("Teach with this lesson").click()
        code = teacher.locator("code", has_text="follow=").first
        # The expander opens in the browser: until its button shows, the loop below would find none and give up.
        teacher.get_by_role("button", name="Lead a class").wait_for(timeout=30_000)
        # A clean-clone CI run once waited 90 s for the link after one press, on a loaded worker (it passes alone):
        # the press is tried again while the button is still there, as a teacher would, three times at most.
        for _ in range(3):
            lead = teacher.get_by_role("button", name="Lead a class")
            if code.count() or not lead.count():
                break
            lead.click()
            _settle(teacher)
            try:
                code.wait_for(timeout=30_000)
            except Exception:  # noqa: BLE001 - playwright's TimeoutError: press again
                continue
        code.wait_for(timeout=30_000)
        link = code.inner_text().strip()
        assert link.startswith(base) and "/Lesson?follow=" in link

        student.goto(link)
        _settle(student)
        assert student.get_by_text("The teacher is on step 1: Tokens").count() == 1
        assert student.get_by_role("button", name="Next").is_disabled()   # the teacher moves this page

        _next(teacher, "embedding")
        student.wait_for_url(re.compile(r"step=embedding"), timeout=30_000)
        _settle(student)
        assert student.get_by_text(f"Step 2 of {len(lesson.STEPS)}", exact=False).count() == 1
        _no_exception(student, "student following")
        _shoot(student, "lesson-class-student-follows", screenshot_dirs)

        # Following off: the student stays where they are when the teacher moves on, and moves by themselves.
        student.get_by_text("Follow the teacher").click()
        _settle(student)
        _next(teacher, "masking")
        student.get_by_text("The teacher is on step 3", exact=False).wait_for(timeout=30_000)
        assert "step=embedding" in student.url
        student.get_by_role("button", name="Next").click()
        student.wait_for_url(re.compile(r"step=masking"), timeout=30_000)
    finally:
        teacher.context.close()
        student.context.close()


def _found_in_my_runs(context, url: str, link_query: str):
    """A new tab of the same browser on the bare page address (no run id in it), its *My runs* (one run) opened:
    (the tab, the list's link whose query holds `link_query`), once that link is there."""
    page = context.new_page()
    page.goto(url)
    _settle(page)
    page.get_by_text("My runs · 1").click()
    link = page.locator(f'a[href*="{link_query}"]')
    link.wait_for(timeout=30_000)
    return page, link


@pytest.mark.long  # a long check (`--long`); the race test below finds its run in My runs
def test_my_runs_finds_a_run_again_without_its_link_and_only_in_its_own_browser(server, browser):
    """A run started in one browser is in that browser's *My runs* after the page is opened again without its link
    (the browser's id is a cookie), with a link that reopens it; another browser's list does not have it."""
    base, _ = server
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    other = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{base}/Train?train_steps=40&train_eval_every=20&train_probe_every=0")
        _settle(page)
        page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Start", exact=True).click()
        page.get_by_text("Run finished at step 40").wait_for(timeout=120_000)
        run_id = re.search(r"run=([A-Za-z0-9_-]+)", page.url).group(1)
        page.close()

        again, link = _found_in_my_runs(context, f"{base}/Train", f"run={run_id}")
        assert again.get_by_text("finished").count() >= 1
        again.goto(link.evaluate("a => a.href"))   # relative in the page: resolved by the browser
        _settle(again)
        again.get_by_text("Run finished at step 40").wait_for(timeout=30_000)
        _no_exception(again, "a run reopened from My runs")

        stranger = other.new_page()
        stranger.goto(f"{base}/Train")
        _settle(stranger)
        stranger.get_by_text("My runs", exact=True).click()
        stranger.get_by_text("None yet", exact=False).wait_for(timeout=30_000)
        assert run_id not in stranger.content()
    finally:
        context.close()
        other.close()


# A long check (`--long`): two runs fill the server; test_finetune queues a race on a full server through AppTest.
@pytest.mark.long
def test_a_race_on_a_full_server_queues_is_found_again_in_my_runs_and_finishes(server, browser, screenshot_dirs):
    """One queue for every training: with both of the test server's slots taken by pretraining runs, a fine-tuning
    race started in another browser waits in the queue with its place shown (never refused); opened again without
    its link, the page's *My runs* has it, queued, with the link that reopens it; when the slots free, it runs and
    its results appear."""
    base, _ = server
    filler = browser.new_context(viewport={"width": 1280, "height": 900})
    student = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        fills = []
        for _ in range(2):                  # the server's two slots, each taken by a long pretraining run
            page = filler.new_page()
            page.goto(f"{base}/Train?train_steps=100000&train_eval_every=0&train_probe_every=0")
            _settle(page)
            page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Start", exact=True).click()
            page.get_by_text(re.compile(r"running: step [\d,]+ of")).first.wait_for(timeout=120_000)
            fills.append(page)

        race = student.new_page()
        race.goto(f"{base}/Fine-tune?ft_steps=30&ft_train=100&ft_val=50")
        _settle(race)
        race.get_by_role("button", name="Fine-tune both").click()
        race.get_by_text("Queued", exact=False).first.wait_for(timeout=60_000)
        assert race.get_by_text(re.compile(r"0 run\(s\) ahead of this race, estimated wait")).count() == 1
        _no_exception(race, "a race queued on a full server")
        _shoot(race, "finetune-queued", screenshot_dirs)
        race_id = re.search(r"ft=([A-Za-z0-9_-]+)", race.url).group(1)

        again, link = _found_in_my_runs(student, f"{base}/Fine-tune", f"ft={race_id}")
        assert again.get_by_text("queued").count() >= 1 and again.get_by_text("fine-tuned from").count() >= 1
        again.goto(link.evaluate("a => a.href"))   # relative in the page: resolved by the browser
        _settle(again)
        again.get_by_text("Queued", exact=False).first.wait_for(timeout=30_000)
        race.close()

        for page in fills:                  # the slots free: the race starts by itself
            page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop", exact=True).click()
        again.get_by_role("heading", name="Results").wait_for(timeout=120_000)
        _settle(again)
        _no_exception(again, "a race that waited in the queue, then finished")
        assert again.get_by_text("from pretrained").count() >= 1
    finally:
        filler.close()
        student.close()

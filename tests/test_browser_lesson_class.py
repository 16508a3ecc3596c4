"""In real browsers, a led class (each person a browser context of their own, with its own cookies): on every step of
the lesson the teacher's page and a following student's page name the same model and show the same computed
notice, the student watching the teacher's run instead of starting one; and with three students answering
differently, the teacher's view counts them right, no student sees another's answer before the teacher shows the
split, and a student's code does not open the teacher's view."""

from __future__ import annotations

import re
import time

import pytest

from tests.browser_support import _no_exception, _settle, _shoot
from bert_core.inspect import lesson

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out

VIEW = {"width": 1280, "height": 720}


def _lead(teacher, base: str) -> tuple[str, str]:
    """The teacher presses *Lead a class*: (the students' link, the teacher's link)."""
    teacher.goto(f"{base}/Lesson")
    _settle(teacher)
    teacher.get_by_text("Teach with this lesson").click()
    teacher.get_by_role("button", name="Lead a class").wait_for(timeout=30_000)
    students = teacher.locator("code", has_text="follow=").first
    for _ in range(3):   # pressed again while the button is still there, as on a loaded machine a teacher would
        lead = teacher.get_by_role("button", name="Lead a class")
        if students.count() or not lead.count():
            break
        lead.click()
        _settle(teacher)
        try:
            students.wait_for(timeout=30_000)
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: press again
            continue
    students.wait_for(timeout=30_000)
    own = teacher.locator("code", has_text="teach=").first.inner_text().strip()
    return students.inner_text().strip(), own


def _notice(page) -> str | None:
    """The step's "What to notice" text, or None when the step shows none."""
    box = page.locator('[data-testid="stAlert"]', has_text="What to notice.")
    if not box.count():
        return None
    return box.last.inner_text().split("What to notice.", 1)[1].strip()


def _model(page) -> str | None:
    """The name the "Model in use" line gives (the bold part), or None on a step without one."""
    # The texts as they are now, in one call: a count then a read could find the line redrawn in between (a busy
    # CI machine waited 30 s on an element a rerun had replaced).
    lines = page.get_by_text(re.compile(r"^Model in use")).all_inner_texts()
    if not lines:
        return None
    return re.search(r"Model in use \([^)]*\): (.+?), a (BERT|GPT)", lines[0]).group(1)


def _same(teacher, student, key: str, expect: str = "", timeout: float = 120.0) -> tuple[str | None, str | None]:
    """Once both pages are on step `key` and settled, (model, notice) of both, waiting while they differ (a student's
    page redraws a poll after the teacher's); asserts they are the same and that the notice holds `expect`."""
    deadline = time.time() + timeout
    while True:
        seen = []
        for page in (teacher, student):
            _settle(page)
            seen.append((f"step={key}" in page.url, _model(page), _notice(page)))
        if seen[0] == seen[1] and seen[0][0] and expect in (seen[0][2] or "") or time.time() > deadline:
            break
        time.sleep(1.0)
    assert seen[0][0] and seen[1][0], (key, teacher.url, student.url)
    assert seen[0][1:] == seen[1][1:], (key, seen)
    assert expect in (seen[0][2] or ""), (key, expect, seen)
    return seen[0][1:]


def _next(page, key: str) -> None:
    page.get_by_role("button", name="Next").click()
    page.wait_for_url(re.compile(rf"step={key}"), timeout=30_000)
    _settle(page)


def test_a_following_student_sees_the_teachers_model_and_notice_on_every_step(server, browser, screenshot_dirs):
    base, _ = server
    teacher = browser.new_context(viewport=VIEW).new_page()
    student = browser.new_context(viewport=VIEW).new_page()
    try:
        link, _ = _lead(teacher, base)
        student.goto(link)
        _settle(student)
        student.get_by_text("The teacher is on step 1: Tokens").wait_for(timeout=30_000)

        model, notice = _same(teacher, student, "tokens", "word pieces")
        assert model == "bert-tiny-english"
        assert student.get_by_text("Model in use (the teacher's)", exact=False).count() == 1

        _next(teacher, "embedding")
        _same(teacher, student, "embedding")
        _next(teacher, "masking")
        _same(teacher, student, "masking", "guesses right")

        # One training step: the teacher presses; the student sees that update, with no button of their own.
        _next(teacher, "step")
        _same(teacher, student, "step")
        assert student.get_by_role("button", name="Take one step").count() == 0
        teacher.get_by_role("button", name="Take one step").click()
        _settle(teacher)
        assert _same(teacher, student, "step", "Update 1:")[1].startswith("Update 1:")

        # A live run: the teacher starts it, the student watches that run (no Start button), until the teacher
        # stops it under the unigram line; then both notices are the same run's.
        _next(teacher, "run")
        _settle(student)
        student.get_by_text("The teacher starts the default run", exact=False).wait_for(timeout=30_000)
        assert student.get_by_role("button", name="Start the default run").count() == 0
        teacher.get_by_role("button", name="Start the default run").click()
        student.get_by_text("The teacher's run, watched here", exact=False).wait_for(timeout=60_000)
        teacher.locator('[data-testid="stAlert"]', has_text="went under it at step").first.wait_for(timeout=300_000)
        teacher.get_by_role("button", name="Stop", exact=True).click()
        teacher.get_by_text("Run stopped", exact=False).first.wait_for(timeout=60_000)
        student.get_by_text("Run stopped", exact=False).first.wait_for(timeout=60_000)
        assert student.get_by_role("button", name="Stop", exact=True).count() == 0
        assert student.get_by_role("button", name="Start the default run").count() == 0
        _same(teacher, student, "run", "went under it at step")
        _no_exception(student, "a student watching the teacher's run")
        _no_exception(teacher, "the teacher's view listing the class's run")
        _shoot(student, "lesson-class-student-watches-run", screenshot_dirs)

        # From here the teacher looks at the model the run trained: so do the students.
        # (The run step itself shows the run, not a model line.)
        teacher.get_by_test_id("stSidebar").get_by_text("Model trained in this session").click()
        _settle(teacher)
        _next(teacher, "layers")
        _same(teacher, student, "layers", "held-out words in")
        _next(teacher, "attention")
        model, _ = _same(teacher, student, "attention", "of its attention")
        assert model.startswith("the class's run at step"), model

        _next(teacher, "attends")
        _same(teacher, student, "attends")
        _next(teacher, "feed-forward")
        _same(teacher, student, "feed-forward", "W1·x + b1 turns its")
        _next(teacher, "predictions")
        _same(teacher, student, "predictions", "top guess is")
        _next(teacher, "bert-or-gpt")
        _same(teacher, student, "bert-or-gpt", "GPT's [CLS] looks at 1 of the")
        _next(teacher, "fine-tune")
        assert _same(teacher, student, "fine-tune") == (model, None)   # no race yet on either page
        _no_exception(student, "a student following the whole lesson")
        _no_exception(teacher, "the teacher's page, with its view of the class and its run")
    finally:
        teacher.context.close()
        student.context.close()


def _answer(page, choice: str) -> None:
    page.get_by_text(choice, exact=True).click()
    page.get_by_text(re.compile(r"^(Right\.|Not quite)")).first.wait_for(timeout=30_000)
    _settle(page)


def test_the_teachers_view_counts_three_students_answers_and_shows_the_split_only_when_asked(server, browser,
                                                                                         screenshot_dirs):
    base, _ = server
    teacher = browser.new_context(viewport=VIEW).new_page()
    students = [browser.new_context(viewport=VIEW).new_page() for _ in range(3)]
    q = lesson.STEPS[0].question
    chosen = (0, 1, 1)
    try:
        link, own = _lead(teacher, base)
        assert "teach=" in own and own.split("teach=")[1] not in link
        for page, choice in zip(students, chosen):
            page.goto(link)
            _settle(page)
            page.get_by_text("The teacher is on step 1", exact=False).wait_for(timeout=30_000)
            _answer(page, q.choices[choice])

        view = teacher.get_by_text("student(s) following you", exact=False)
        teacher.get_by_text("3 answer(s) so far", exact=False).wait_for(timeout=60_000)
        assert view.first.inner_text().startswith("3 student(s) following you"), view.first.inner_text()
        assert "1. Tokens: 3" in view.first.inner_text()
        split = re.compile(r"\d+ answers?:")
        assert teacher.get_by_text(split).count() == 0          # the split waits for the teacher's reveal
        for page, choice in zip(students, chosen):
            body = page.locator("body").inner_text()
            assert not split.search(body) and "The class's answers" not in body
            mine = page.get_by_test_id("stMainBlockContainer").get_by_role("radio", checked=True)
            assert mine.count() == 1 and mine.first.evaluate("e => e.closest('label').innerText").strip() == \
                q.choices[choice]   # their own answer, and nobody else's

        teacher.get_by_text("Reveal the answers here").click()
        _settle(teacher)
        teacher.get_by_text("3 answers:", exact=False).wait_for(timeout=30_000)
        counts = [chosen.count(i) for i in range(len(q.choices))]
        for i, text in enumerate(q.choices):
            mark = " ✓" if i == q.answer else ""
            assert teacher.get_by_text(re.compile(rf"^{re.escape(text + mark)}: {counts[i]}\b")).count() == 1, text
        for page in students:   # revealed to the teacher only
            _settle(page)
            assert "The class's answers" not in page.locator("body").inner_text()

        _shoot(teacher, "lesson-class-teachers-view", screenshot_dirs)
        teacher.get_by_role("button", name="Show the split on the students' pages").click()
        _settle(teacher)
        for page in students:
            page.get_by_text("The class's answers", exact=False).wait_for(timeout=60_000)
            for i, text in enumerate(q.choices):
                mark = " ✓" if i == q.answer else ""
                assert page.get_by_text(re.compile(rf"^{re.escape(text + mark)}: {counts[i]}\b")).count() == 1
            _no_exception(page, "a student after the split is shown")
        _shoot(students[0], "lesson-class-student-sees-the-split", screenshot_dirs)

        # A student's code in the teacher's parameter opens nothing of the teacher's.
        code = link.split("follow=")[1]
        intruder = students[0]
        intruder.goto(f"{base}/Lesson?teach={code}")
        _settle(intruder)
        intruder.get_by_text("opens no class on this server", exact=False).wait_for(timeout=30_000)
        assert intruder.get_by_text("following you", exact=False).count() == 0
        assert intruder.get_by_text("Your class: the teacher's view").count() == 0
    finally:
        teacher.context.close()
        for page in students:
            page.context.close()

"""The home page under AppTest: *Start the lesson* is a button that opens the lesson at its first step, and the
walkthrough's links are short enough for a projector (their descriptions wrap beneath them)."""

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_start_the_lesson_is_a_button_that_opens_step_1_whatever_step_was_open_last():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    button = at.button(key="home_lesson")
    assert button.label == "Start the lesson" and button.proto.type == "primary"
    at.session_state["lesson_at"] = "predictions"   # a lesson left at step 6 earlier in this session
    button.click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["lesson_at"] == "tokens"
    assert any("Step 1 of" in str(p.proto.text) for p in at.get("progress"))


def test_the_walkthrough_links_are_short_and_each_says_what_its_page_teaches():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    labels = [str(link.proto.label) for link in at.get("page_link")]
    walkthrough = [label for label in labels if label[:1].isdigit()]
    assert all(len(label) <= 20 for label in walkthrough), walkthrough
    # Every page of the sidebar but Home itself and the lesson (its own button above) is on the walkthrough.
    from bert_core.app.app_drawing import NAVIGATION
    pages = [label for page, label, _ in NAVIGATION if page not in ("app.py", "pages/0_Lesson.py")]
    assert [label.split(". ", 1)[1] for label in walkthrough] == pages, walkthrough
    captions = [str(c.value) for c in at.caption]
    for what in ("what the model is shown", "pretrain a tiny BERT live", "teach it to classify text"):
        assert what in captions, captions

"""A led class: the class record (bert_core.app.lesson_classes) keeps only steps, model names, run view ids and
counts; the teacher's token, never the students' code, opens the teacher's view; the class link uses the operator's
address or says why a localhost one will not open on a student's device; and, under AppTest, a following student's
page looks at the teacher's model, the teacher's update and the teacher's run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from bert_core.inspect import lesson
from bert_core.app import class_view, lesson_classes
from bert_core.app.lesson_classes import (
    MAX_RUNS,
    MAX_SEATS,
    PUBLIC_URL_ENV,
    SEEN_S,
    LessonClasses,
    class_links,
    is_loopback,
    seat_of,
)

ROOT = Path(__file__).resolve().parent.parent
KEYS = lesson.STEP_KEYS
TOKEN = "A" * 22   # the shape of a run's view id (runs.new_token)


def test_the_teachers_token_opens_the_report_and_the_students_code_never_does():
    classes = LessonClasses(KEYS)
    code, teacher = classes.lead("tokens")
    assert code != teacher and len(teacher) >= 20
    assert classes.code_for_teacher(teacher) == code
    assert classes.code_for_teacher(code) is None and classes.report(code) is None
    assert classes.report(teacher).code == code
    classes.close(code)
    assert classes.state(code) is None and classes.report(teacher) is None and classes.code_for_teacher(teacher) is None


def test_the_record_takes_step_names_shipped_names_and_view_ids_and_nothing_else():
    classes = LessonClasses(KEYS)
    code, _ = classes.lead("tokens")
    for bad in (("shipped", "../../etc/passwd"), ("shipped", "/abs/path"), ("run", "/tmp/x"), ("folder", "a"),
                ("run", "short")):
        classes.set_model(code, bad)
        assert classes.state(code).model is None, bad
    classes.set_model(code, ("shipped", "gpt-tiny-english"))
    assert classes.state(code).model == ("shipped", "gpt-tiny-english")
    classes.set_run(code, "../etc")
    assert classes.state(code).run is None and classes.report(classes._classes[code].teacher).runs == ()
    classes.set_run(code, TOKEN)
    assert classes.state(code).run == TOKEN
    classes.set_step(code, "../../etc/passwd")
    assert classes.state(code).step == "tokens"


def test_the_version_moves_only_when_something_a_student_sees_changes():
    classes = LessonClasses(KEYS)
    code, _ = classes.lead("tokens")
    v0 = classes.state(code).version
    classes.set_step(code, "tokens")
    classes.set_model(code, None)
    classes.set_run(code, None)
    assert classes.state(code).version == v0   # the teacher's page publishes at every rerun: no change, no redraw
    classes.set_step(code, "masking")
    assert classes.state(code).version == v0 + 1


def test_the_teacher_counts_students_by_step_and_answers_by_choice_without_names():
    classes = LessonClasses(KEYS)
    code, teacher = classes.lead("masking")
    seats = [seat_of(code, f"browser-{i}") for i in range(4)]
    assert len(set(seats)) == 4 and all("browser" not in s for s in seats)
    for i, seat in enumerate(seats):
        classes.seen(code, seat, "masking" if i < 3 else "tokens", following=i < 3, now=100.0)
    for seat, choice in zip(seats, (0, 1, 1)):
        classes.answer(code, seat, "masking", choice)
    classes.answer(code, seats[0], "masking", 2)          # a changed answer counts once, as the new one
    classes.answer(code, seats[3], "masking", 99)         # not a choice: ignored
    classes.answer(code, seat_of(code, "never-seen"), "masking", 0)   # no seat: not counted
    report = classes.report(teacher, now=101.0, choices=3)
    assert report.following == 3 and report.on_step["masking"] == 3 and report.on_step["tokens"] == 1
    assert report.answers == (0, 2, 1) and report.step == "masking"
    assert classes.report(teacher, now=100.0 + SEEN_S + 1).following == 0   # closed tabs stop counting
    assert classes.report(teacher, now=100.0 + SEEN_S + 1, choices=3).answers == (0, 2, 1)   # answers stay


def test_a_student_reads_the_split_only_after_the_teacher_shows_it():
    classes = LessonClasses(KEYS)
    code, teacher = classes.lead("tokens")
    seat = seat_of(code, "b")
    classes.seen(code, seat, "tokens", True)
    classes.answer(code, seat, "tokens", 1)
    assert classes.shown_split(code, "tokens", 3) is None
    classes.show_split(code, "tokens")
    assert classes.shown_split(code, "tokens", 3) == (0, 1, 0) and classes.report(teacher).shown
    assert classes.shown_split(code, "masking", 3) is None   # only the step shown
    classes.show_split(code, "tokens", False)
    assert classes.shown_split(code, "tokens", 3) is None


def test_seats_runs_and_classes_are_bounded():
    classes = LessonClasses(KEYS, limit=2)
    code, teacher = classes.lead("tokens")
    for i in range(MAX_SEATS + 5):
        classes.seen(code, seat_of(code, str(i)), "tokens", True, now=1000.0)
    for i in range(MAX_RUNS + 5):
        classes.add_run(code, f"{i:022d}")
    report = classes.report(teacher, now=1000.0)
    assert sum(report.on_step.values()) == MAX_SEATS and len(report.runs) == MAX_RUNS
    assert report.runs[0] == f"{5:022d}"   # the oldest went first
    classes.lead("tokens")
    classes.lead("tokens")
    assert classes.state(code) is None and classes.code_for_teacher(teacher) is None


def test_the_class_link_uses_the_operators_address_or_says_why_localhost_will_not_open():
    links = class_links("http://192.168.1.20:8501/Lesson", "CODE", "TEACH")
    assert links.students == "http://192.168.1.20:8501/Lesson?follow=CODE" and links.note is None
    assert links.teacher == "http://192.168.1.20:8501/Lesson?teach=TEACH"
    local = class_links("http://localhost:8501/Lesson", "CODE", "TEACH", lan_address="192.168.1.20")
    assert local.students == "http://localhost:8501/Lesson?follow=CODE"
    assert "cannot open it" in local.note and "http://192.168.1.20:8501/Lesson" in local.note
    assert PUBLIC_URL_ENV in local.note
    public = class_links("http://localhost:8501/Lesson", "CODE", "TEACH", public_url="https://class.example.org/x/")
    assert public.students == "https://class.example.org/x/Lesson?follow=CODE" and public.note is None
    assert class_links("http://127.0.0.1:9/Lesson", "C", "T", public_url="not a url").note   # ignored, still told
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("0.0.0.0") and is_loopback("localhost")
    assert not is_loopback("192.168.1.20") and not is_loopback("class.example.org")


def test_the_public_url_setting_is_documented():
    assert f"`{PUBLIC_URL_ENV}`" in (ROOT / "docs" / "deployment.md").read_text()


def test_the_answer_split_counts_each_choice_and_marks_the_right_one():
    q = lesson.STEPS[0].question
    text = lesson.answer_split(q, (1, 2, 0))
    assert text.startswith("3 answers:")
    assert f"- {q.choices[1]} ✓: **2** (67%)" in text and f"- {q.choices[0]}: **1** (33%)" in text


def _trainer(masked_acc: float, step: int, max_steps: int = 100):
    history = [SimpleNamespace(mlm_acc_masked=masked_acc, mlm_acc=masked_acc) for _ in range(60)]
    return SimpleNamespace(step=step, config=SimpleNamespace(max_steps=max_steps, objective="mlm"), history=history,
                           baselines={"unigram": {"accuracy": 0.05}}, evals=[SimpleNamespace(mlm_acc=0.123)])


def test_a_class_run_row_names_its_size_its_changed_knob_its_accuracy_and_the_plateau():
    from bert_core.training.train_spec import default_spec
    from bert_core.training.comparison import one_change

    default = default_spec()
    changed = one_change(default, "mask_rate", 0.4)
    runs = {"a": SimpleNamespace(spec=changed, phase="running", trainer=_trainer(0.05, 50)),
            "b": SimpleNamespace(spec=default, phase="finished", trainer=_trainer(0.30, 100)),
            "c": SimpleNamespace(spec=default, phase="running", trainer=_trainer(0.05, 10)),
            "race": SimpleNamespace(spec=SimpleNamespace(builder=None, page="Fine-tune"), phase="finished",
                                    trainer=None)}
    rows = class_view.run_rows(["a", "gone", "b", "c", "race"], runs.get, default)
    assert [r["run"] for r in rows] == ["run 1", "run 3", "run 4"]
    a, b, c = rows
    assert a["changed"] == "mask rate 0.15 → 0.4" and b["changed"] == "none (the default run)"
    assert a["size"] == "nano" and a["held-out accuracy (%)"] == 12.3 and a["of"] == "masked tokens"
    assert (a["on the unigram plateau"], b["on the unigram plateau"], c["on the unigram plateau"]) == \
        ("yes", "no", "too early")
    gpt = one_change(default, "attention", "causal")
    row = class_view.run_row(5, SimpleNamespace(spec=gpt, phase="finished", trainer=_trainer(0.3, 100)), default)
    assert row["of"] == "the next token" and "attention bidirectional (BERT) → causal (GPT)" in row["changed"]
    own = one_change(default, "corpus", "tinyshakespeare")
    own.corpus = "/home/someone/secret.txt"
    row = class_view.run_row(1, SimpleNamespace(spec=own, phase="queued", trainer=None), default)
    assert "secret" not in str(row) and "/home" not in str(row) and "a file of their own" in row["changed"]


# ------------------------------------------------------------------------------------------------ the page


pytest.importorskip("streamlit")


def _page(**query):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    for name, value in query.items():
        at.query_params[name] = value
    at.switch_page("pages/0_Lesson.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _param(at, name):
    value = at.query_params.get(name)
    return value[0] if isinstance(value, list) else value


def _notice(at) -> str | None:
    """The step's notice as a reader sees it (the page escapes its Markdown: `\\:`, `\\[`)."""
    from tests.test_lesson_page import _shown

    found = [str(i.value) for i in at.info if str(i.value).startswith("**What to notice.**")]
    return _shown(found[0].removeprefix("**What to notice.** ")) if found else None


def _model_line(at) -> str:
    return next(str(c.value) for c in at.caption if str(c.value).startswith("Model in use"))


@pytest.fixture
def led():
    """A teacher's page leading a class: (teacher's AppTest, students' code, teacher's token)."""
    from bert_core.app import app_state

    teacher = _page()
    teacher.button(key="lesson_lead_go").click().run()
    token = _param(teacher, "teach")
    code = app_state.LESSON_CLASSES.code_for_teacher(token)
    assert code and code != token
    yield teacher, code, token
    app_state.LESSON_CLASSES.close(code)
    for run in app_state.RUNS.runs():
        app_state.RUNS.discard(run.run_id, wait=30)


@pytest.mark.slow
def test_a_student_looks_at_the_teachers_model_and_the_teachers_update(led):
    teacher, code, _ = led
    student = _page(follow=code)
    assert _model_line(student).startswith("Model in use (the teacher's): **bert-tiny-english**")
    assert _notice(student) == _notice(teacher)
    # The teacher picks the GPT twin: the student's steps look at it too.
    teacher.selectbox(key="model_shipped").set_value("gpt-tiny-english").run()
    student.run()
    assert "**gpt-tiny-english**" in _model_line(student) and "**gpt-tiny-english**" in _model_line(teacher)
    assert _notice(student) == _notice(teacher)
    teacher.selectbox(key="model_shipped").set_value("bert-tiny-english").run()
    # One training step: the teacher presses, the student sees that very update, with no button of their own.
    for _ in range(3):   # tokens -> embedding -> masking -> step
        teacher.button(key="lesson_next").click().run()
    student.run()
    assert _param(student, "step") == "step" and not [b for b in student.button if b.key == "lesson_step_go"]
    teacher.button(key="lesson_step_go").click().run()
    student.run()
    assert _notice(teacher).startswith("Update 1:") and _notice(student) == _notice(teacher)


@pytest.mark.slow
def test_a_student_watches_the_teachers_run_and_gets_no_start_button(led):
    from bert_core.app import app_state

    teacher, code, _ = led
    teacher.query_params["step"] = "run"
    teacher.run()
    student = _page(follow=code)
    assert _param(student, "step") == "run"
    assert not [b for b in student.button if b.key == "lesson_run_go"]
    assert any("The teacher starts the default run" in str(i.value) for i in student.info)
    teacher.button(key="lesson_run_go").click().run()
    run = app_state.RUNS.runs()[0]
    student.run()
    assert not student.exception, [e.value for e in student.exception]
    assert not [b for b in student.button if b.key in ("lesson_run_go", "lesson_run_stop")]
    assert _param(student, "watch") == run.view_id and len(app_state.RUNS.runs()) == 1   # watched, not restarted
    assert any("The teacher's run, watched here" in str(c.value) for c in student.caption)
    report = app_state.LESSON_CLASSES.report(_param(teacher, "teach"))
    assert report.runs == (run.view_id,)


@pytest.mark.slow
def test_the_teachers_view_counts_answers_and_shows_the_split_only_when_asked(led):
    teacher, code, token = led
    students = [_page(follow=code) for _ in range(3)]
    for at, choice in zip(students, (0, 1, 1)):
        at.radio(key="lesson_q_tokens").set_value(choice).run()
    teacher.run()
    texts = [str(m.value) for m in teacher.markdown]
    assert any(t.startswith("**3** student(s) following you") for t in texts), texts
    assert any("3 answer(s) so far" in t for t in texts)
    q = lesson.STEPS[0].question
    assert not any(q.choices[0] + ":" in t for t in texts)          # the split waits for the reveal
    teacher.toggle(key="lesson_reveal_tokens").set_value(True).run()
    assert any(lesson.answer_split(q, (1, 2, 0)) == str(m.value) for m in teacher.markdown)
    for at in students:
        at.run()
        assert not any("The class's answers" in str(i.value) for i in at.info)
    teacher.button(key="lesson_show_split").click().run()
    for at in students:
        at.run()
        assert any(lesson.answer_split(q, (1, 2, 0)) in str(i.value) for i in at.info)


@pytest.mark.slow
def test_a_students_code_does_not_open_the_teachers_view(led):
    _, code, _ = led
    at = _page(teach=code)
    assert any("opens no class" in str(w.value) for w in at.warning)
    assert not [e for e in at.expander if "teacher's view" in str(e.label)]
    assert not any("following you" in str(m.value) for m in at.markdown)
    student = _page(follow=code)
    assert not [e for e in student.expander if "teacher's view" in str(e.label)]
    assert not [b for b in student.button if b.key in ("lesson_lead_go", "lesson_show_split")]


@pytest.mark.slow
def test_the_teachers_view_lists_the_class_runs_with_a_students_own(led):
    from bert_core.app import app_state

    teacher, code, token = led
    teacher.query_params["step"] = "run"
    teacher.run()
    teacher.button(key="lesson_run_go").click().run()
    student = _page(follow=code)
    student.toggle(key="lesson_follow_on").set_value(False).run()   # on their own: their own run, from the lesson
    student.query_params["step"] = "run"
    student.run()
    student.button(key="lesson_run_go").click().run()
    assert not student.exception, [e.value for e in student.exception]
    student.run()   # the rerun's sidebar notes the new run as the class's
    teacher.run()
    runs = app_state.LESSON_CLASSES.report(token).runs
    assert len(runs) == 2 and {app_state.RUNS.by_view(v).view_id for v in runs} == set(runs)
    table = next(d.value for d in teacher.dataframe if "changed" in d.value.columns)
    assert list(table["run"]) == ["run 1", "run 2"] and set(table["size"]) == {"nano"}
    assert set(table["changed"]) == {"none (the default run)"}


@pytest.mark.slow
def test_the_last_step_of_a_following_student_reports_the_teachers_race(led):
    import time

    from bert_core.app import app_state
    from bert_core.serve.finetune_runs import FINETUNE_PAGE

    teacher, code, _ = led
    teacher.query_params["step"] = "fine-tune"
    teacher.run()
    student = _page(follow=code)
    assert _param(student, "step") == "fine-tune" and _notice(student) is None
    assert not [b for b in student.button if b.key == "lesson_race_go"]   # the class does not run thirty races
    for name, value in (("ft_steps", "5"), ("ft_train", "60"), ("ft_val", "30"), ("ft_maxlen", "32")):
        teacher.query_params[name] = value
    teacher.switch_page("pages/5_Fine-tune.py").run()
    next(b for b in teacher.button if b.label in ("Run the race", "Fine-tune both")).click().run()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        races = [r for r in app_state.RUNS.runs() if getattr(r.spec, "page", None) == FINETUNE_PAGE]
        if races and not races[0].active:
            break
        time.sleep(0.5)
    teacher.query_params["step"] = "fine-tune"
    teacher.switch_page("pages/0_Lesson.py").run()
    assert not teacher.exception, [e.value for e in teacher.exception]
    text = _notice(teacher)
    assert text and text.startswith("Your race (it fine-tuned bert-tiny-english), held-out")
    student.run()
    assert _notice(student) == text


@pytest.mark.slow
def test_the_teachers_link_reopens_the_class_where_it_is_and_the_students_way_back_keeps_the_class(led):
    teacher, code, token = led
    teacher.button(key="lesson_next").click().run()               # the class is on step 2
    again = _page(teach=token)                                      # the teacher's link, in a fresh session
    assert _param(again, "step") == "embedding"
    assert [e for e in again.expander if "teacher's view" in str(e.label)]
    student = _page(follow=code)
    student.switch_page("pages/3_Attention.py").run()
    for name in ("follow", "step"):
        if name in student.query_params:
            del student.query_params[name]
    student.switch_page("pages/0_Lesson.py").run()                  # the sidebar's *Lesson*: a link without them
    assert not student.exception, [e.value for e in student.exception]
    assert _param(student, "follow") == code and _param(student, "step") == "embedding"
    assert any("The teacher is on step 2" in str(c.value) for c in student.caption)


@pytest.mark.slow
def test_stop_leading_ends_the_class_for_its_students(led):
    from bert_core.app import app_state

    teacher, code, token = led
    student = _page(follow=code)
    teacher.button(key="lesson_lead_stop").click().run()
    assert "teach" not in teacher.query_params and app_state.LESSON_CLASSES.state(code) is None
    assert app_state.LESSON_CLASSES.code_for_teacher(token) is None
    student.run()
    assert not student.exception, [e.value for e in student.exception]
    assert any("class of this link has ended" in str(c.value) for c in student.caption)
    assert not student.button(key="lesson_next").disabled           # the student goes on by themselves


def test_a_class_code_is_six_characters_a_student_can_type_and_is_read_as_typed():
    classes = LessonClasses(KEYS, limit=100)
    codes = {classes.lead(KEYS[0])[0] for _ in range(50)}
    assert len(codes) == 50
    assert all(len(c) == lesson_classes.CODE_LENGTH and set(c) <= set(lesson_classes.CODE_ALPHABET) for c in codes)
    assert not set(lesson_classes.CODE_ALPHABET) & set("01IOL")   # nothing a projector's reader mistakes
    code = sorted(codes)[0]
    typed = f" {code[:3].lower()}-{code[3:]} "
    assert lesson_classes.class_code(typed) == code and classes.state(lesson_classes.class_code(typed)) is not None
    for bad in ("", "K7P3Q", "K7P3QXX", "K7P3Q0", "<a href=x>", None):
        assert lesson_classes.class_code(bad) is None, bad


def test_the_class_link_is_drawn_as_a_qr_code():
    png = lesson_classes.class_qr_png("http://localhost:8501/Lesson?follow=K7P3QX")
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 200


@pytest.mark.slow
def test_the_teacher_shows_a_code_and_a_qr_code_and_a_student_joins_by_typing_the_code(led):
    teacher, code, _ = led
    assert any(code in str(m.value) for m in teacher.markdown), "the class code is not on the teacher's page"
    assert teacher.get("image"), "no QR code on the teacher's page"
    student = _page()
    student.text_input(key="lesson_join_code").input(f"{code[:3].lower()} {code[3:]}")
    student.button(key="lesson_join_go").click().run()
    assert not student.exception, [e.value for e in student.exception]
    assert _param(student, "follow") == code
    assert student.toggle(key="lesson_follow_on").value is True   # following the class, at the teacher's step
    wrong = _page()
    wrong.text_input(key="lesson_join_code").input("K7P3Q")
    wrong.button(key="lesson_join_go").click().run()
    assert len(wrong.error) == 1 and "6 letters and digits" in wrong.error[0].value

"""What a link gives the pages (issue 70): a number setting in the URL held to its widget's range (the nearest
bound, never the minimum for a value too large) and NaN, infinities and junk refused with a note; a link that names
no run, race or class says so; an upload's error shown once."""

import math
from pathlib import Path

import pytest

from bert_core.app.url_settings import Within, url_number, url_value

pytestmark = pytest.mark.slow  # its page tests take 10 s or more: it runs first (conftest.py)

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------ the parsing, without Streamlit

@pytest.mark.parametrize("raw, lo, hi, expected", [
    ("100000", 1, 256, 256),              # above: the maximum (Streamlit alone gave the minimum)
    ("999999999", 1, 3600, 3600),
    ("-5", 1, 256, 1),                    # below: the minimum
    (" 64 ", 1, 256, 64),
    ("1e3", 1, 100_000, 1000),            # a whole number written as a float
    ("99999999999999999999999", 0, 2**31 - 1, 2**31 - 1),
    ("0.3", 0.0, 0.9, 0.3),
    ("2", 0.0, 0.95, 0.95),
    ("-1", 0.01, 0.5, 0.01),
    ("5", 1e-6, 1e-1, 1e-1),              # a log-scale float (a learning rate): its own bounds, not a step
    ("1e-12", 1e-6, 1e-1, 1e-6),
    ("3e-4", 1e-6, 1e-1, 3e-4),
])
def test_a_url_number_is_held_to_the_nearest_bound(raw, lo, hi, expected):
    value = url_number(raw, lo, hi)
    assert value == pytest.approx(expected, rel=1e-12)
    assert type(value) is type(expected)


@pytest.mark.parametrize("raw, lo, hi", [
    ("nan", 1e-6, 1e-1), ("NaN", 0.0, 1.0), ("inf", 0.0, 1.0), ("-inf", 1, 256), ("1e400", 0.0, 1.0),
    ("abc", 1, 256), ("", 1, 256), ("2.5", 1, 256), ("nan", 1, 256), ("0x10", 1, 256), ("1,5", 0.0, 1.0),
])
def test_junk_nan_and_infinities_are_refused(raw, lo, hi):
    with pytest.raises(ValueError):
        url_number(raw, lo, hi)


def test_within_is_the_widgets_range_and_the_cast():
    batch = Within(1, 256)
    assert tuple(batch) == (1, 256) and [*batch] == [1, 256]   # unpacks into a widget's min and max
    assert batch("100000") == 256


def test_url_value_refuses_what_a_plain_cast_lets_through():
    assert url_value("a dog ran", str) == "a dog ran"
    assert url_value("7", int) == 7
    for raw in ("nan", "inf", "-Infinity"):
        with pytest.raises(ValueError):
            url_value(raw, float)    # float("nan") is a value that passes every range check
    with pytest.raises(ValueError):
        url_value("x", int)
    assert math.isclose(url_value("0.5", float), 0.5)


# ------------------------------------------------------------------------------------------- the pages (AppTest)

streamlit_testing = pytest.importorskip("streamlit.testing.v1")
from tests.test_app import TIMEOUT, _app_env, _assert_clean, checkpoint  # noqa: E402,F401 - its nano model, cleanup
from tests.test_app import _open as _from_home  # noqa: E402


def _open(page: str, **query):
    """The page opened from Home with this query (a number setting stays in the URL through the switch)."""
    at = _from_home(page, **query)
    _assert_clean(at)
    return at


def _link(page: str, **query):
    """The page opened by a link to it (the sidebar reads a run's link on the page the link opens)."""
    at = streamlit_testing.AppTest.from_file(str(ROOT / page), default_timeout=TIMEOUT)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    _assert_clean(at)
    return at


def _toasts(at) -> list[str]:
    return [t.value for t in at.toast]


def _url(at, key: str) -> str:
    value = at.query_params[key]
    return value[0] if isinstance(value, list) else value


def test_fine_tune_settings_from_a_link_take_the_nearest_bound_and_nan_is_refused():
    plain = _open("pages/5_Fine-tune.py")
    suggested = plain.session_state["ft_lr"]
    at = _open("pages/5_Fine-tune.py", ft_batch="100000", ft_budget="999999999", ft_train="3", ft_lr="nan",
               ft_seed="2.5", ft_maxlen="-1")
    s = at.session_state
    assert at.number_input(key="ft_batch").value == 256 and s["ft_batch"] == 256         # int, above: the maximum
    assert at.number_input(key="ft_budget").value == 3600
    assert at.number_input(key="ft_train").value == 10                                # int, below: the minimum
    assert at.number_input(key="ft_maxlen").value == 16
    assert s["ft_lr"] == pytest.approx(suggested) and math.isfinite(s["ft_lr"])      # NaN: the default
    assert s["ft_seed"] == 0                                                          # a fraction: not a seed
    notes = _toasts(at)
    assert len(notes) == 2 and any("`ft_lr`" in n for n in notes) and any("`ft_seed`" in n for n in notes), notes
    assert _url(at, "ft_batch") == "256"      # the address bar now holds what the page uses
    assert not at.error


@pytest.mark.parametrize("raw, expected", [("5", 0.1), ("1e-12", 1e-6), ("0.0003", 3e-4)])
def test_a_log_scale_rate_from_a_link_takes_the_nearest_bound(raw, expected):
    at = _open("pages/5_Fine-tune.py", ft_lr=raw)
    assert at.number_input(key="ft_lr").value == pytest.approx(expected, rel=1e-9)
    assert not _toasts(at)


def test_train_settings_from_a_link_take_the_nearest_bound_and_nan_is_refused():
    plain = _open("pages/2_Train.py")
    at = _open("pages/2_Train.py", train_steps="99999999", train_lr="nan", train_mask="0.9", train_dropout="inf",
               train_short_frac="2", train_batch="0", train_smoothing="5")
    s = at.session_state
    assert s["train_steps"] == 1_000_000 and s["train_batch"] == 1
    assert s["train_mask"] == pytest.approx(0.5) and s["train_short_frac"] == pytest.approx(0.95)   # sliders
    assert s["train_lr"] == pytest.approx(plain.session_state["train_lr"])
    assert s["train_dropout"] == pytest.approx(plain.session_state["train_dropout"])
    assert s["train_smoothing"] == pytest.approx(0.99)
    notes = _toasts(at)
    assert len(notes) == 2 and any("`train_lr`" in n for n in notes) and any("`train_dropout`" in n for n in notes)


@pytest.mark.parametrize("page, query, key, expected", [
    ("pages/1_Tokens_and_masking.py", {"tm_rate": "0.9"}, "tm_rate", 0.5),     # a slider: it raised before
    ("pages/1_Tokens_and_masking.py", {"tm_rate": "nan"}, "tm_rate", 0.15),    # NaN reached the masking: raised
    ("pages/1_Tokens_and_masking.py", {"tm_seed": "99999999999"}, "tm_seed", 2**31 - 1),
    ("pages/4_Predictions.py", {"pred_k": "100"}, "pred_k", 20),
    ("pages/7_How_BERT_computes.py", {"hbc_temperature": "nan"}, "hbc_temperature", 1.0),
    ("pages/7_How_BERT_computes.py", {"hbc_temperature": "50"}, "hbc_temperature", 5.0),
    ("pages/0_Lesson.py", {"step": "masking", "lesson_seed": "1e99"}, "lesson_seed", 2**31 - 1),
])
def test_every_page_holds_its_link_numbers_to_their_widgets(page, query, key, expected):
    at = _open(page, **query)
    assert at.session_state[key] == pytest.approx(expected)
    assert len(_toasts(at)) == (1 if query[key] == "nan" else 0)


# ------------------------------------------------------------------------------------- links that name nothing

UNKNOWN = "Zq" * 11     # the shape of a run's ids and a class's code (runs.new_token), given by no server


def _warnings(at) -> list[str]:
    return [str(w.value) for w in at.warning]   # the main area's and the sidebar's


@pytest.mark.parametrize("page, param, words", [
    ("pages/2_Train.py", "run", "names no run on this server"),
    ("pages/2_Train.py", "watch", "names no run on this server"),
    ("pages/3_Attention.py", "run", "names no run on this server"),      # the sidebar binds every page's run
    ("pages/5_Fine-tune.py", "ft", "names no race on this server"),
    ("pages/5_Fine-tune.py", "ftwatch", "names no race on this server"),
])
def test_a_run_or_race_link_that_names_nothing_says_so_at_once(page, param, words):
    at = _link(page, **{param: UNKNOWN})
    notes = _warnings(at)
    assert len([n for n in notes if words in n]) == 1, notes       # on the first drawing, not after a click
    assert not any("may have restarted" in n for n in notes)        # no guess
    assert param not in at.query_params                             # the address bar drops what names nothing
    at.run()
    assert not any(words in n for n in _warnings(at))               # said once


def test_a_dropped_or_lost_run_keeps_its_own_message():
    from bert_core.app import app_state

    app_state.RUNS._dropped.append("Dd" * 11)
    app_state.RUNS.mark_lost("Ll" * 11)
    assert any("was dropped" in n for n in _warnings(_link("pages/2_Train.py", run="Dd" * 11)))
    assert any("race of this link is gone" in n for n in _warnings(_link("pages/5_Fine-tune.py", ft="Dd" * 11)))
    lost = _warnings(_link("pages/5_Fine-tune.py", ftwatch="Ll" * 11))
    assert any("lost when the server restarted" in n and "new race on the Fine-tune page" in n for n in lost), lost


def test_a_race_link_given_as_a_run_link_names_the_page_it_belongs_to(monkeypatch):
    from bert_core.app import app_state
    from bert_core.serve import jobs
    from tests.race_stand_ins import race_spec
    from tests.stand_ins import StandInView

    class Done(StandInView):
        def run(self):
            self.state = "finished"

    monkeypatch.setenv(jobs.PROCESS_ENV, "0")   # a stand-in race trains on a thread (it cannot be pickled)
    race = app_state.RUNS.submit(race_spec(Done, kind="labels", data_label="toy", model_label="nano", models=2,
                                           budget_s=30), "someone")
    notes = _warnings(_link("pages/2_Train.py", watch=race.view_id))
    assert any("names a run of the Fine-tune page" in n for n in notes), notes


@pytest.mark.parametrize("page, key, raw, default, reason", [
    ("pages/2_Train.py", "train_corpus", "wikipedia-all", "toy", "no corpus of that name"),
    ("pages/2_Train.py", "train_preset", "huge", "nano", "no size of that name"),
    ("pages/2_Train.py", "train_objective", "gpt9", "mlm", "no such objective"),
    ("pages/5_Fine-tune.py", "ft_kind", "poems", "labels", "no such kind of task"),
    ("pages/1_Tokens_and_masking.py", "tm_mode", "dream", "draw", "no such choice"),
    ("pages/6_Export.py", "image_format", "gif", "png", "not png or svg"),
])
def test_a_choice_from_a_link_that_names_nothing_says_so(page, key, raw, default, reason):
    at = _link(page, **{key: raw})
    assert at.session_state[key] == default
    assert [t for t in _toasts(at) if f"`{key}`" in t and reason in t], _toasts(at)


@pytest.mark.parametrize("page, key, raw", [
    ("pages/2_Train.py", "train_corpus", "wikitext-2"),
    ("pages/2_Train.py", "train_preset", "mini"),
    ("pages/2_Train.py", "train_objective", "clm"),
    ("pages/5_Fine-tune.py", "ft_kind", "tags"),
    ("pages/1_Tokens_and_masking.py", "tm_mode", "type"),
    ("pages/6_Export.py", "image_format", "svg"),
])
def test_a_choice_from_a_link_that_names_one_is_taken_as_it_is(page, key, raw):
    # A choice whose list is a mapping (corpus -> label, kind -> its page) is its key, not what the key maps to.
    at = _link(page, **{key: raw})
    assert at.session_state[key] == raw and not _toasts(at), _toasts(at)


def test_the_lesson_classes_know_the_codes_that_ended():
    from bert_core.inspect import lesson
    from bert_core.app.lesson_classes import LessonClasses

    classes = LessonClasses(lesson.STEP_KEYS, limit=2)
    first, _ = classes.lead("tokens")
    second, _ = classes.lead("tokens")
    classes.close(second)
    assert classes.ended(second) and not classes.ended(first) and not classes.ended(UNKNOWN)
    classes.lead("tokens"), classes.lead("tokens")      # the oldest class is dropped beyond the limit
    assert classes.state(first) is None and classes.ended(first)


def test_a_class_link_that_names_nothing_says_so_and_an_ended_one_says_it_ended():
    from bert_core.app import app_state

    at = _link("pages/0_Lesson.py", follow=UNKNOWN)
    assert any("names no class on this server" in n for n in _warnings(at)), _warnings(at)
    assert not any("has ended" in str(c.value) for c in at.caption)
    code, _ = app_state.LESSON_CLASSES.lead("tokens")
    app_state.LESSON_CLASSES.close(code)
    at = _link("pages/0_Lesson.py", follow=code)
    assert any("has ended on this server" in str(c.value) for c in at.caption)
    assert not any("names no class" in n for n in _warnings(at))
    assert any("opens no class" in n for n in _warnings(_link("pages/0_Lesson.py", teach=UNKNOWN)))


def test_a_model_or_checkpoint_link_that_names_nothing_says_so(monkeypatch):
    from bert_core.app import app_models
    from bert_core.serve import model_sources

    at = _link("pages/3_Attention.py", model="nonsense")
    assert at.sidebar.radio(key="model_source").value == app_models.SOURCE_SHIPPED
    assert [t for t in _toasts(at) if "`model`" in t and "no model source" in t], _toasts(at)
    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(ROOT / "checkpoints" / "bert-tiny-english"))
    if len(model_sources.shipped_checkpoints()) < 2:
        pytest.skip("one shipped checkpoint: no ?ckpt= to read")
    at = _link("pages/3_Attention.py", ckpt="bert-huge-nonsense")
    assert at.sidebar.selectbox(key="model_shipped").value == "bert-tiny-english"
    assert [t for t in _toasts(at) if "`ckpt`" in t and "no shipped checkpoint" in t], _toasts(at)
    assert not _toasts(_link("pages/3_Attention.py", ckpt="gpt-tiny-english"))


# -------------------------------------------------------------------------------------- an upload's error, once

BAD_UPLOADS = {"binary": b"text,label\n\x00\x01\x02binary,1\n", "not UTF-8": b"text,label\n\xff\xfe caf\xe9,1\n",
               "too large": b"text,label\n" + b"a fine sentence,1\n" * 200, "empty": b""}


@pytest.fixture
def small_caps(monkeypatch):
    """Every upload's size limit at 1 kB, so that "too large" is a small file."""
    from bert_core.data import answer_spans_data, classification_data, corpora, token_tags_data
    from bert_core.serve import app_storage

    for module, name in ((corpora, "MAX_INPUT_BYTES"), (classification_data, "MAX_CSV_BYTES"),
                         (token_tags_data, "MAX_CONLL_BYTES"), (answer_spans_data, "MAX_SQUAD_BYTES")):
        monkeypatch.setattr(module, name, 1024)
    monkeypatch.setenv(app_storage.UPLOAD_CAP_ENV, str(1024 / 2**20))


def _one_error(at) -> str:
    assert not at.exception, [e.value for e in at.exception]
    errors = [str(e.value) for e in at.error]
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize("kind", list(BAD_UPLOADS))
def test_a_bad_corpus_upload_on_the_train_page_is_one_error(kind, small_caps):
    at = _link("pages/2_Train.py")
    at.selectbox(key="train_corpus").set_value("upload").run()
    at.file_uploader(key="train_upload").upload("notes.txt", BAD_UPLOADS[kind], "text/plain").run()
    at.button[0].click().run()
    _one_error(at)


@pytest.mark.parametrize("kind", list(BAD_UPLOADS))
@pytest.mark.parametrize("choice, key, name", [("upload", "ft_upload", "data.csv"),
                                               ("upload_conll", "ft_upload_conll", "tags.txt"),
                                               ("upload_squad", "ft_upload_squad", "questions.json")])
def test_a_bad_upload_on_the_fine_tune_page_is_one_error(kind, choice, key, name, small_caps):
    at = _link("pages/5_Fine-tune.py")
    at.radio(key="ft_kind").set_value({"upload": "labels", "upload_conll": "tags", "upload_squad": "spans"}[choice]).run()
    at.radio(key="ft_data").set_value(choice).run()
    at.file_uploader(key=key).upload(name, BAD_UPLOADS[kind], "text/plain").run()
    _one_error(at)
    at.run()                     # and on the next drawing still once
    _one_error(at)


@pytest.mark.parametrize("kind", list(BAD_UPLOADS))
def test_a_bad_checkpoint_upload_in_the_sidebar_is_one_error(kind, small_caps):
    from bert_core.app import app_models

    at = _link("pages/3_Attention.py")
    at.sidebar.radio(key="model_source").set_value(app_models.SOURCE_UPLOAD).run()
    at.sidebar.file_uploader(key="model_upload").upload("model.zip", BAD_UPLOADS[kind], "application/zip").run()
    _one_error(at)


def test_a_text_without_mask_is_one_error_with_a_second_model_beside(monkeypatch):
    """The second model's expander reads the same text: its fault was said twice."""
    from bert_core.serve import model_sources

    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(ROOT / "checkpoints" / "bert-tiny-english"))
    if not model_sources.checkpoints_beside_default(exclude=model_sources.default_checkpoint()):
        pytest.skip("no second checkpoint beside the shipped one")
    at = _link("pages/4_Predictions.py")
    at.text_area(key="pred_text").input("no mask in this text").run()
    assert "MASK" in _one_error(at)

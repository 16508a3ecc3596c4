"""Issue #64, point 9: the Train page and the run lists say what they do. The sidebar names a run that has no model
yet, the recipe line describes the fields on screen, the overlay shows the run just started, a BERT's and a GPT's
figures are never one column, a race's row shows the race's result, Reset says that the run leaves *My runs*, a
finished run's curves draw smoothed, and the page says before Start how much slower a bigger size's steps are."""

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bert_core.training import comparison, lesson_settings as settings, recipes
from bert_core.training.lesson_settings import lesson_settings

ROOT = Path(__file__).resolve().parent.parent


# -- plain functions -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("corpus, preset", [("toy", "nano"), ("toy", "mini"), ("wikitext-2", "nano"),
                                            ("wikitext-2", "mini")])
def test_the_recipe_line_names_the_rate_std_and_growth_the_fields_hold(corpus, preset):
    """The old line described the size's real-text recipe whatever the page showed: nano on toy read 'peak rate
    0.002, std 0.1' beside fields of 0.003 and 0.02; mini on toy described growth beside a growth slider at 0."""
    values = lesson_settings(corpus, preset)
    line = settings.settings_caption(values)
    assert f"peak learning rate {values['learning_rate']:g}," in line, line
    assert f"initial weight std {values['initializer_range']:g}," in line, line
    assert f"batch {values['batch_size']} x {values['max_seq_length']} tokens" in line, line
    assert ("grows to" in line) == bool(values["grow_fraction"]), line
    if values["grow_fraction"]:
        assert f"after {values['grow_fraction']:.0%} of the run" in line
    assert "except" not in line, "the starting settings are the size's own"


def test_the_recipe_line_follows_a_changed_field_and_says_it_was_changed():
    values = {**lesson_settings("toy", "nano"), "learning_rate": 0.005, "grow_fraction": 0.5}
    line = settings.settings_caption(values)
    assert "peak learning rate 0.005," in line and "0.003" not in line
    assert "grows to 2 x 64 after 50% of the run" in line
    assert "except the peak learning rate, growth share you set" in line, line
    # A GPT masks nothing: the line does not promise a mask rate.
    assert "mask rate" not in settings.settings_caption(lesson_settings("toy", "nano"), "clm")


def test_the_speed_before_start_is_the_measured_one_in_the_benchmarks():
    """'mini makes about a tenth of nano's steps a second' is said before Start, from step times that
    docs/benchmarks.md records for the Train page."""
    assert "mini makes about a tenth of nano's steps a second" in recipes.speed_note("mini")
    assert "small makes about a thirtieth of nano's steps a second" in recipes.speed_note("small")
    doc = " ".join((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").split())
    measured = re.search(r"a 2 x 64 step took ([\d.]+) s, a `mini` step ([\d.]+) s and a `small` step ([\d.]+) s",
                         doc)
    assert measured, "the Train page's step times are no longer in docs/benchmarks.md"
    assert [float(x) for x in measured.groups()] == [recipes.PAGE_STEP_S[p] for p in ("nano", "mini", "small")]


def _run(objective=None, acc=None, phase="finished"):
    train = {"objective": objective} if objective else {}
    spec = SimpleNamespace(train=train, model_overrides={}, preset="nano", corpus="toy", page="Train")
    evals = [SimpleNamespace(mlm_acc=acc)] if acc is not None else []
    return SimpleNamespace(spec=spec, phase=phase, trainer=SimpleNamespace(step=10, evals=evals))


def test_the_run_list_keeps_a_bert_and_a_gpt_figure_in_columns_of_their_own(monkeypatch):
    """A GPT's next-token accuracy (higher: the next token is easier to guess) in the same unnamed column as a
    BERT's masked-token accuracy read as a better model."""
    monkeypatch.setattr(comparison, "knob_diff", lambda a, b: [])
    monkeypatch.setattr(comparison, "other_differences", lambda a, b: [])
    bert, gpt = comparison.run_list_rows([_run(acc=0.52), _run("clm", 0.61)], ["run 1", "run 2"])
    masked, next_token = "held-out masked-token accuracy (BERT)", "held-out next-token accuracy (GPT)"
    assert bert[masked] == "52.0%" and bert[next_token] == "–"
    assert gpt[next_token] == "61.0%" and gpt[masked] == "–"
    assert not any(key == "held-out accuracy" for key in bert)
    only_bert = comparison.run_list_rows([_run(acc=0.5)], ["run 1"])[0]
    assert "held-out next-token accuracy (GPT)" not in only_bert   # no column of dashes for a task not run


def test_the_overlay_starts_with_the_new_run_and_the_one_it_changed():
    assert comparison.overlay_default(["a", "b", "c", "d", "e"], "e") == ["d", "e"]
    assert comparison.overlay_default(["a", "b", "c"], "b") == ["a", "b"]
    assert comparison.overlay_default(["a", "b", "c"], "new") == ["b", "c"]


def test_a_race_row_in_my_runs_shows_every_contender_not_the_pretrained_model_alone():
    from bert_core.serve import finetune_runs
    from bert_core.app.run_panel import _score, race_result

    def tuner(name, acc):
        return SimpleNamespace(name=name, evals=[SimpleNamespace(accuracy=acc, macro_f1=acc - 0.01)])

    race = SimpleNamespace(tuners=[tuner("tfidf", 0.742), tuner("pretrained", 0.716), tuner("scratch", 0.968)],
                           primary=None)
    said = race_result(race)
    assert said == "from pretrained 71.6%, from scratch 96.8%, TF-IDF + LR 74.2% accuracy", said
    run = SimpleNamespace(spec=SimpleNamespace(page=finetune_runs.FINETUNE_PAGE), trainer=race)
    assert "96.8%" in _score(run), "the race's winner is on its row"
    assert race_result(SimpleNamespace(tuners=[], primary=None)) == ""
    # A pretraining run's figure names its task.
    assert _score(_run("clm", 0.3)) == "30.0% next-token accuracy"
    assert _score(_run(acc=0.3)) == "30.0% masked-token accuracy"


def test_the_sidebar_names_a_preparing_run_and_what_it_will_offer():
    from bert_core.app.app_models import waiting_model_note

    said = waiting_model_note("preparing")
    assert "No model has been trained" not in said and "preparing" in said and "first step" in said
    assert "waiting for a slot" in waiting_model_note("queued")
    assert "No model has been trained" in waiting_model_note(None)


# -- the page (AppTest) ----------------------------------------------------------------------------------------

pytest.importorskip("streamlit")
from tests.test_app import (  # noqa: E402
    TIMEOUT,
    _app_env,  # noqa: F401  (the autouse fixture: every run a test starts ends with it)
    _assert_clean,
    _job,
    _open,
    _small_run,
    _texts,
    checkpoint,  # noqa: F401
)
from bert_core.app import app_models, app_state
from bert_core.serve import jobs  # noqa: E402


def _latest():
    return max(app_state.RUNS.runs(), key=lambda r: r.created)


@pytest.mark.slow
def test_the_recipe_line_on_the_page_describes_the_fields_on_screen():
    at = _open("pages/2_Train.py")
    for preset in ("nano", "mini"):
        at.selectbox(key="train_preset").set_value(preset).run()
        _assert_clean(at)
        lr, std = at.number_input(key="train_lr").value, at.number_input(key="train_init").value
        grow = at.slider(key="train_grow").value
        line = next(c.value for c in at.caption if c.value.startswith("Start uses:"))
        assert f"peak learning rate {lr:g}," in line and f"initial weight std {std:g}," in line, (preset, line)
        assert ("grows to" in line) == bool(grow), (preset, grow, line)
        # Before Start, the page says how slow a size's steps are.
        speed = [c.value for c in at.caption if "steps a second" in c.value or "the fastest size" in c.value]
        assert speed, preset
    assert "mini makes about a tenth of nano's steps a second" in speed[0]
    at.number_input(key="train_lr").set_value(0.0042).run()
    line = next(c.value for c in at.caption if c.value.startswith("Start uses:"))
    assert "peak learning rate 0.0042," in line and "you set" in line


@pytest.mark.slow
def test_a_queued_run_is_named_in_the_sidebar_not_called_no_model(monkeypatch):
    monkeypatch.setenv(jobs.MAX_TRAININGS_ENV, "1")
    first = _open("pages/2_Train.py")
    _small_run(first, steps=100_000)
    first.button[0].click().run()
    _job()
    second = _open("pages/2_Train.py")
    _small_run(second, steps=3)
    second.button[0].click().run()
    assert _latest().phase == "queued"
    second.sidebar.radio(key="model_source").set_value(app_models.SOURCE_SESSION).run()
    _assert_clean(second)
    said = _texts(second.sidebar.info)
    assert not any("No model has been trained" in t for t in said), said
    assert any("waiting for a slot" in t and "first step" in t for t in said), said


@pytest.mark.slow
def test_a_finished_run_draws_smoothed_even_when_the_live_view_was_raw():
    at = _open("pages/2_Train.py", train_smoothing="0.0")   # a link copied while a run trained with raw curves
    _small_run(at, steps=100_000)
    at.number_input(key="train_eval_every").set_value(0)
    at.button[0].click().run()
    run = _latest()
    job = _job()
    deadline = time.time() + TIMEOUT
    while (job.trainer is None or job.trainer.step < 2) and time.time() < deadline:
        time.sleep(0.05)
    at.run()
    assert at.slider(key="train_smoothing").value == 0.0   # the live view keeps what was asked for
    live_link = dict(at.query_params)
    at.button[1].click().run()                               # Stop
    at.run()
    _assert_clean(at)
    assert run.phase == "stopped"
    assert at.slider(key="train_smoothing").value == pytest.approx(0.9)   # the ended run's curves, smoothed
    assert '"opacity":0.25' in at.get("plotly_chart")[0].proto.spec.replace(" ", "")   # raw values faint behind
    # The live view's raw setting was never the link of the finished run: a reload of it draws smoothed too.
    assert "train_smoothing" not in live_link
    assert at.query_params["train_smoothing"] == "0.9"


@pytest.mark.slow
def test_reset_says_before_and_after_that_a_finished_run_leaves_my_runs():
    at = _open("pages/2_Train.py")
    _small_run(at, steps=3)
    at.button[0].click().run()
    run = _latest()
    _job().wait(TIMEOUT)
    at.run()
    at.toggle(key="my_runs_show").set_value(True).run()
    assert any(run.run_id in m.value for m in at.markdown)
    reset = next(b for b in at.button if b.label == "Reset")
    assert "My runs" in reset.help
    reset.click().run()
    _assert_clean(at)
    assert not any(run.run_id in m.value for m in at.markdown)
    assert any("no longer listed in *My runs*" in t and "finished at step 3" in t for t in _texts(at.info)), \
        _texts(at.info)


@pytest.mark.slow
def test_start_with_this_change_overlays_the_new_run_against_the_one_it_changed():
    """With three runs, each one change from the last, the overlay kept the first two: the third was not drawn and
    a reference several knobs away named them all. Now it starts with the new run against the run before it."""
    at = _open("pages/2_Train.py")
    _small_run(at, steps=3)
    at.button[0].click().run()
    _job().wait(TIMEOUT)
    for wanted in ("NSP on → off", "mask rate"):
        at.run()
        box = at.selectbox(key="train_one_change")
        pick = next(i for i, label in enumerate(box.options) if label.startswith(wanted))
        box.set_value(pick).run()
        at.button(key="train_one_change_go").click().run()
        _assert_clean(at)
        _job().wait(TIMEOUT)
    at.run()
    _assert_clean(at)
    overlay = [c for c in at.get("plotly_chart") if "reference" in c.proto.spec]
    assert len(overlay) == 1
    names = {t.get("name") for t in json.loads(overlay[0].proto.spec)["data"] if t.get("name")}
    assert any(n.startswith("run 3: mask rate") for n in names), names
    assert any(n.startswith("run 2: reference") for n in names), names
    assert not any(n.startswith("run 1") for n in names), names

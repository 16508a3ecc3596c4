"""The Streamlit explorer under `streamlit.testing.v1.AppTest`: every page renders, bad input gets a message,
a real (nano, toy corpus, few steps) training run goes through the Train page, and jobs of closed sessions stop."""

import os
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out
pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from bert_core.errors import BertCoreError  # noqa: E402
from bert_core.inspect import figures  # noqa: E402
from bert_core.inspect.safe_text import markdown  # noqa: E402
from bert_core.app import app_models, app_state
from bert_core.serve import job_base, jobs, model_sources, runs, thread_job
from tests.race_stand_ins import race_spec  # noqa: E402
from tests.stand_ins import StandInView  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "pages").glob("*.py"))
TIMEOUT = 120


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A real checkpoint folder: a nano BERT trained 3 steps on the toy corpus, with its trainer state."""
    from tests.app_fixtures import train_nano_checkpoint

    return train_nano_checkpoint(tmp_path_factory.mktemp("ckpt") / "nano-toy")


@pytest.fixture(autouse=True)
def _app_env(checkpoint, monkeypatch):
    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(checkpoint))
    monkeypatch.delenv(jobs.MAX_TRAININGS_ENV, raising=False)
    yield
    # End every run a test started, pretraining or fine-tuning, so none outlives it.
    for run in app_state.RUNS.runs():
        app_state.RUNS.discard(run.run_id, wait=30)


def _open(page: str = "app.py", **query) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    if page != "app.py":
        at.switch_page(page).run()
    return at


def _texts(elements) -> list[str]:
    return [str(e.value) for e in elements]


def _assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


@pytest.mark.parametrize("page", ["app.py", *PAGES])
def test_every_page_renders_without_exception_on_the_checkpoint(page):
    at = _open(page)
    _assert_clean(at)
    assert not at.error, _texts(at.error)
    assert at.title, "every page has a title"


def test_home_shows_architecture_and_where_the_model_came_from(checkpoint):
    at = _open()
    _assert_clean(at)
    described = [m.value for m in at.markdown if "Trained for 3 steps" in m.value]
    assert described and f"`{checkpoint.name}`" in described[0], described
    assert "on the toy grammar (generated)" in described[0]
    assert str(checkpoint.parent) not in described[0], "the server's folders are not the reader's business"


def test_missing_shipped_checkpoint_is_explained(monkeypatch, tmp_path):
    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(tmp_path / "absent"))
    for page in ["app.py", *PAGES]:
        at = _open(page)
        _assert_clean(at)
        assert any("not here yet" in t for t in _texts(at.sidebar.info)), page


@pytest.mark.parametrize("folder, message", [
    ("", "Type the path"),
    ("/definitely/not/here", "does not exist"),
    ("EMPTY", "not a checkpoint folder"),
    ("FILE", "is a file"),
])
def test_checkpoint_folder_choice_rejects_bad_folders_with_a_message(tmp_path, folder, message):
    if folder == "EMPTY":
        folder = str(tmp_path)
    elif folder == "FILE":
        (tmp_path / "x.txt").write_text("hi")
        folder = str(tmp_path / "x.txt")
    at = _open("pages/3_Attention.py")
    at.sidebar.radio(key="model_source").set_value(app_models.SOURCE_FOLDER).run()
    at.sidebar.text_input(key="model_folder").input(folder).run()
    _assert_clean(at)
    assert any(message in t for t in _texts(at.sidebar.error) + _texts(at.sidebar.info))


def test_checkpoint_folder_choice_loads_a_folder(checkpoint):
    at = _open("pages/4_Predictions.py")
    at.sidebar.radio(key="model_source").set_value(app_models.SOURCE_FOLDER).run()
    at.sidebar.text_input(key="model_folder").input(str(checkpoint)).run()
    _assert_clean(at)
    assert not at.error
    assert any("step 3" in c.value for c in at.sidebar.caption)


def test_a_grown_folder_fine_tunes_at_the_rate_its_source_learnt_at(checkpoint, tmp_path, capsys):
    """A folder `grow` wrote has no trainer state; its growth.json names the source's rate, and the Fine-tune page
    suggests that rate scaled to the grown width, not the size rule's fallback."""
    from bert_core.cli.main import main
    from bert_core.model.config import BertConfig
    from bert_core.training.finetune import checkpoint_pretraining_rate, finetune_learning_rate

    source = BertConfig.load(checkpoint)
    grown = tmp_path / "grown"
    assert main(["grow", "--checkpoint", str(checkpoint), "--hidden-size", str(4 * source.hidden_size), "--layers",
                 str(source.num_hidden_layers), "--out", str(grown)]) == 0
    wide = BertConfig.load(grown)
    rate = finetune_learning_rate(wide, checkpoint_pretraining_rate(checkpoint))
    assert rate != finetune_learning_rate(wide, None)
    at = _open("pages/5_Fine-tune.py")
    at.sidebar.radio(key="model_source").set_value(app_models.SOURCE_FOLDER).run()
    at.sidebar.text_input(key="model_folder").input(str(grown)).run()
    _assert_clean(at)
    assert at.number_input(key="ft_lr").value == pytest.approx(rate)


def test_predictions_without_mask_says_where_to_put_one():
    at = _open("pages/4_Predictions.py")
    at.text_area(key="pred_text").input("the cat sat on the mat").run()
    _assert_clean(at)
    assert any(markdown("no [MASK]") in t for t in _texts(at.error))


def test_predictions_text_longer_than_positions_is_truncated_with_a_note():
    at = _open("pages/4_Predictions.py")
    at.text_area(key="pred_text").input("the [MASK] sat " + "on the mat " * 60).run()
    _assert_clean(at)
    assert not at.error
    assert any("cut off" in t for t in _texts(at.warning))


def test_predictions_mask_a_picked_word_and_nsp_needs_two_sentences():
    at = _open("pages/4_Predictions.py")
    at.text_area(key="pred_text").input("the cat sat on the mat").run()
    at.selectbox(key="pred_pick").set_value(1).run()
    at.button[0].click().run()
    _assert_clean(at)
    text = at.text_area(key="pred_text").value
    assert text.startswith("the [MASK]") and text.endswith("sat on the mat")
    assert not at.error
    at.text_input(key="nsp_b").input("").run()
    assert any("sentence B is empty" in t for t in _texts(at.error))


def test_attention_bad_and_long_text_and_hidden_specials():
    at = _open("pages/3_Attention.py")
    at.text_area(key="att_a").input("   ").run()
    _assert_clean(at)
    assert any("empty" in t for t in _texts(at.error))
    at.text_area(key="att_a").input("the cat " * 60).run()
    _assert_clean(at)
    assert any("truncated" in t for t in _texts(at.warning))
    at.checkbox(key="att_hide").check().run()
    at.session_state["att_tab"] = "Head view"   # a lazy tab: only the open one runs
    at.run()
    at.selectbox(key="att_layer").set_value(2).run()
    at.selectbox(key="att_head").set_value(2).run()
    _assert_clean(at)
    assert not at.error


def test_attention_page_settings_come_from_and_go_to_the_url():
    at = _open("pages/3_Attention.py", att_a="a dog ran", att_layer="2", att_head="2", att_hide="true",
               att_tab="Head view")
    _assert_clean(at)
    assert at.text_area(key="att_a").value == "a dog ran"
    assert at.selectbox(key="att_layer").value == 2 and at.checkbox(key="att_hide").value is True
    at.selectbox(key="att_head").set_value(1).run()
    assert at.query_params["att_head"] == ["1"] or at.query_params["att_head"] == "1"
    assert at.query_params["att_tab"] in (["Head view"], "Head view")
    # Lazy tabs: the link opened Head view, and no other tab's widgets or figures were made.
    assert [c.key for c in at.selectbox] == ["att_layer", "att_head"], [c.key for c in at.selectbox]
    assert len(at.get("plotly_chart")) == 1


def test_tokens_page_typed_pair_and_drawn_pair():
    at = _open("pages/1_Tokens_and_masking.py")
    at.number_input(key="tm_pair_seed").set_value(7).run()
    at.slider(key="tm_rate").set_value(0.3).run()
    _assert_clean(at)
    assert any("NSP label" in m.value for m in at.markdown)
    at.radio(key="tm_mode").set_value("type").run()
    at.text_area(key="tm_a").input("").run()
    _assert_clean(at)
    assert any("empty" in t for t in _texts(at.error))


def _small_run(at: AppTest, steps: int = 4) -> None:
    at.number_input(key="train_steps").set_value(steps)
    at.number_input(key="train_batch").set_value(4)
    at.number_input(key="train_seq").set_value(32)
    at.number_input(key="train_vocab").set_value(300)
    at.number_input(key="train_eval_every").set_value(2)
    at.number_input(key="train_probe_every").set_value(2)


def _run():
    """The run started last (the tab's current one)."""
    runs = app_state.RUNS.runs()
    assert runs
    return max(runs, key=lambda r: r.created)


def _job():
    """The job of the run started last, once it has a slot and has been started (a job the scheduler has just
    created is 'new', and its wait() would return at once)."""
    run = _run()
    deadline = time.time() + TIMEOUT
    while (run.job is None or run.job.phase == "new") and time.time() < deadline:
        time.sleep(0.05)
    return run.job


def test_train_page_runs_a_real_training_and_other_pages_follow_it():
    at = _open("pages/2_Train.py")
    assert any(c.value.startswith("Runs train on this server's CPU") for c in at.caption)  # where runs train
    _small_run(at)
    at.button[0].click().run()          # Start
    _assert_clean(at)
    assert not at.error, _texts(at.error)
    job = _job()
    job.wait(TIMEOUT)
    assert job.phase == "finished", job.error
    assert job.trainer.step == 4 and len(job.trainer.history) == 4 and len(job.trainer.evals) >= 2
    assert len(job.trainer.probes) >= 2
    at.run()
    _assert_clean(at)
    assert any("finished at step 4" in t for t in _texts(at.success))
    assert len(at.get("plotly_chart")) >= 4
    assert any(p.proto.text.endswith(" · on the CPU") for p in at.get("progress"))   # where this run trained
    # What each change bought, as measured, with this tab's runs beside it (this one differs in its steps).
    tricks = next(t.value for t in at.table if "measured, seeds 0 / 1 / 2" in t.value.columns)
    assert tricks.iloc[0]["your run"].startswith("run 1: ") and "steps 2000 → 4" in tricks.iloc[0]["your run"]
    # The training curves are smoothed by default, the raw values drawn faintly behind; 0 shows the raw alone.
    assert at.slider(key="train_smoothing").value == figures.DEFAULT_SMOOTHING
    assert '"opacity":0.25' in at.get("plotly_chart")[0].proto.spec.replace(" ", "")
    at.slider(key="train_smoothing").set_value(0.0).run()
    _assert_clean(at)
    assert '"opacity":0.25' not in at.get("plotly_chart")[0].proto.spec.replace(" ", "")
    # A finished run has nothing to resume (its learning rate has decayed to zero): the page says so and offers a
    # new run from its weights, with a fresh schedule, instead of silently starting the warmup again.
    assert at.button[2].disabled
    assert any("This run has finished" in m.value and "fresh optimizer" in m.value for m in at.markdown)
    at.button(key="train_continue").click().run()
    _assert_clean(at)
    assert not at.error, _texts(at.error)
    again = _job()
    assert again is not job
    again.wait(TIMEOUT)
    assert again.phase == "finished" and again.trainer.step == 4, again.error
    # It starts where the first run ended: the same weights score the same on the same held-out batches.
    assert again.trainer.evals[0].mlm_loss == pytest.approx(job.trainer.evals[-1].mlm_loss, rel=1e-4)
    assert again.trainer.metadata["init_from"]["step"] == 4
    job = again
    at.run()
    # The session's model becomes the active one everywhere.
    at.sidebar.radio(key="model_source").set_value(app_models.SOURCE_SESSION).run()
    for page in ["pages/3_Attention.py", "pages/4_Predictions.py", "pages/1_Tokens_and_masking.py",
                 "pages/6_Export.py", "pages/7_How_BERT_computes.py", "app.py"]:
        at.switch_page(page).run()
        _assert_clean(at)
        assert not at.error, (page, _texts(at.error))
        assert any("step 4" in c.value for c in at.sidebar.caption), page
    at.switch_page("pages/3_Attention.py")
    at.session_state["att_tab"] = "Time-lapse"
    at.run()
    assert at.select_slider(key="att_step").value == 4
    at.select_slider(key="att_step").set_value(0).run()
    _assert_clean(at)
    at.switch_page("pages/6_Export.py").run()
    assert any("4 steps" in b.label for b in at.get("download_button"))
    at.switch_page("pages/2_Train.py").run()
    at.button[4].click().run()          # Prepare download
    _assert_clean(at)
    assert any("Download checkpoint (step 4" in b.label for b in at.get("download_button"))
    # A new Start drops the previous run's download at once.
    at.button[0].click().run()
    assert not any("Download checkpoint" in b.label for b in at.get("download_button"))
    _job().wait(TIMEOUT)
    at.run()
    last = _run()
    at.button[3].click().run()          # Reset
    assert app_state.RUNS.get(last.run_id) is None


def test_train_page_probes_come_from_the_held_out_corpus_and_follow_it_until_edited():
    from bert_core.inspect.probes import probes_for_corpus
    from tests.toy_words import toy_vocabulary

    at = _open("pages/2_Train.py")
    _assert_clean(at)
    shown = at.text_area(key="train_probes").value.splitlines()
    assert shown == list(probes_for_corpus("toy", 0).sentences) and len(shown) == 4
    vocab = toy_vocabulary()
    for sentence in shown:
        assert "[MASK]" in sentence
        words = [w.strip(".,").lower() for w in sentence.replace("[MASK]", " ").split() if w.strip(".,")]
        assert set(words) <= vocab, set(words) - vocab
    at.number_input(key="train_seed").set_value(1).run()
    assert at.text_area(key="train_probes").value.splitlines() == list(probes_for_corpus("toy", 1).sentences)
    mine = "the farmer feeds the [MASK] .\nmy own [MASK] sentence"
    at.text_area(key="train_probes").input(mine).run()
    at.number_input(key="train_seed").set_value(2).run()
    assert at.text_area(key="train_probes").value == mine  # what the student typed stays
    at.text_area(key="train_probes").input("no blank here").run()
    _small_run(at, steps=1)
    at.button[0].click().run()
    assert any(markdown("no [MASK]") in t for t in _texts(at.error)), _texts(at.error)
    assert not app_state.RUNS.runs()


def test_stop_ends_the_run_early_and_resume_continues():
    at = _open("pages/2_Train.py")
    _small_run(at, steps=100_000)
    at.button[0].click().run()
    job = _job()
    deadline = time.time() + TIMEOUT
    while (job.trainer is None or job.trainer.step < 2) and time.time() < deadline:
        time.sleep(0.2)
    at.run()
    at.button[1].click().run()          # Stop
    _assert_clean(at)
    assert not job.busy and job.phase == "stopped"
    stopped_at = job.trainer.step
    assert 2 <= stopped_at < 100_000
    at.button[2].click().run()          # Resume
    assert job.busy
    job.stop(wait=TIMEOUT)
    assert job.trainer.step >= stopped_at


@pytest.mark.parametrize("setup, message", [
    ({"train_preset": "custom", "train_hidden": 64, "train_heads": 3}, "divisible"),
    ({"train_corpus": "paste"}, "empty"),
])
def test_train_page_rejects_bad_configs_with_a_message(setup, message):
    at = _open("pages/2_Train.py")
    _small_run(at, steps=1)
    for key, value in setup.items():
        if key in ("train_preset", "train_corpus"):
            at.selectbox(key=key).set_value(value).run()
        else:
            at.number_input(key=key).set_value(value).run()
    at.button[0].click().run()
    _assert_clean(at)
    assert any(message in t for t in _texts(at.error)), _texts(at.error)
    assert not app_state.RUNS.runs(), "no run starts on a rejected config"


@pytest.mark.parametrize("content, message", [(b"", "empty"), (b"\x00\x01\x02binary", "binary"),
                                              (b"\xff\xfe caf\xe9", "not UTF-8")])
def test_train_page_bad_upload_gets_a_message(content, message):
    at = _open("pages/2_Train.py")
    at.selectbox(key="train_corpus").set_value("upload").run()
    at.file_uploader(key="train_upload").upload("notes.txt", content, "text/plain").run()
    at.button[0].click().run()
    _assert_clean(at)
    assert any(message in t for t in _texts(at.error)), _texts(at.error)
    assert not app_state.RUNS.runs()


def test_a_start_beyond_the_slots_is_queued_and_runs_when_a_slot_frees(monkeypatch):
    monkeypatch.setenv(jobs.MAX_TRAININGS_ENV, "1")
    monkeypatch.setenv(jobs.PROCESS_ENV, "0")   # the blocking race below runs on a thread (it cannot be pickled)
    release = threading.Event()

    class Blocking(StandInView):
        def run(self):
            release.wait(TIMEOUT)
            self.state = "finished"

        def stop(self):
            release.set()

    # The one slot is taken by someone's fine-tuning race: one queue for every training.
    race = race_spec(Blocking, kind="labels", data_label="toy", model_label="nano", models=2,
                                  budget_s=30)
    other = app_state.RUNS.submit(race, "someone-else")
    try:
        at = _open("pages/2_Train.py")
        _small_run(at, steps=2)
        at.button[0].click().run()              # Start: answered at once, as queued
        _assert_clean(at)
        assert not at.error, _texts(at.error)
        run = _run()
        assert other.job.error is None and other.job.busy, other.job.error   # the race holds the slot
        assert run.phase == "queued" and run.job is None
        assert any("Queued" in t and "0 run(s) ahead" in t for t in _texts(at.info)), _texts(at.info)
        assert any("at a time" in c.value for c in at.caption)   # the sharing policy is on the page
        release.set()                           # the other training ends: the queued run starts by itself
        job = _job()
        assert job.wait(TIMEOUT) and job.phase == "finished", job.error
    finally:
        app_state.RUNS.discard(other.run_id)
    assert not other.job.busy


def test_a_reload_finds_the_run_again_and_a_share_link_watches_without_steering():
    at = _open("pages/2_Train.py")
    _small_run(at, steps=3)
    at.button[0].click().run()
    run = _run()
    assert at.query_params["run"] == run.run_id   # the address bar holds the run
    _job().wait(TIMEOUT)
    # A reload is a new session with the same URL: it comes back to the same run, finished, with its curves.
    again = _open("pages/2_Train.py", run=run.run_id)
    _assert_clean(again)
    assert any("finished at step 3" in t for t in _texts(again.success))
    assert len(again.get("plotly_chart")) >= 4
    assert not again.button[3].disabled          # its owner may reset it
    # A share link: the same run, watched; Stop, Resume and Reset are off, and the sidebar's model is the run's.
    viewer = _open("pages/2_Train.py", watch=run.view_id)
    _assert_clean(viewer)
    assert any("watching a shared run" in t for t in _texts(viewer.info))
    assert viewer.button[1].disabled and viewer.button[2].disabled and viewer.button[3].disabled
    assert viewer.sidebar.radio(key="model_source").value == app_models.SOURCE_SESSION
    assert any("step 3" in c.value for c in viewer.sidebar.caption)
    assert viewer.query_params["watch"] == run.view_id and "run" not in viewer.query_params
    with pytest.raises(BertCoreError):
        app_state.RUNS.stop(run.view_id)         # the share id gives no control
    # A link to a run the server no longer has is a message, not a traceback.
    app_state.RUNS.discard(run.run_id)
    gone = _open("app.py", run=run.run_id)
    _assert_clean(gone)
    assert any("names no run on this server" in t for t in _texts(gone.sidebar.warning))


def test_session_liveness_reads_the_streamlit_runtime_when_one_runs():
    # Outside `streamlit run` there is no runtime: liveness is unknown, so nothing is ever reaped on a guess.
    from bert_core.app.app_state import session_alive_from_runtime

    assert session_alive_from_runtime("whatever") is None


def test_model_snapshot_is_a_frozen_copy(checkpoint):
    model, tok, _ = model_sources.load_folder(checkpoint)
    model.train()

    class T:
        step = 5
        tokenizer = tok
        _step_lock = threading.RLock()   # a Trainer's (run_loop.RunLoop): held during an update

    T.model = model
    job = thread_job.TrainingJob("snap", builder=lambda: None)
    job.trainer = T()
    snap = job.model_snapshot()
    assert snap is not model and not snap.training and model.training
    assert job.model_snapshot() is snap
    T.step = 6
    assert job.model_snapshot() is not snap


def test_a_training_runs_copy_is_shared_for_a_while_and_its_last_step_once_it_ends(checkpoint, monkeypatch):
    """While a run trains, every page looking at it gets the same copy of its weights for SNAPSHOT_EVERY_S (a copy
    per page view, and each page's cached computations keyed by it, made a class of viewers redo them all); a run
    that is not training gets the copy of its last step at once."""
    from bert_core.serve import job_base

    model, tok, _ = model_sources.load_folder(checkpoint)

    class T:
        step = 5
        tokenizer = tok
        _step_lock = threading.RLock()

    T.model = model
    training = [True]
    monkeypatch.setattr(thread_job.TrainingJob, "busy", property(lambda self: training[0]))
    job = thread_job.TrainingJob("snap", builder=lambda: None)
    job.trainer = T()
    monkeypatch.setattr(job_base, "SNAPSHOT_EVERY_S", 1e9)   # a copy never too old: shared whatever the clock says
    snap = job.model_snapshot()
    T.step = 9
    assert job.model_snapshot() is snap and job.snapshot_step == 5
    monkeypatch.setattr(job_base, "SNAPSHOT_EVERY_S", 0.0)   # always too old: a new copy
    newer = job.model_snapshot()
    assert newer is not snap and job.snapshot_step == 9
    monkeypatch.setattr(job_base, "SNAPSHOT_EVERY_S", 1e9)
    T.step, training[0] = 12, False                           # it ended: its last step's weights, not a copy of 9
    assert job.model_snapshot() is not newer and job.snapshot_step == 12


def test_env_var_limit_parsing(monkeypatch):
    monkeypatch.setenv(jobs.MAX_TRAININGS_ENV, "3")
    assert runs.default_slots() == 3
    monkeypatch.setenv(jobs.MAX_TRAININGS_ENV, "lots")
    # The default: one run per core, one core left for the web server (one run on a 2-vCPU Space), one thread each.
    assert runs.default_slots() == max(1, (os.cpu_count() or 1) - 1)
    monkeypatch.delenv(job_base.THREADS_ENV, raising=False)
    assert job_base.training_threads() == 1
    assert os.environ[model_sources.CHECKPOINT_ENV]


def test_live_charts_redraw_less_often_than_the_numbers(monkeypatch):
    monkeypatch.delenv(app_state.CHART_POLL_ENV, raising=False)
    monkeypatch.setenv(app_state.POLL_ENV, "2")
    assert app_state.chart_poll_seconds() == 6
    monkeypatch.setenv(app_state.CHART_POLL_ENV, "2")
    assert app_state.chart_poll_seconds() == 2
    monkeypatch.setenv(app_state.CHART_POLL_ENV, "0.1")  # never faster than the numbers
    assert app_state.chart_poll_seconds() == 2
    monkeypatch.setenv(app_state.CHART_POLL_ENV, "often")
    assert app_state.chart_poll_seconds() == 6


def test_a_page_run_on_its_own_draws_without_the_page_list():
    at = AppTest.from_file(str(ROOT / "pages" / "4_Predictions.py"), default_timeout=TIMEOUT).run()
    _assert_clean(at)
    assert at.title


@pytest.mark.long  # a long check (`--long`): two real runs
def test_try_one_change_starts_a_run_differing_in_that_knob_and_the_overlay_names_it():
    from bert_core.training import comparison

    at = _open("pages/2_Train.py")
    _small_run(at, steps=3)
    at.button[0].click().run()
    first = _run()
    _job().wait(TIMEOUT)
    at.run()
    _assert_clean(at)
    box = at.selectbox(key="train_one_change")
    nsp = next(i for i, label in enumerate(box.options) if label.startswith("NSP on → off"))
    box.set_value(nsp).run()
    at.button(key="train_one_change_go").click().run()
    _assert_clean(at)
    assert not at.error, _texts(at.error)
    second = _run()
    assert second is not first and app_state.RUNS.family(second) == [first, second]
    assert [c.knob for c in comparison.knob_diff(first.spec, second.spec)] == ["nsp"]
    assert comparison.other_differences(first.spec, second.spec) == []
    # The settings now show the new run's, and so does the command that repeats it (issue #29).
    assert at.checkbox(key="train_nsp").value is False
    assert "--no-nsp" in at.code[0].value, at.code[0].value
    _job().wait(TIMEOUT)
    at.run()
    _assert_clean(at)
    overlay = [c for c in at.get("plotly_chart") if "reference" in c.proto.spec]
    import json

    assert len(overlay) == 1
    names = {t.get("name") for t in json.loads(overlay[0].proto.spec)["data"]}
    assert {"run 1: reference (NSP on)", "run 2: NSP on → off"} <= names, names
    # The run list: each run, and how it differs from the one before it.
    listed = next(t.value for t in at.table if "change from the run before" in t.value.columns)   # the run list
    assert list(listed["run"]) == ["run 1", "run 2"]
    assert list(listed["change from the run before"]) == ["first run", "NSP on → off"]
    # The first run's checkpoint went to its folder when the second started: Attention can set it beside a model.
    deadline = time.time() + TIMEOUT
    while getattr(first.job, "released", None) is None and time.time() < deadline:
        time.sleep(0.1)
    at.switch_page("pages/3_Attention.py")
    at.session_state["att_tab"] = "Side by side"
    at.run()
    _assert_clean(at)
    assert "run 1 of this tab" in at.selectbox(key="att_other").options
    at.selectbox(key="att_other").set_value("run 1 of this tab").run()
    _assert_clean(at)
    assert not at.error, _texts(at.error)
    # Predictions sets it beside the active model too, for the same [MASK] text.
    at.switch_page("pages/4_Predictions.py").run()
    _assert_clean(at)
    at.selectbox(key="pred_other").set_value("run 1 of this tab").run()
    _assert_clean(at)
    assert not at.error, _texts(at.error)
    assert any("run 1 of this tab: [MASK] 1" in c.proto.spec for c in at.get("plotly_chart"))


@pytest.mark.parametrize("checkpoint_kept", [False, True])
def test_a_killed_run_is_told_plainly_on_every_page_and_offers_only_what_works(checkpoint_kept, monkeypatch):
    """Issue #34: a run whose training process is killed after its first steps. With no checkpoint past step 0
    (issue #61: the one written before the first update holds untrained weights), every page names its model as
    lost, in words, and no action that needs the model is offered; with a periodic checkpoint of a later step,
    the model of that step is offered and labelled with it. No page shows a Python exception, and the run's clock
    has stopped."""
    import json
    import signal

    from bert_core.serve import job_factory

    if checkpoint_kept:   # a periodic checkpoint at once, not after a minute
        monkeypatch.setattr(job_factory, "CHECKPOINT_EVERY_S", 0.05)
    at = _open("pages/2_Train.py")
    _small_run(at, steps=100_000)
    at.number_input(key="train_eval_every").set_value(0)
    at.number_input(key="train_probe_every").set_value(0)
    at.button[0].click().run()
    run = _run()
    job = _job()
    deadline = time.time() + TIMEOUT
    while (job.trainer is None or job.trainer.step < 3) and time.time() < deadline:
        time.sleep(0.05)
    state = app_state.RECORDS.checkpoint_for(run.run_id) / "trainer_state.json"
    written = 0
    while checkpoint_kept and written == 0 and time.time() < deadline:
        try:
            written = json.loads(state.read_text())["step"]
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    os.kill(job.process.pid, signal.SIGKILL)
    deadline = time.time() + TIMEOUT
    while not (run.phase == "failed" and run.released) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)   # the release's thread finishes
    train = _open("pages/2_Train.py", run=run.run_id)
    _assert_clean(train)
    assert any("exit code -9" in t for t in _texts(train.error))
    said = _texts(train.warning) + _texts(train.info)
    download = next(b for b in train.button if b.label == "Prepare download")
    labels = [b.label for b in train.button]
    if checkpoint_kept:
        assert any(f"The model of step {job.kept_step:,}" in t for t in said) and job.kept_step > 0, said
        assert not download.disabled and any(label.startswith("Train on from these weights") for label in labels)
    else:
        assert any("This run's model is lost" in t for t in said), said
        assert download.disabled and not any(label.startswith("Train on from these weights") for label in labels)
        assert not any(e.label == "Save this run on the server" for e in train.expander)
    assert not any("time left" in str(p.value) for p in train.get("progress"))
    for page in ("pages/3_Attention.py", "pages/4_Predictions.py"):
        other = _open(page, run=run.run_id, model="session")
        _assert_clean(other)
        sidebar = _texts(other.sidebar.info) + _texts(other.sidebar.caption)
        assert not other.sidebar.error, _texts(other.sidebar.error)
        if checkpoint_kept:
            assert any(f"step {job.kept_step:,}" in t for t in sidebar), sidebar
        else:
            assert any("This run's model is lost" in t for t in sidebar), sidebar

"""A fine-tuning race on the pretraining runs' road (issue #61): one plain-data spec and one builder for the CLI and
the page, races recorded and brought back after a server restart (finished with their curves, confusion matrices
and models; running as stopped by the restart), and the two fault paths of a run's record (a full disk; a run that
kept only its untrained step-0 weights)."""

import dataclasses
import errno
import json
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.race_stand_ins import builder_of
from bert_core.cli.main import main
from bert_core.data.classification_data import toy_order_task
from bert_core.model.bert import BertForPreTraining
from bert_core.model.checkpoint import save_checkpoint
from bert_core.model.config import BertConfig
from bert_core.model.hf import load_pretrained
from bert_core.model.tokenization import BertTokenizer, train_tokenizer
from bert_core.serve import job_factory, jobs, run_records, runs
from bert_core.serve.finetune_runs import restoring
from bert_core.serve.run_records import RunRecords
from bert_core.serve.run_registry import Run
from bert_core.training.finetune import result_probabilities
from tests.page_races import build_comparison
from bert_core.training.finetune_checkpoint import checkpoint_of
from bert_core.training.finetune_race import build_race
from bert_core.training.finetune_settings import page_settings
from bert_core.training.finetune_spec import FinetuneSpec, RaceData
from bert_core.training.kept_race import TRAINING, keep_race, read_race
from bert_core.training.finetune_results import FinetuneStep
from bert_core.training.race_view import TunerView
from tests.test_runs import _until  # a polling wait
from tests.test_toy_qa_drills import _staged_task, tiny  # noqa: F401  (fixture: a nano config and its tokenizer)

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py)

WIDGETS = dict(train=48, val=24, seed=0, steps=3, budget=300, lr=1e-3, batch=16, maxlen=32)


def _settings(widgets: dict) -> dict:
    """The race's settings from the page's widgets (keyed `ft_<name>` there)."""
    return page_settings({f"ft_{name}": value for name, value in widgets.items()})


def save_nano(folder):
    """A nano BERT checkpoint folder with a tokenizer trained on the toy stories (untrained weights)."""
    data = toy_order_task(seed=0, num_examples=200)
    tokenizer = train_tokenizer(data.texts, vocab_size=300)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=tokenizer.vocab_size, max_position_embeddings=64))
    return save_checkpoint(folder, model, tokenizer=tokenizer)


@pytest.fixture(scope="module")
def nano_folder(tmp_path_factory):
    return save_nano(tmp_path_factory.mktemp("nano") / "nano")


def _page_spec(folder, keep_in=None, **kw) -> FinetuneSpec:
    """The page's race on the lesson's data, as the page makes it (finetune_settings.page_settings)."""
    return FinetuneSpec(kind="labels", data=RaceData(task="toy-order"), checkpoint=str(folder),
                        settings=_settings(WIDGETS), train_size=WIDGETS["train"], val_size=WIDGETS["val"],
                        data_label="toy word order", model_label="nano", keep_in=keep_in, **kw)


def test_the_cli_and_the_pages_race_give_the_same_weights_bit_for_bit(nano_folder, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["finetune", "--checkpoint", str(nano_folder), "--task", "toy-order", "--steps", "3",
                 "--train-size", "48", "--val-size", "24", "--lr", "1e-3", "--batch-size", "16", "--max-length", "32",
                 "--compare-scratch", "--out", str(out)]) == 0
    race = build_race(_page_spec(nano_folder))
    race.run()
    assert race.state == "finished"
    for name, folder in (("pretrained", out), ("scratch", out / "from-scratch")):
        saved = load_file(folder / "model.safetensors")
        mine = race.results[name].model.state_dict()
        assert saved.keys() <= mine.keys()
        assert all(torch.equal(saved[k], mine[k]) for k in saved), name
    # ... and the page's race before the spec (a closure over the live model) gave these same weights.
    model = load_pretrained(nano_folder)
    old = build_comparison(toy_order_task(0), model, BertTokenizer.load(nano_folder), dict(WIDGETS))
    old.run()
    for name in ("pretrained", "scratch"):
        a, b = old.results[name].model.state_dict(), race.results[name].model.state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a), name


def _store(records, **kw):
    def factory(run):
        return job_factory.finetune_job(run.run_id, builder_of(run.spec), device=run.device)

    return runs.RunStore(factory, slots=lambda: 1, poll_s=0.02, records=records,
                         restore_job=lambda *a: pytest.fail("a race is restored by finetune_runs"), **kw)


def test_a_finished_race_comes_back_after_a_restart_with_its_curves_matrices_and_models(nano_folder, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.setenv(jobs.PROCESS_ENV, "0")   # on a server thread: this test needs no process
    records = RunRecords(tmp_path / "state")
    store = _store(records)
    run_id = runs.new_token()
    try:
        run = store.submit(_page_spec(nano_folder, keep_in=str(records.checkpoint_for(run_id)), baseline=True), "s1",
                           run_id=run_id, visitor="browser-1")
        _until(lambda: run.phase == "finished" and run.recorded_phase == "finished", "the race is recorded")
        live = run.job.trainer.results
        sentence = "the farmer went to the barn"
        before = {n: result_probabilities(r, sentence) for n, r in live.items()}
    finally:
        store.close()
    # A new server process on the same state folder.
    again = _store(records)
    try:
        back = again.get(run_id)
        assert back is not None and back.phase == "finished" and back.spec == run.spec
        assert again.by_view(run.view_id) is back and [r for r, _ in again.visited("browser-1")] == [back]
        race = back.trainer
        assert [t.name for t in race.tuners] == ["tfidf", "pretrained", "scratch"]   # the baseline is fitted first
        tuned = {t.name: t for t in race.tuners}
        assert all(t.evals for t in race.tuners) and tuned["pretrained"].evals == live["pretrained"].evals
        results = race.results
        assert set(results) == {"pretrained", "scratch", "tfidf"}
        for name, result in results.items():   # the bag of words too: its fitted model was kept, not just its figures
            assert result.confusion == live[name].confusion and result.accuracy == live[name].accuracy
            assert result_probabilities(result, sentence) == before[name], name
        assert results["tfidf"].tokenizer is None and results["pretrained"].tokenizer is not None
        assert len(race.val_data) == WIDGETS["val"]   # the split, made again from the spec
    finally:
        again.close()


def test_a_race_running_at_the_restart_comes_back_as_stopped_with_what_it_kept(nano_folder, tmp_path):
    records = RunRecords(tmp_path / "state")
    spec = _page_spec(nano_folder)
    race = build_race(spec)
    race.on_model_end = race.pause   # the scratch twin never runs: the restart came after the first model
    race.run()
    run = Run(run_id="r1", view_id="v1", family="r1", spec=spec, queued=False)
    run.job = type("Job", (), {"phase": "running", "error": None, "ended_note": None, "trainer": race})()
    assert records.write(run, "running", race.step)
    keep_race(race, records.checkpoint_for("r1"))
    store = _store(records)
    try:
        back = store.get("r1")
        assert back is not None and back.phase == "stopped" and "server restart" in back.note
        assert "1 of its models" in back.note
        assert list(back.trainer.results) == ["pretrained"] and back.trainer.results["pretrained"].model is not None
    finally:
        store.close()
    # One that had ended none of its models: it says nothing was kept.
    records.remove("r1")
    assert records.write(run, "running", 0)
    store = _store(records)
    try:
        back = store.get("r1")
        assert back.phase == "stopped" and "nothing of it was kept" in back.note and back.trainer.tuners == []
    finally:
        store.close()


def test_a_record_a_full_disk_refuses_says_a_restart_would_lose_the_run_and_is_written_once_there_is_room(
        nano_folder, tmp_path, monkeypatch):
    records = RunRecords(tmp_path / "state")
    run = Run(run_id="r2", view_id="v2", family="r2", spec=_page_spec(nano_folder), queued=False)
    run.job = type("Job", (), {"phase": "finished", "error": None, "ended_note": None, "trainer": None})()
    real = run_records._write_json

    def full(path, obj):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run_records, "_write_json", full)
    assert not records.write(run, "finished", 3)
    assert "would be lost if the server restarted" in run.record_failed and "nothing is lost" not in run.record_failed
    now = time.monotonic()
    assert not records.due(run, now) and records.due(run, now + run_records.RECORD_RETRY_S + 1)
    monkeypatch.setattr(run_records, "_write_json", real)
    assert records.write(run, "finished", 3) and run.record_failed is None
    assert json.loads((records.folder_for("r2") / "run.json").read_text())["phase"] == "finished"


def test_a_run_that_kept_only_its_untrained_step_0_weights_says_nothing_was_kept(tmp_path):
    records = RunRecords(tmp_path / "state")
    tokenizer = train_tokenizer(toy_order_task(0, num_examples=50).texts, vocab_size=200)
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=tokenizer.vocab_size, max_position_embeddings=64))
    checkpoint = records.checkpoint_for("r3")
    save_checkpoint(checkpoint, model, tokenizer=tokenizer, trainer_state={"step": 0})
    with pytest.raises(FileNotFoundError, match="step 0"):
        records.kept({"run_id": "r3", "phase": "running", "page": "Train"}, checkpoint)
    record = {"format": run_records.FORMAT, "run_id": "r3", "view_id": "v3", "page": "Train", "phase": "running",
              "spec": {}, "created": 1.0}
    (records.folder_for("r3") / "run.json").write_text(json.dumps(record))
    store = runs.RunStore(lambda run: None, slots=lambda: 1, records=records,
                          restore_job=restoring(lambda *a: pytest.fail("nothing to restore")))
    try:
        assert store.get("r3") is None and store.was_lost("r3") and store.was_lost("v3")
    finally:
        store.close()


def test_a_figure_that_is_not_a_number_is_kept_and_read_back(nano_folder, tmp_path):
    """JSON has no NaN: a race whose loss or F1 is NaN (a tagger's first evaluation can give one) is kept all the
    same, and reads back as NaN, its other figures unchanged."""
    import dataclasses
    import math


    spec = _page_spec(nano_folder)
    race = build_race(spec)
    race.run()
    first = race.results["pretrained"]
    first.loss = float("nan")
    first.details = {**first.details, "f1": float("inf")}
    first.evals[0] = dataclasses.replace(first.evals[0], loss=float("nan"))
    back = read_race(spec, keep_race(race, tmp_path / "kept"), "finished")
    kept = back.results["pretrained"]
    assert math.isnan(kept.loss) and kept.details["f1"] == float("inf") and kept.accuracy == first.accuracy
    assert math.isnan(kept.evals[0].loss) and kept.evals[1:] == first.evals[1:]


def test_a_race_kept_before_nan_was_written_plainly_reads_back(nano_folder, tmp_path):
    """Races kept before 2026-11-29 wrote a NaN as {"__float__": "nan"}: a server brought up to date reads them as
    the figures they were, not as dicts in place of numbers."""
    import json
    import math

    from bert_core.training.kept_race import KEPT_FILE

    spec = _page_spec(nano_folder)
    race = build_race(spec)
    race.run()
    race.results["pretrained"].loss = float("nan")
    folder = keep_race(race, tmp_path / "kept")
    text = (folder / KEPT_FILE).read_text(encoding="utf-8")
    assert "NaN" in text
    (folder / KEPT_FILE).write_text(text.replace("NaN", '{"__float__": "nan"}'), encoding="utf-8")
    json.loads((folder / KEPT_FILE).read_text(encoding="utf-8"))   # the old form is plain JSON
    kept = read_race(spec, folder, "finished").results["pretrained"]
    assert isinstance(kept.loss, float) and math.isnan(kept.loss)


def _weights(result) -> dict:
    return {k: v.detach().cpu() for k, v in result.model.state_dict().items()}


def _same_race(resumed, whole) -> None:
    """Every model of `resumed` has the weights, figures and curve of `whole`'s, bit for bit (the seconds aside)."""
    assert list(resumed.results) == list(whole.results) and resumed.state == whole.state == "finished"
    for name, expected in whole.results.items():
        got = resumed.results[name]
        mine, theirs = _weights(got), _weights(expected)
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in theirs), name
        assert (got.accuracy, got.macro_f1, got.loss, got.confusion, got.steps) == \
            (expected.accuracy, expected.macro_f1, expected.loss, expected.confusion, expected.steps), name
        assert [(e.step, e.accuracy, e.loss) for e in got.evals] == [(e.step, e.accuracy, e.loss)
                                                                    for e in expected.evals], name
        assert [(e.step, e.loss, e.lr) for e in got.history] == [(e.step, e.loss, e.lr) for e in expected.history]


@pytest.mark.parametrize("cut", ["killed", "stopped", "damaged"])
def test_a_race_cut_off_while_training_goes_on_from_its_checkpoint_to_the_race_never_cut_off(nano_folder, tmp_path,
                                                                                             cut):
    """A race whose second model is cut off at step 17 of 30: killed (its folder as the disk holds it then: the
    first model kept, the second's checkpoint of every step, here of step 16) or stopped (a checkpoint at the stop,
    kept beside the stopped model's result). Built again over that folder, it keeps the first model as it was,
    takes the second up from its checkpoint, and ends with the weights, figures and curves of the race never cut
    off. A checkpoint whose weights are damaged is refused before anything is changed: that model trains anew, to
    the same end."""
    import shutil

    widgets = {**WIDGETS, "steps": 30}
    spec = _page_spec(nano_folder, keep_in=str(tmp_path / "whole"), checkpoint_every_s=0.0)
    spec = dataclasses.replace(spec, settings=_settings(widgets))
    whole = build_race(spec)
    folder = tmp_path / "cut"

    def cut_at_17(event):
        if isinstance(event, FinetuneStep) and event.step == 17 and not folder.exists():
            shutil.copytree(tmp_path / "whole", folder)   # what a kill -9 leaves on disk
            if cut == "stopped":
                stopped.stop()

    scratch = whole.tuners[-1]
    scratch.callbacks.append(cut_at_17)
    stopped = whole
    if cut == "stopped":   # the race itself is stopped at step 17, and the whole race is another one
        stopped, whole = whole, build_race(dataclasses.replace(spec, keep_in=None))
        whole.run()
        stopped.run()
        assert stopped.tuners[-1].state == "stopped" and stopped.tuners[-1].step == 17
        folder = tmp_path / "whole"
    else:
        whole.run()
    assert checkpoint_of(folder / TRAINING)["step"] == (17 if cut == "stopped" else 16)
    if cut == "damaged":
        (folder / TRAINING / "model.safetensors").write_bytes(b"not safetensors")
    resumed = build_race(dataclasses.replace(spec, keep_in=str(folder)))
    assert isinstance(resumed.tuners[0], TunerView) and resumed.tuners[0].result is not None
    assert resumed.tuners[-1].step == {"killed": 16, "stopped": 17, "damaged": 0}[cut]
    resumed.run()
    _same_race(resumed, whole)
    assert not (folder / TRAINING).exists(), "a finished model's checkpoint goes"


def test_the_page_says_what_a_restart_kept_of_a_race_and_its_resume_finishes_it(nano_folder, tmp_path, monkeypatch):
    """A race a server restart stopped while its second model trained, opened by its link on the Fine-tune page:
    the page says it was stopped by the restart, what it kept and that Resume goes on, offers *Resume the race*,
    and the race resumed from there finishes with both models' full budgets."""
    from streamlit.testing.v1 import AppTest

    from bert_core.app import app_state
    from bert_core.serve.run_scheduler import restore_runs
    from tests.app_fixtures import finish_page_run

    records, run_id = RunRecords(tmp_path / "state"), runs.new_token()
    spec = dataclasses.replace(_page_spec(nano_folder, keep_in=str(records.checkpoint_for(run_id))),
                               settings=_settings({**WIDGETS, "steps": 30}))
    race = build_race(spec)
    race.tuners[-1].callbacks.append(lambda e: race.stop() if isinstance(e, FinetuneStep) and e.step == 5 else None)
    race.run()   # the server's end stops the race at its next step: a checkpoint of step 5 is kept
    run = Run(run_id=run_id, view_id=runs.new_token(), family=run_id, spec=spec, queued=False)
    run.job = type("Job", (), {"phase": "running", "error": None, "ended_note": None, "trainer": race})()
    assert records.write(run, "running", race.step)   # its last record: training
    restore_runs(records, app_state.RUNS, restoring(lambda *a: pytest.fail("a race is restored as one")))
    monkeypatch.setenv("BERT_EXPLORER_CHECKPOINT", str(nano_folder))
    at = AppTest.from_file(str(Path(__file__).parent.parent / "pages" / "5_Fine-tune.py"), default_timeout=60)
    at.query_params["ft"] = run_id
    try:
        at.run()
        assert not at.exception, at.exception
        said = " ".join(w.value for w in at.warning)
        assert "stopped by a server restart (1 of its models had ended, kept; its model 'scratch' had made 5 " \
               "steps" in said and "Resume goes on from there" in said
        next(b for b in at.button if b.label == "Resume the race").click().run()
        assert not at.exception, at.exception
        job = finish_page_run(at)
        assert not at.exception, at.exception
        assert [(r.name, r.state, r.steps) for r in job.trainer.results.values()] == \
            [("pretrained", "finished", 30), ("scratch", "finished", 30)]
        assert not any(b.label == "Resume the race" for b in at.button)
    finally:
        app_state.RUNS.discard(run_id)


def test_a_curriculum_run_goes_on_from_a_checkpoint_past_a_stage_change_exactly(tiny, tmp_path, monkeypatch):
    """The toy QA task's drills: a run killed at step 33 (its checkpoint of step 32, just after `where` gave way to
    the next drill with a new optimizer and schedule; `sentence` learnt early, so a stage ended by its scores) goes
    on from it to the stages, learning rates, curve and weights of the run never killed."""
    import shutil

    from bert_core.training import finetune as finetune_module
    from bert_core.training.finetune import Finetuner
    from bert_core.training.finetune_settings import FinetuneConfig

    monkeypatch.setattr(finetune_module, "MASTERY_STEPS", 5)

    def tuner(**kw):
        task = _staged_task()
        task.drills = (dataclasses.replace(task.drills[0], mastery=0.0),
                       dataclasses.replace(task.drills[1], mastery=1.01), *task.drills[2:])
        config, tokenizer = tiny
        cfg = FinetuneConfig(max_steps=80, time_budget_s=None, batch_size=8, learning_rate=1e-3, max_length=96,
                             eval_points=4, seed=0, device="cpu", precision="fp32")
        made = Finetuner(task.new_head(config, 0), tokenizer, config=cfg, task=task, name="qa", **kw)
        made.checkpoint_dir, made.checkpoint_every_s = tmp_path / "every-step", 0.0
        return made

    def kill_at_33(event):
        if isinstance(event, FinetuneStep) and event.step == 33:
            shutil.copytree(tmp_path / "every-step", tmp_path / "killed")

    whole = tuner(callbacks=[kill_at_33])
    expected = whole.run()
    resumed = tuner()
    resumed.resume_from(tmp_path / "killed")
    assert resumed.step == 32 and [s.step for s in resumed.stages] == [0, 5, 22, 32]
    got = resumed.run()
    assert [s.step for s in got.stages] == [s.step for s in expected.stages] == [0, 5, 22, 32, 44, 54, 64]
    assert [(e.step, e.lr, e.loss) for e in got.history] == [(e.step, e.lr, e.loss) for e in expected.history]
    assert [(e.step, e.accuracy, e.macro_f1) for e in got.evals] == [(e.step, e.accuracy, e.macro_f1)
                                                                    for e in expected.evals]
    assert _weights(got).keys() == _weights(expected).keys()
    assert all(torch.equal(_weights(got)[k], v) for k, v in _weights(expected).items())

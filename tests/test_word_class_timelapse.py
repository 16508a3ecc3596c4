"""What each layer knows, as a run trains (bert_core.inspect.word_class_timelapse): a probe snapshot carries the
part-of-speech probe that layer_probes fits on the model at that step, none when CoNLL-2000 is not on the machine
or the run is on the toy corpus, and the run's record keeps it across a restart."""

import dataclasses
import json

import numpy as np
import pytest

from bert_core.inspect import word_class_timelapse as wct
from bert_core.data.task_downloads import local_task_csv
from bert_core.inspect import layer_probes as lp
from bert_core.inspect.layer_probes import _read, layer_probes
from bert_core.inspect.probes import ProbeStore
from bert_core.model.checkpoint import load_checkpoint
from bert_core.paths import DEFAULT_CHECKPOINT
from bert_core.serve.run_records import probes_to_json
from bert_core.serve.train_spec import _probes
from bert_core.training.train_spec import TrainSpec


@pytest.fixture(scope="module")
def conll():
    path = local_task_csv("conll2000")
    if path is None:
        pytest.skip("CoNLL-2000 is not on this machine (the shared data folder or the app's download)")
    return str(path)


@pytest.fixture(scope="module")
def tiny():
    return load_checkpoint(DEFAULT_CHECKPOINT)


def _store(word_classes=True):
    return ProbeStore(["the [MASK] sat on the mat ."], "the cat sat .", word_classes=word_classes)


def test_a_snapshot_carries_layer_probes_own_fit_on_the_model_at_that_step(conll, tiny):
    store = _store()
    snap = store.snapshot(tiny.model, tiny.tokenizer, step=40)
    whole = layer_probes(tiny.model, tiny.tokenizer, _read(conll), wct.SNAPSHOT_FIT, wct.SNAPSHOT_TEST)
    pos = next(t for t in whole.tasks if t.task == "part of speech")
    probe = snap.word_classes
    assert len(probe.accuracy) == tiny.model.config.num_hidden_layers + 1
    np.testing.assert_allclose(probe.accuracy, pos.accuracy, rtol=1e-9)
    np.testing.assert_allclose(probe.random_model, pos.random_model, rtol=1e-9)     # the same seeded twin
    assert probe.majority == pytest.approx(pos.majority) and probe.test_words == whole.test_words
    assert max(probe.accuracy) > max(probe.random_model) > probe.majority
    # Seeded: a second snapshot of the same weights is the same, its random curve the one kept from the first.
    again = store.snapshot(tiny.model, tiny.tokenizer, step=41).word_classes
    assert again.accuracy == probe.accuracy and again.random_model == probe.random_model
    assert probe.seconds < 30     # what it costs is measured in docs/benchmarks.md; this only catches a runaway


def test_without_the_data_or_on_the_toy_corpus_a_snapshot_has_no_probes_and_no_error(tiny, monkeypatch):
    monkeypatch.setattr(lp, "local_task_csv", lambda name: None)
    snap = _store().snapshot(tiny.model, tiny.tokenizer, step=0)
    assert snap.word_classes is None and snap.predictions[0]
    assert wct.word_class_timeline([snap]) is None
    toy, _ = _probes(TrainSpec(corpus="toy"), 0, {})
    english, _ = _probes(TrainSpec(corpus="wikitext-2"), 0, {})
    assert toy.word_classes is None and english.word_classes is not None


def test_the_probes_survive_the_runs_record(conll, tiny, tmp_path):
    from bert_core.serve.training_mirrors import restored_trainer

    store = _store()
    for step in (0, 10):
        store.snapshot(tiny.model, tiny.tokenizer, step=step)
    record = json.loads(json.dumps(probes_to_json(store)))     # as written to probes.json and read back
    back = restored_trainer(DEFAULT_CHECKPOINT, record).probes.snapshots()
    for was, now in zip(store.snapshots(), back):
        np.testing.assert_allclose(now.word_classes.accuracy, was.word_classes.accuracy, rtol=1e-4)
        np.testing.assert_allclose(now.word_classes.random_model, was.word_classes.random_model, rtol=1e-4)
        assert now.word_classes.test_words == was.word_classes.test_words
    # A record from before (no probes) or a broken one reads back as none, not an error.
    record["snapshots"][0].pop("word_classes")
    record["snapshots"][1]["word_classes"] = {"accuracy": [0.5, "x"]}
    assert [s.word_classes for s in restored_trainer(DEFAULT_CHECKPOINT, record).probes.snapshots()] == [None, None]


def test_the_timeline_and_its_reading_come_from_the_numbers():
    probe = wct.WordClassProbe
    snaps = [type("S", (), {"step": s, "word_classes": p})() for s, p in (
        (0, probe((0.30, 0.35, 0.33), (0.40, 0.41, 0.38), 0.14, 900, 0.2)),
        (200, None),
        (400, probe((0.60, 0.78, 0.70), (0.40, 0.41, 0.38), 0.14, 900, 0.2)))]
    steps, acc, random_model, majority = wct.word_class_timeline(snaps)
    assert steps == [0, 400] and acc.shape == (2, 3) and majority == 0.14
    assert wct.reading(steps, acc, random_model) == ("Layer 1 knows word classes best: 78% of held-out words at "
                                                     "step 400; 35% at step 0; a random model of this shape 41%.")


# ------------------------------------------------------------------------------------------ the Train page


@pytest.mark.slow
def test_the_train_page_says_why_a_run_has_no_probes_and_draws_them_when_its_snapshots_carry_them(tmp_path,
                                                                                                 monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from bert_core.app import app_state
    from bert_core.serve import model_sources
    from tests.app_fixtures import train_nano_checkpoint
    from tests.test_app import ROOT, TIMEOUT, _job, _small_run

    def said(at):
        return [e.value for e in (*at.caption, *at.info, *at.markdown)]

    def titles(at):
        return [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]

    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(train_nano_checkpoint(tmp_path / "nano-toy")))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/2_Train.py").run()
    _small_run(at, steps=4)                  # the toy corpus, a probe snapshot every 2 steps: 0, 2, 4
    at.button[0].click().run()               # Start
    job = _job()
    try:
        job.wait(TIMEOUT)
        assert job.phase == "finished", job.error
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert any("made-up words have no parts of speech" in t for t in said(at)), said(at)
        trainer = job.trainer
        assert all(s.word_classes is None for s in trainer.probes.snapshots())     # the child fitted none
        # An English run on a server without CoNLL-2000: the page offers the fetch, and the run never downloads.
        trainer.metadata["corpora"] = ["wikitext-2"]
        monkeypatch.setattr("bert_core.data.task_downloads.local_task_csv", lambda *a, **k: None)
        at.run()
        assert any("not on this server yet" in t for t in said(at)) and at.button(key="train_fetch_conll")
        # Snapshots as an English run's child sends them: the figure, its reading and the random-init mark.
        last = trainer.probes.snapshots()[-1]
        for step, acc in ((6, (0.30, 0.35, 0.33)), (8, (0.52, 0.78, 0.70))):
            trainer.probes.add(dataclasses.replace(last, step=step, word_classes=wct.WordClassProbe(
                acc, (0.40, 0.41, 0.38), 0.14, 990, 0.3)))
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert "Part of speech read off each layer, snapshot by snapshot" in titles(at)
        spec = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
                    if json.loads(c.proto.spec)["layout"]["title"]["text"].startswith("Part of speech"))
        assert [t["name"] for t in spec["data"]] == ["embeddings", "layer 1", "layer 2",
                                                     "random-init model (layer 1)", "always the commonest tag"]
        assert spec["data"][1]["y"] == [0.35, 0.78] and spec["data"][3]["y"] == [0.41, 0.41]
        assert any(t.startswith("Layer 1 knows word classes best: 78% of held-out words at step 8; 35% at step 6; "
                                "a random model of this shape 41%.") for t in said(at)), said(at)
    finally:
        for run in app_state.RUNS.runs():
            app_state.RUNS.discard(run.run_id, wait=30)

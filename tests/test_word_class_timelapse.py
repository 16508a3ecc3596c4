"""What each layer knows, as a run trains (bert_core.inspect.word_class_timelapse): a probe snapshot carries the
part-of-speech probe that layer_probes fits on the model at that step, none when CoNLL-2000 is not on the machine
or the run is on the toy corpus, and the run's record keeps it across a restart."""

import json

import numpy as np
import pytest

from bert_core.inspect import word_class_timelapse as wct
from bert_core.inspect.layer_probes import _read, layer_probes
from bert_core.inspect.probes import ProbeStore
from bert_core.model.checkpoint import load_checkpoint
from bert_core.paths import DEFAULT_CHECKPOINT
from bert_core.serve.run_records import probes_to_json
from bert_core.serve.train_spec import _probes
from bert_core.training.train_spec import TrainSpec


@pytest.fixture(scope="module")
def conll():
    path = wct.conll_path()
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
    monkeypatch.setattr(wct, "conll_path", lambda: None)
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

"""The word map at each probe snapshot of a training run (bert_core.inspect.word_maps): what the Train page's
time-lapse draws, held against the How BERT computes page's map on the same weights."""

import json

import numpy as np
import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.inspect import computation_figures as cf
from bert_core.inspect.probes import ProbeStore
from bert_core.inspect.word_map_vectors import sense_word_map, snapshot_word_maps, word_map
from bert_core.inspect.word_maps import (SENSE_SENTENCES, TIMELAPSE_WORDS, separation_by_step, word_map_timelapse,
                                         word_maps_from_json, word_maps_to_json)
from bert_core.model.bert import BertForPreTraining
from bert_core.model.config import BertConfig
from bert_core.serve.run_records import probes_to_json
from bert_core.training.train_config import TrainConfig
from bert_core.training.trainer import Trainer


@pytest.fixture(scope="module")
def trained():
    """A nano BERT trained 12 steps on the toy corpus, a probe snapshot every 4 steps (0, 4, 8, 12)."""
    from bert_core.data.corpora import generate_toy_corpus, split_heldout
    from bert_core.data.pretraining_data import PretrainingData
    from bert_core.model.tokenization import train_tokenizer

    train, _ = split_heldout(generate_toy_corpus(num_documents=60, seed=0), fraction=0.2, seed=0)
    tokenizer = train_tokenizer(train.texts(), vocab_size=300)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=tokenizer.vocab_size,
                                                 max_position_embeddings=64))
    data = PretrainingData(train, tokenizer, max_seq_length=32, batch_size=4, seed=0)
    config = TrainConfig(batch_size=4, max_steps=12, learning_rate=3e-3, warmup_ratio=0.1, max_seq_length=32,
                         eval_batches=1, probe_every=4, device="cpu")
    probes = ProbeStore(sentences=["the [MASK] sat on the mat ."], attention_sentence="the cat sat .")
    trainer = Trainer(model, tokenizer, data, config, probes=probes)
    trainer.run()
    return trainer, probes


def test_each_snapshot_maps_every_built_in_word_and_the_last_is_the_final_models_map(trained):
    trainer, probes = trained
    snaps = probes.snapshots()
    assert [s.step for s in snaps] == [0, 4, 8, 12]
    assert all(set(s.word_maps) == set(TIMELAPSE_WORDS) for s in snaps)
    for word in TIMELAPSE_WORDS:
        rows = SENSE_SENTENCES[word]
        final = word_map(trainer.model, trainer.tokenizer, word, [s for _, s in rows], [g for g, _ in rows])
        timeline = word_map_timelapse(snaps, word)
        step, last = timeline[-1]
        assert step == 12 and last.sentences == final.sentences and last.labels == final.labels
        np.testing.assert_allclose(last.points, final.points, atol=1e-5)
        np.testing.assert_allclose(last.explained, final.explained, atol=1e-6)
        # The weights moved between snapshots, and so did the word's vectors.
        first = timeline[0][1]
        assert first.points.shape == last.points.shape == (trainer.model.config.num_hidden_layers + 1, 12, 2)
        assert not np.allclose(first.points[1:], last.points[1:], atol=1e-3), word


def test_the_separation_curve_has_a_value_per_snapshot_and_layer(trained):
    _, probes = trained
    timeline = word_map_timelapse(probes.snapshots(), "bank")
    steps, seps = separation_by_step(timeline)
    assert steps == [0, 4, 8, 12] and seps.shape == (4, len(timeline[0][1].points))
    assert np.all(seps >= 0) and np.all(np.isfinite(seps))
    fig = cf.separation_timeline_figure("bank", steps, seps, step=8)
    assert [t.name for t in fig.data][:2] == ["embeddings", "layer 1"] and list(fig.data[0].x) == steps
    np.testing.assert_allclose(fig.data[1].y, seps[:, 1])
    assert "at step 8" in cf.word_map_figure(timeline[2][1], step=8).layout.title.text


def test_the_maps_survive_a_run_record_and_an_older_record_has_none(trained):
    _, probes = trained
    record = probes_to_json(probes)
    snap = probes.snapshots()[-1]
    back = word_maps_from_json(record["snapshots"][-1]["word_maps"])
    assert set(back) == set(snap.word_maps)
    np.testing.assert_allclose(back["play"].points, snap.word_maps["play"].points, atol=1e-4)
    assert back["play"].labels == snap.word_maps["play"].labels
    assert word_maps_from_json(None) is None and word_maps_to_json({}) is None
    assert word_map_timelapse([type(snap)(step=0, predictions=[], attention_tokens=None, attention=None)],
                              "bank") == []


def test_a_word_without_sentences_or_outside_the_vocabulary_is_left_out_or_explained(trained):
    trainer, _ = trained
    with pytest.raises(BertCoreError, match="no built-in sentences"):
        sense_word_map(trainer.model, trainer.tokenizer, "castle")
    with pytest.raises(BertCoreError, match="vocabulary"):
        word_map(trainer.model, trainer.tokenizer, "€", ["a € b .", "c € d .", "e € f ."])
    assert snapshot_word_maps(trainer.model, trainer.tokenizer, words=("castle", "bank")).keys() == {"bank"}


# ------------------------------------------------------------------------------------------ the Train page


@pytest.mark.slow
def test_the_train_page_draws_the_map_at_the_chosen_snapshot_of_a_finished_run(tmp_path, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from bert_core.app import app_state
    from bert_core.serve import model_sources
    from tests.app_fixtures import train_nano_checkpoint
    from tests.test_app import ROOT, TIMEOUT, _job, _small_run

    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(train_nano_checkpoint(tmp_path / "nano-toy")))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/2_Train.py").run()
    _small_run(at, steps=4)                  # a probe snapshot every 2 steps: 0, 2, 4
    at.button[0].click().run()               # Start
    job = _job()
    try:
        job.wait(TIMEOUT)
        assert job.phase == "finished", job.error
        at.run()
        assert not at.exception, [e.value for e in at.exception]

        def titles():
            every = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
            return [t for t in every if "layer by layer (PCA), at step" in t]

        assert at.radio(key="train_map_word").value == "bank"
        assert at.select_slider(key="train_map_step").value == 4 and len(titles()) == 1
        assert "“bank” in 12 sentences" in titles()[0] and "at step 4" in titles()[0]
        at.select_slider(key="train_map_step").set_value(0).run()
        at.radio(key="train_map_word").set_value("play").run()
        assert not at.exception, [e.value for e in at.exception]
        assert "“play” in 12 sentences" in titles()[0] and "at step 0" in titles()[0]
        assert any("How far apart the senses of “play” lie" in json.loads(c.proto.spec)["layout"]["title"]["text"]
                   for c in at.get("plotly_chart"))
    finally:
        for run in app_state.RUNS.runs():
            app_state.RUNS.discard(run.run_id, wait=30)

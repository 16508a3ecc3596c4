"""What each layer knows (bert_core.inspect.layer_probes): the closed-form probe on made-up features, the control task,
the layer curve of a tiny model on made-up sentences, and the shipped mini against a random model on CoNLL-2000."""

import random

import numpy as np
import pytest
import torch

from bert_core.data.token_tags_data import TaggedSentences
from bert_core.inspect.computation_figures import layer_probes_figure
from bert_core.inspect.layer_probes import (control_tags, conll_layer_probes, layer_probes, probe_accuracy,
                                            random_twin, verdict)
from bert_core.model.bert import BertForPreTraining
from bert_core.model.checkpoint import load_checkpoint
from bert_core.model.config import BertConfig
from bert_core.paths import DEFAULT_CHECKPOINT, shared_data_dir

SHIPPED = DEFAULT_CHECKPOINT.parent


def _clusters(sizes, classes: int = 5):
    """For each size, [1, n, 16] points around one far-apart centre per class (the same centres), and their classes."""
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(classes, 16, generator=g) * 5
    out = []
    for n in sizes:
        y = torch.randint(classes, (n,), generator=g)
        out.append(((centres[y] + torch.randn(n, 16, generator=g))[None], y))
    return out


def test_a_separable_task_is_learned_and_shuffled_labels_are_not():
    (x_fit, y_fit), (x_test, y_test) = _clusters([600, 300])
    assert probe_accuracy(x_fit, [y_fit], x_test, [y_test])[0, 0] > 0.97
    shuffled = y_fit[torch.randperm(len(y_fit), generator=torch.Generator().manual_seed(1))]
    assert abs(probe_accuracy(x_fit, [shuffled], x_test, [y_test])[0, 0] - 0.2) < 0.08    # chance: 1 in 5


def test_the_control_task_gives_each_word_type_one_tag():
    words = [["The", "dog", "saw", "the", "cat"], ["a", "cat", "saw", "The", "dog"]]
    tags = [[0, 1, 2, 0, 1], [0, 1, 2, 0, 1]]
    control = control_tags(words, tags, seed=3)
    fixed = {}
    for sentence, drawn in zip(words, control):
        for w, t in zip(sentence, drawn):
            assert fixed.setdefault(w.lower(), t) == t
    assert control == control_tags(words, tags, seed=3)


def _made_up_sentences(count: int) -> TaggedSentences:
    """Determiner-adjective-noun-verb sentences: their tags follow from each word's place and class."""
    rng = random.Random(0)
    lexicon = {"DT": ["the", "a", "every"], "JJ": ["old", "small", "green", "happy"],
               "NN": ["dog", "cat", "man", "house", "river", "king"], "VBD": ["saw", "liked", "found", "left"]}
    words, pos, chunks = [], [], []
    for _ in range(count):
        shape = ["DT", "JJ", "NN", "VBD", "DT", "NN"] if rng.random() < 0.5 else ["DT", "NN", "VBD", "DT", "JJ", "NN"]
        words.append([rng.choice(lexicon[p]) for p in shape])
        pos.append(shape)
        chunks.append([0 if p == "VBD" else (1 if p == "DT" else 2) for p in shape])
    return TaggedSentences(words=words, tags=chunks, pos=pos, tag_names=["B-VP", "B-NP", "I-NP"], scheme="iob")


def test_twins_built_at_once_on_two_threads_are_the_seeds_twin():
    """Two pages build the random twin at the same moment (a teacher and a student on one step): each gets the
    seed's weights. Before, they drew from torch's one global generator in turn and both differed from it."""
    import threading

    model = BertForPreTraining(BertConfig(vocab_size=500, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                          intermediate_size=64))
    expected = random_twin(model).state_dict()
    built = [None] * 4

    def build(i):
        built[i] = random_twin(model).state_dict()

    threads = [threading.Thread(target=build, args=(i,)) for i in range(len(built))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.equal(twin[k], expected[k]) for twin in built for k in expected)


def test_a_tiny_model_gets_a_curve_for_every_layer_and_a_selectivity():
    tok = load_checkpoint(SHIPPED / "bert-tiny-english").tokenizer
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    probes = layer_probes(BertForPreTraining(config), tok, _made_up_sentences(90), fit=60, test=30)
    assert [t.task for t in probes.tasks] == ["part of speech", "chunk"]
    assert probes.fit_words == 360 and probes.test_words == 180
    for t in probes.tasks:
        for curve in (t.accuracy, t.random_model, t.control, t.selectivity):
            assert curve.shape == (4,) and np.isfinite(curve).all()     # the embeddings and 3 layers
        # The tags follow from the word here, so even an untrained model's first-piece vectors give them away.
        assert t.accuracy[0] > 0.9
    text = verdict(probes)
    assert "selectivity" in text and "read best from" in text
    fig = layer_probes_figure(probes)
    assert len(fig.data) == 8 and list(fig.data[1].x) == ["embeddings", "layer 1", "layer 2", "layer 3"]


def test_probes_on_the_shipped_mini_beat_a_random_model_of_its_shape():
    shared = shared_data_dir()
    path = shared / "conll2000" / "train.txt" if shared is not None else None
    if path is None or not path.is_file():
        pytest.skip("CoNLL-2000 is not in the shared data folder")
    mini = load_checkpoint(SHIPPED / "bert-mini-english")
    probes = conll_layer_probes(mini.model, mini.tokenizer, str(path))
    assert conll_layer_probes(mini.model, mini.tokenizer, str(path)) is probes      # kept per model
    for t in probes.tasks:
        assert t.accuracy.shape == (mini.model.config.num_hidden_layers + 1,)
        assert t.random_model[t.best] < t.accuracy[t.best] and t.selectivity[t.best] > 0
        assert t.accuracy[t.best] > t.majority


def test_the_page_section_draws_on_the_shipped_model(monkeypatch):
    """How BERT computes, tab "Each layer's guess": the probes toggled on draw their sentence and figure."""
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from bert_core.data.task_downloads import local_task_csv
    from bert_core.serve import model_sources

    if local_task_csv("conll2000") is None:
        pytest.skip("CoNLL-2000 is not on this machine")
    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(DEFAULT_CHECKPOINT))
    at = AppTest.from_file(str(SHIPPED.parent / "app.py"), default_timeout=300)
    at.run()
    at.switch_page("pages/7_How_BERT_computes.py")
    at.session_state["hbc_tab"] = "Each layer's guess"   # lazy tabs: only the open one runs
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    charts = len(at.get("plotly_chart"))
    at.toggle(key="hbc_probes").set_value(True).run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert any("read best from" in m.value for m in at.markdown)
    assert any("first WordPiece" in c.value for c in at.caption)
    assert len(at.get("plotly_chart")) == charts + 1

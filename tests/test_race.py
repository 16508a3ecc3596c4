"""The downstream race: fine-tuning from a BERT, from a GPT-style model and from scratch with the same data, budget
and seed, beside a TF-IDF + logistic-regression baseline on the same split; from the library, the CLI and the page.
The models are nano, the GPT trained here for a few steps; the shared-data test skips when ../shared/data is absent."""

import json
from pathlib import Path

import pytest
import torch

from bert_core.data.classification_data import ClassificationData, split_train_val
from bert_core.errors import BertCoreError
from bert_core.model.bert import LAST_TOKEN_POOLING, BertForPreTraining, BertLMHeadModel
from bert_core.model.config import BertConfig
from bert_core.model.hf import load_pretrained, save_pretrained
from bert_core.training.finetune import result_probabilities
from tests.page_races import build_comparison
from bert_core.data.classification_data import toy_topic_task
from bert_core.training.baseline_runs import BASELINE_NAME, bag_of_words_run, fit_bag_of_words, load_bag_of_words
from bert_core.training.finetune_settings import FinetuneConfig

SETTINGS = dict(train=240, val=80, seed=0, budget=30, lr=1e-3, batch=16, maxlen=32)


@pytest.fixture(scope="module")
def task():
    return toy_topic_task(seed=0, num_examples=320)


@pytest.fixture(scope="module")
def racers(tmp_path_factory, task):
    """Two checkpoint folders side by side (as checkpoints/ holds them): an untrained nano BERT and a nano GPT
    trained for a few next-token steps on toy stories, sharing one tokenizer."""
    from bert_core.data.corpora import generate_toy_corpus
    from bert_core.data.pretraining_data import PretrainingData
    from bert_core.model.tokenization import train_tokenizer
    from bert_core.training.trainer import Trainer
    from bert_core.training.train_config import TrainConfig

    corpus = generate_toy_corpus(num_documents=30, seed=0)
    tok = train_tokenizer([*corpus.texts(), *task.texts], vocab_size=300)
    root = tmp_path_factory.mktemp("checkpoints")
    size = dict(vocab_size=tok.vocab_size, max_position_embeddings=64, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    save_pretrained(BertForPreTraining(BertConfig.preset("nano", **size)), root / "bert-nano", tokenizer=tok)
    gpt = BertLMHeadModel(BertConfig.preset("nano", **size, attention="causal"))
    data = PretrainingData(corpus, tok, max_seq_length=24, batch_size=4, nsp=False, objective="clm")
    trainer = Trainer(gpt, tok, data, TrainConfig(max_steps=8, batch_size=4, max_seq_length=24, nsp=False,
                                                  objective="clm", learning_rate=3e-3, device="cpu"))
    trainer.run()
    assert trainer.state == "finished", trainer.error
    save_pretrained(gpt, root / "gpt-nano", tokenizer=tok)
    return root / "bert-nano", root / "gpt-nano", tok


def test_the_baseline_beats_chance_repeats_with_its_seed_and_classifies_typed_text(task):
    train, val = split_train_val(task, 240, 80, seed=0)
    a, b = bag_of_words_run(train, val, seed=0), bag_of_words_run(train, val, seed=0)
    seen = []
    a.callbacks.append(seen.append)
    ra, rb = a.run(), b.run()
    assert a.state == "finished" and a.error is None and ra.name == BASELINE_NAME
    majority = max(val.label_counts()) / len(val)
    assert ra.accuracy > majority + 0.2
    assert (ra.accuracy, ra.macro_f1, ra.confusion) == (rb.accuracy, rb.macro_f1, rb.confusion)
    assert len(ra.evals) == 1 and seen == ra.evals and ra.evals[0].accuracy == ra.accuracy
    assert sum(map(sum, ra.confusion)) == len(val) and ra.steps == 0
    confidences = [m.confidence for m in ra.misclassified]
    assert confidences == sorted(confidences, reverse=True)
    probs = result_probabilities(ra, val.texts[0])
    assert len(probs) == task.num_labels and abs(sum(probs) - 1) < 1e-6
    with pytest.raises(BertCoreError, match="type a sentence"):
        result_probabilities(ra, "  ")


def test_the_baseline_says_what_is_wrong_with_data_it_cannot_fit():
    one_label = ClassificationData(texts=["a b", "c d", "e f"], labels=[0, 0, 0], label_names=["x", "y"])
    with pytest.raises(BertCoreError, match="single label"):
        fit_bag_of_words(one_label)
    no_words = ClassificationData(texts=["!", "?", "."], labels=[0, 1, 0], label_names=["x", "y"])
    run = bag_of_words_run(no_words, no_words)
    assert run.run() is None and run.state == "failed" and "could not be fitted" in run.error


def test_a_kept_baseline_reads_back_as_the_same_classifier_without_a_pickle(task, tmp_path):
    """Two labels (one sigmoid) and four (a softmax): the classifier read back gives the same probabilities, bit
    for bit, from JSON and safetensors alone; a damaged folder is one clear error."""
    train, val = split_train_val(task, train_size=SETTINGS["train"], val_size=SETTINGS["val"], seed=0)
    two = ClassificationData(texts=train.texts, labels=[y % 2 for y in train.labels], label_names=["even", "odd"])
    for data in (two, train):
        fitted = fit_bag_of_words(data)
        folder = fitted.save(tmp_path / f"bow{len(data.label_names)}")
        assert sorted(p.name for p in folder.iterdir()) == ["bag_of_words.json", "bag_of_words.safetensors"]
        back = load_bag_of_words(folder)
        texts = list(val.texts[:20]) + ["words it never saw", ""]
        assert back.probabilities(texts) == fitted.probabilities(texts) and back.label_names == data.label_names
    (folder / "bag_of_words.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(BertCoreError, match="cannot be read"):
        load_bag_of_words(folder)


def test_a_race_runs_bert_gpt_scratch_and_the_baseline_on_one_split(racers, task):
    bert_folder, gpt_folder, tok = racers
    bert, gpt = load_pretrained(bert_folder), load_pretrained(gpt_folder)
    race = build_comparison(task, bert, tok, {**SETTINGS, "steps": 3}, others=[("gpt", gpt, tok)], baseline=True)
    assert [t.name for t in race.tuners] == [BASELINE_NAME, "pretrained", "gpt", "scratch"]
    race.run()
    assert race.state == "finished", race.error
    results = race.results
    assert list(results) == [BASELINE_NAME, "pretrained", "gpt", "scratch"]
    assert {sum(map(sum, r.confusion)) for r in results.values()} == {80}  # one validation set for all
    assert [results[n].steps for n in ("pretrained", "gpt", "scratch")] == [3, 3, 3]
    assert results["gpt"].model.pooling == LAST_TOKEN_POOLING and results["pretrained"].model.pooling == "cls"
    assert results["scratch"].model.config == bert.config  # the twin of the first racer
    assert race.progress.fraction == 1.0
    for r in results.values():
        assert len(result_probabilities(r, task.texts[0], max_length=32)) == task.num_labels


def test_two_runs_of_a_race_may_not_share_a_name(racers, task):
    bert_folder, _, tok = racers
    bert = load_pretrained(bert_folder)
    with pytest.raises(BertCoreError, match="share a name"):
        build_comparison(task, bert, tok, SETTINGS, others=[("scratch", bert, tok)])


def test_cli_race_prints_every_run_and_saves_each_classifier(racers, tmp_path, capsys):
    from bert_core.cli.main import main

    bert_folder, gpt_folder, _ = racers
    out = tmp_path / "out"
    code = main(["finetune", "--checkpoint", str(bert_folder), "--compare", str(gpt_folder), "--compare-scratch",
                 "--baseline", "--task", "toy", "--train-size", "200", "--val-size", "60", "--steps", "2",
                 "--max-length", "32", "--device", "cpu", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    rows = [line.split()[0] for line in captured.out.splitlines()[1:5]]
    assert rows == [BASELINE_NAME, "pretrained", "gpt-nano", "scratch"]
    assert "[tfidf] step     0" in captured.err
    assert "reads the last token" in captured.out
    gpt_clf = out / "from-gpt-nano"
    assert json.loads((gpt_clf / "config.json").read_text())["classifier_pooling"] == LAST_TOKEN_POOLING
    assert (out / "from-scratch" / "config.json").is_file() and (out / "config.json").is_file()
    assert not (out / f"from-{BASELINE_NAME}").exists()


def test_cli_race_with_a_missing_checkpoint_is_one_error_line(racers, tmp_path, capsys):
    from bert_core.cli.main import main

    bert_folder, _, _ = racers
    code = main(["finetune", "--checkpoint", str(bert_folder), "--compare", str(tmp_path / "nowhere"),
                 "--task", "toy", "--steps", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error:") and "nowhere" in err[0]


def test_on_the_shared_polarity_rows_the_baseline_is_a_real_line(shared_data):
    from bert_core.data.classification_data import load_classification_csv

    data = load_classification_csv(shared_data / "sentence_polarity" / "polarity.csv")
    train, val = split_train_val(data, 2000, 500, seed=0)
    result = bag_of_words_run(train, val, seed=0).run()
    assert 0.6 < result.accuracy < 0.9  # well above chance (50%), far from perfect: the line to beat
    assert result.train_seconds < 30


def test_finetune_config_of_the_race_is_shared(racers, task):
    bert_folder, gpt_folder, tok = racers
    race = build_comparison(task, load_pretrained(bert_folder), tok, SETTINGS,
                            others=[("gpt", load_pretrained(gpt_folder), tok)])
    configs = {t.config for t in race.tuners}
    assert configs == {race.config} and isinstance(race.config, FinetuneConfig)
    assert race.config.time_budget_s == SETTINGS["budget"]


def test_the_level_line_spans_the_curves():
    from bert_core.inspect.finetune_figures import accuracy_curves_figure
    from bert_core.training.finetune_results import FinetuneEval

    curve = [FinetuneEval(0, 0.0, 0.2, 0.1, 2.0), FinetuneEval(9, 12.5, 0.7, 0.6, 1.0)]
    fig = accuracy_curves_figure({"tfidf": [FinetuneEval(0, 0.3, 0.8, 0.75, 0.5)], "pretrained": curve})
    level = next(t for t in fig.data if t.name == "TF-IDF + logistic regression")
    assert list(level.x) == [0, 12.5] and list(level.y) == [0.8, 0.8] and level.line.dash == "dash"
    # Always guessing the largest class is a line of the legend too, never a label on the chart.
    with_chance = accuracy_curves_figure({"pretrained": curve}, chance=0.25)
    chance = next(t for t in with_chance.data if t.name == "majority class")
    assert list(chance.x) == [0, 12.5] and list(chance.y) == [0.25, 0.25] and not with_chance.layout.annotations

"""Fine-tuning: the classifier against transformers, save/load, the training loop's schedule, seeds, stop, metrics, CLI."""

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch

from bert_core.cli.finetune import format_confusion
from bert_core.data.batching import collate
from bert_core.data.classification_data import ClassificationData, encode_examples, split_train_val
from bert_core.errors import BertCoreError
from bert_core.model.bert import BertForPreTraining, BertForSequenceClassification
from bert_core.model.config import BertConfig
from bert_core.model.hf import load_pretrained, save_pretrained
from bert_core.model.tokenization import BertTokenizer, train_tokenizer
from bert_core.training.finetune import (
    Finetuner,
    classifier_from_checkpoint,
    classifier_from_scratch,
    classify_text,
    finetune,
    save_classifier,
    set_dropout,
)
from bert_core.data.classification_data import toy_topic_task
from bert_core.training.finetune_results import FinetuneEval, confusion_matrix, macro_f1
from bert_core.training.finetune_settings import FinetuneConfig
from tests.app_fixtures import finish_page_run
from tests.stand_ins import StandInView

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def topics():
    """The toy topic task, small: 300 train / 100 validation sentences over 10 topics."""
    return split_train_val(toy_topic_task(seed=0, num_examples=400), 300, 100, seed=0)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, topics):
    """A pretraining checkpoint folder (nano BERT, untrained weights, WordPiece tokenizer on the toy sentences)."""
    train, _ = topics
    folder = tmp_path_factory.mktemp("pretrained")
    tokenizer = train_tokenizer(train.texts, vocab_size=400)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=tokenizer.vocab_size, max_position_embeddings=64))
    save_pretrained(model, folder, tokenizer=tokenizer)
    return folder


def _quick(**changes) -> FinetuneConfig:
    base = dict(max_steps=6, time_budget_s=None, batch_size=16, learning_rate=1e-3, max_length=32,
                eval_points=3, device="cpu")
    return FinetuneConfig(**{**base, **changes})


def test_finetuned_classifier_logits_match_transformers_on_padded_batches(checkpoint, topics):
    train, val = topics
    model, tokenizer = classifier_from_checkpoint(checkpoint, train.num_labels, seed=1)
    result = finetune(model, tokenizer, train, val, _quick(), name="pretrained")
    model = result.model.eval()
    ref = transformers.BertForSequenceClassification(
        transformers.BertConfig(**model.config.to_hf_dict(), num_labels=train.num_labels)).eval()
    ref.config._attn_implementation = "eager"
    missing, unexpected = ref.load_state_dict(model.state_dict(), strict=False)
    assert not missing and not unexpected
    pairs = ClassificationData(texts=val.texts[:6], texts_b=val.texts[6:12], labels=val.labels[:6],
                               label_names=val.label_names)
    for data in (val, pairs):  # single sentences and sentence pairs, padded to different lengths
        encoded = encode_examples(data, tokenizer, max_length=32)
        batch = collate(encoded, list(range(6)), tokenizer.pad_id)
        assert (batch.attention_mask == 0).any()
        with torch.no_grad():
            ours = model(batch.input_ids, batch.attention_mask, batch.token_type_ids, labels=batch.labels)
            theirs = ref(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                         token_type_ids=batch.token_type_ids, labels=batch.labels)
        assert (ours.logits - theirs.logits).abs().max().item() <= 1e-5
        assert abs(ours.loss.item() - theirs.loss.item()) <= 1e-5


def test_saved_classifier_loads_in_transformers_and_back_with_the_same_logits(checkpoint, topics, tmp_path):
    train, val = topics
    model, tokenizer = classifier_from_checkpoint(checkpoint, train.num_labels, seed=0)
    result = finetune(model, tokenizer, train, val, _quick(max_steps=3))
    folder = save_classifier(result, tmp_path / "clf")
    ref, info = transformers.BertForSequenceClassification.from_pretrained(
        folder, attn_implementation="eager", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert [ref.config.id2label[i] for i in range(train.num_labels)] == train.label_names
    hf_tok = transformers.BertTokenizerFast.from_pretrained(folder)
    text = val.texts[0]
    enc = tokenizer.encode_pair(text, None, 32)
    assert hf_tok(text)["input_ids"] == enc["input_ids"]
    ids = torch.tensor([enc["input_ids"]])
    with torch.no_grad():
        ours = result.model.eval()(ids).logits
        theirs = ref.eval()(input_ids=ids).logits
    assert (ours - theirs).abs().max().item() <= 1e-5
    back = load_pretrained(folder, BertForSequenceClassification)
    assert back.label_names == train.label_names and back.num_labels == train.num_labels
    with torch.no_grad():
        assert torch.equal(back(ids).logits, ours)
    saved = json.loads((folder / "finetune_result.json").read_text())
    assert saved["accuracy"] == result.accuracy and saved["confusion"] == result.confusion


def test_checkpoint_encoder_is_kept_and_the_fresh_head_is_seeded(checkpoint):
    pre = load_pretrained(checkpoint, BertForPreTraining)
    a, _ = classifier_from_checkpoint(checkpoint, 3, seed=5)
    b, _ = classifier_from_checkpoint(checkpoint, 3, seed=5)
    c, _ = classifier_from_checkpoint(checkpoint, 3, seed=6)
    for name, value in pre.bert.state_dict().items():
        assert torch.equal(a.bert.state_dict()[name], value), name
    assert torch.equal(a.classifier.weight, b.classifier.weight)
    assert not torch.equal(a.classifier.weight, c.classifier.weight)


def test_scratch_twin_has_the_same_architecture_and_none_of_the_weights(checkpoint):
    pre, _ = classifier_from_checkpoint(checkpoint, 4)
    twin = classifier_from_scratch(pre.config, 4, seed=0)
    assert twin.config == pre.config
    assert [k for k in twin.state_dict()] == [k for k in pre.state_dict()]
    assert not torch.equal(twin.bert.embeddings.word_embeddings.weight, pre.bert.embeddings.word_embeddings.weight)


def test_the_same_seed_repeats_the_run_exactly(checkpoint, topics):
    train, val = topics
    runs = []
    for _ in range(2):
        model, tokenizer = classifier_from_checkpoint(checkpoint, train.num_labels, seed=0)
        runs.append(finetune(model, tokenizer, train, val, _quick(max_steps=4)))
    assert [h.loss for h in runs[0].history] == [h.loss for h in runs[1].history]
    assert runs[0].confusion == runs[1].confusion


def test_learning_rate_warms_up_then_decays_linearly(checkpoint, topics):
    train, val = topics
    model, tokenizer = classifier_from_checkpoint(checkpoint, train.num_labels)
    result = finetune(model, tokenizer, train, val, _quick(max_steps=10, warmup_ratio=0.2, learning_rate=1e-3))
    lrs = [h.lr for h in result.history]
    assert lrs[:2] == pytest.approx([5e-4, 1e-3])
    assert lrs[2:] == pytest.approx([1e-3 * (1 - k / 8) for k in range(8)])


def test_gradient_norm_is_clipped_before_the_update(checkpoint, topics):
    train, val = topics
    model, tokenizer = classifier_from_checkpoint(checkpoint, train.num_labels)
    tuner = Finetuner(model, tokenizer, train, val, _quick(max_steps=1, max_grad_norm=1e-3, learning_rate=1e-3))
    seen = {}
    original = torch.optim.AdamW.step

    def spy(self, *args, **kwargs):
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        seen["norm"] = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()
        return original(self, *args, **kwargs)

    torch.optim.AdamW.step = spy
    try:
        tuner.run()
    finally:
        torch.optim.AdamW.step = original
    assert tuner.history[0].grad_norm > 1e-2  # the norm before clipping is reported
    assert seen["norm"] == pytest.approx(1e-3, rel=1e-3)


def test_finetuning_from_scratch_learns_the_toy_topics(topics):
    train, val = topics
    tokenizer = train_tokenizer(train.texts, vocab_size=400)
    model = classifier_from_scratch(BertConfig.preset("nano", vocab_size=tokenizer.vocab_size), train.num_labels)
    result = finetune(model, tokenizer, train, val, _quick(max_steps=200, batch_size=32, learning_rate=2e-3, eval_points=4))
    assert result.evals[0].step == 0 and result.evals[-1].step == 200
    assert result.evals[0].accuracy < 0.3  # a fresh head is at chance (10 topics)
    assert result.accuracy > 0.6
    assert result.accuracy == result.evals[-1].accuracy
    assert sum(map(sum, result.confusion)) == len(val)


def test_stop_from_another_thread_ends_with_a_result(checkpoint, topics):
    train, val = topics
    model, tokenizer = classifier_from_checkpoint(checkpoint, train.num_labels)
    tuner = Finetuner(model, tokenizer, train, val, _quick(max_steps=None, time_budget_s=120), name="pretrained")
    thread = threading.Thread(target=tuner.run)
    thread.start()
    deadline = time.monotonic() + 30
    while len(tuner.history) < 3 and time.monotonic() < deadline:
        assert tuner.state in ("idle", "running")
        time.sleep(0.01)
    tuner.stop()
    thread.join(30)
    assert tuner.state == "stopped" and tuner.error is None
    assert tuner.result is not None and tuner.result.steps == len(tuner.history) >= 3
    assert tuner.progress.fraction < 0.5
    assert tuner.evals[-1].step == tuner.result.steps


def test_misclassified_examples_are_wrong_and_most_confident_first(checkpoint, topics):
    train, val = topics
    model, tokenizer = classifier_from_checkpoint(checkpoint, train.num_labels)
    result = finetune(model, tokenizer, train, val, _quick(max_steps=2, num_misclassified=5))
    assert len(result.misclassified) == 5
    assert all(m.true_label != m.predicted_label for m in result.misclassified)
    conf = [m.confidence for m in result.misclassified]
    assert conf == sorted(conf, reverse=True)
    assert result.misclassified[0].text in val.texts


def test_classify_text_gives_probabilities_and_refuses_empty_text(checkpoint):
    model, tokenizer = classifier_from_checkpoint(checkpoint, 3)
    probs = classify_text(model, tokenizer, "the farmer feeds the cows")
    assert len(probs) == 3 and sum(probs) == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(BertCoreError, match="type a sentence"):
        classify_text(model, tokenizer, "   ")


def test_confusion_matrix_and_macro_f1_against_hand_computed_values():
    m = confusion_matrix([0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0], 3)
    assert m == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]
    # F1: class 0 = 2*1/(2+2) = 0.5, class 1 = 2*2/(3+2) = 0.8, class 2 = 2*1/(1+2) = 2/3
    assert macro_f1(m) == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    assert "Sci/Tech" in format_confusion([[1, 0], [0, 1]], ["World", "Sci/Tech"])


def test_label_count_mismatch_and_bad_settings_are_refused(checkpoint, topics):
    train, val = topics
    model, tokenizer = classifier_from_checkpoint(checkpoint, 3)
    with pytest.raises(BertCoreError, match="3 outputs but the data has 10 labels"):
        Finetuner(model, tokenizer, train, val, _quick())
    with pytest.raises(BertCoreError, match="learning_rate must be"):
        FinetuneConfig(learning_rate=0)
    with pytest.raises(BertCoreError, match="give a number of steps"):
        FinetuneConfig(max_steps=None, time_budget_s=None)


def test_finetuning_dropout_is_applied_and_saved_in_the_config(checkpoint, topics, tmp_path):
    """A fine-tuning dropout is applied to every dropout layer and recorded; None keeps the model's own."""
    train, val = topics
    model, tokenizer = classifier_from_checkpoint(checkpoint, train.num_labels)
    set_dropout(model, 0.0)  # as our pretraining recipe leaves it
    result = finetune(model, tokenizer, train, val, _quick(max_steps=2, dropout=0.1))
    drops = [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert drops and all(p == 0.1 for p in drops)
    assert model.config.hidden_dropout_prob == 0.1 and model.config.attention_probs_dropout_prob == 0.1
    saved = json.loads((save_classifier(result, tmp_path / "clf") / "config.json").read_text())
    assert saved["hidden_dropout_prob"] == 0.1 and saved["attention_probs_dropout_prob"] == 0.1

    kept, _ = classifier_from_checkpoint(checkpoint, train.num_labels)
    set_dropout(kept, 0.3)
    finetune(kept, tokenizer, train, val, _quick(max_steps=2, dropout=None))  # None: the model's own setting
    assert all(m.p == 0.3 for m in kept.modules() if isinstance(m, torch.nn.Dropout))
    assert kept.config.hidden_dropout_prob == 0.3
    with pytest.raises(BertCoreError, match="dropout must be"):
        FinetuneConfig(dropout=1.0)


def test_checkpoint_without_tokenizer_is_refused(tmp_path):
    save_pretrained(BertForPreTraining(BertConfig.preset("nano", vocab_size=50)), tmp_path)
    with pytest.raises(BertCoreError, match="has no tokenizer"):
        classifier_from_checkpoint(tmp_path, 2)


# ---------------------------------------------------------------------------------------------- CLI


def _labelled_csv(path, topics):
    train, _ = topics
    rows = ["sentence,topic"] + [f'"{t}",{train.label_names[y]}' for t, y in zip(train.texts, train.labels)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_cli_finetune_prints_metrics_and_saves_loadable_folders(checkpoint, topics, tmp_path, capsys):
    from bert_core.cli.main import main

    csv = _labelled_csv(tmp_path / "topics.csv", topics)
    out = tmp_path / "out"
    code = main(["finetune", "--checkpoint", str(checkpoint), "--csv", str(csv), "--train-size", "200",
                 "--val-size", "50", "--steps", "3", "--max-length", "32", "--device", "cpu",
                 "--compare-scratch", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "accuracy" in captured.out and "macro-F1" in captured.out
    assert "pretrained" in captured.out and "scratch" in captured.out
    assert "rows = true label" in captured.out and "castle" in captured.out
    for folder in (out, out / "from-scratch"):
        model, info = transformers.BertForSequenceClassification.from_pretrained(folder, output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"]
        assert model.config.num_labels == 10


def test_cli_finetune_json_output(checkpoint, topics, tmp_path, capsys):
    from bert_core.cli.main import main

    csv = _labelled_csv(tmp_path / "topics.csv", topics)
    code = main(["finetune", "--checkpoint", str(checkpoint), "--csv", str(csv), "--text-column", "sentence",
                 "--label-column", "topic", "--train-size", "100", "--val-size", "40", "--steps", "2",
                 "--max-length", "32", "--device", "cpu", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["data"]["train"] == 100 and report["data"]["validation"] == 40
    (run,) = report["results"]
    assert run["name"] == "pretrained" and run["steps"] == 2 and 0 <= run["accuracy"] <= 1
    assert len(run["confusion"]) == 10


def test_cli_finetune_bad_column_is_one_error_line(checkpoint, topics, tmp_path, capsys):
    from bert_core.cli.main import main

    csv = _labelled_csv(tmp_path / "topics.csv", topics)
    code = main(["finetune", "--checkpoint", str(checkpoint), "--csv", str(csv), "--label-column", "stars",
                 "--steps", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1] == "error: no label column 'stars'; the columns are: sentence, topic. Choose one of those."


# ---------------------------------------------------------------------------------------------- the page


@pytest.fixture
def page(checkpoint, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("BERT_EXPLORER_CHECKPOINT", str(checkpoint))
    at = AppTest.from_file(str(Path(__file__).parent.parent / "pages" / "5_Fine-tune.py"), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    at.radio(key="ft_data").set_value("toy").run()  # these tests drive the page on the small built-in task
    return at


def test_page_runs_both_models_classifies_a_typed_sentence_and_a_reload_finds_the_results(page):
    at = page
    assert "does pretraining pay" in at.title[0].value
    at.number_input(key="ft_train").set_value(100)
    at.number_input(key="ft_val").set_value(40)
    at.number_input(key="ft_budget").set_value(1)
    at.number_input(key="ft_maxlen").set_value(32)
    at.run()
    next(b for b in at.button if "Fine-tune both" in b.label).click().run()
    finish_page_run(at)
    assert not at.exception, at.exception
    assert any(h.value == "Results" for h in at.subheader)
    table = next(d.value for d in at.dataframe if "run" in d.value.columns)
    assert list(table["run"]) == ["from pretrained", "from scratch"]
    at.text_input(key="ft_sentence").input("the farmer feeds the hungry cows").run()
    assert not at.exception, at.exception
    predictions = at.dataframe[-1].value
    assert list(predictions["model"]) == ["from pretrained", "from scratch"]
    assert set(predictions["prediction"]) <= set(toy_topic_task(0, 20).label_names)
    # A reload is a new session with the same URL: its `ft` key finds the same fine-tuning. A tab without it (or
    # with a key the server does not know) starts empty.
    key = at.query_params["ft"]
    from streamlit.testing.v1 import AppTest

    script = str(Path(__file__).parent.parent / "pages" / "5_Fine-tune.py")
    again = AppTest.from_file(script, default_timeout=60)
    again.query_params["ft"] = key
    again.run()
    assert not again.exception, again.exception
    assert any(h.value == "Results" for h in again.subheader)
    assert list(next(d.value for d in again.dataframe if "run" in d.value.columns)["run"]) == \
        ["from pretrained", "from scratch"]
    for query in ({}, {"ft": "not-a-key-of-this-server"}):
        stranger = AppTest.from_file(script, default_timeout=60)
        stranger.query_params.update(query)
        stranger.run()
        assert not stranger.exception and not any(h.value == "Results" for h in stranger.subheader)
        assert stranger.query_params.get("ft") in (None, [])


def test_a_full_server_queues_a_race_and_a_share_link_watches_it_without_steering(page, monkeypatch):
    """One queue for every training: a race started while the server's one slot is taken waits with its place and
    the sharing rules shown (never refused), its share link watches it without Stop or Reset, and it runs by itself
    when the slot frees."""
    from streamlit.testing.v1 import AppTest

    from bert_core.app import app_state
    from bert_core.serve import jobs
    from tests.race_stand_ins import race_spec

    monkeypatch.setenv(jobs.MAX_TRAININGS_ENV, "1")
    monkeypatch.setenv(jobs.PROCESS_ENV, "0")   # the stand-in below trains on a thread (it cannot be pickled)
    release = threading.Event()

    class Blocking(StandInView):
        def run(self):
            release.wait(60)
            self.state = "finished"

        def stop(self):
            release.set()

    other = app_state.RUNS.submit(race_spec(Blocking, kind="labels", data_label="toy", model_label="nano",
                                               models=2, budget_s=30), "someone-else")
    mine = None
    try:
        at = page
        for key, value in (("ft_train", 100), ("ft_val", 40), ("ft_budget", 1), ("ft_maxlen", 32)):
            at.number_input(key=key).set_value(value)
        at.run()
        next(b for b in at.button if "Fine-tune both" in b.label).click().run()
        assert not at.exception and not at.error, (at.exception, at.error)
        mine = app_state.RUNS.get(at.query_params["ft"])
        assert mine is not None and mine.phase == "queued" and mine.job is None
        assert any("Queued" in i.value and "0 run(s) ahead of this race" in i.value for i in at.info)
        assert any("between two of its models" in c.value for c in at.caption)
        script = str(Path(__file__).parent.parent / "pages" / "5_Fine-tune.py")
        viewer = AppTest.from_file(script, default_timeout=60)
        viewer.query_params["ftwatch"] = mine.view_id
        viewer.run()
        assert not viewer.exception, viewer.exception
        assert any("watching a shared race" in i.value for i in viewer.info)
        stop, reset = (next(b for b in viewer.button if b.label == name) for name in ("Stop", "Reset"))
        assert stop.disabled and reset.disabled and "ft" not in viewer.query_params
        release.set()                                  # the slot frees: the race starts by itself
        finish_page_run(at)
        assert not at.exception, at.exception
        assert mine.phase == "finished" and any(h.value == "Results" for h in at.subheader)
    finally:
        release.set()
        for run in (other, mine):
            if run is not None:
                app_state.RUNS.discard(run.run_id)


def test_page_shows_a_message_for_a_split_larger_than_the_data(page):
    at = page
    at.number_input(key="ft_train").set_value(100_000).run()
    next(b for b in at.button if "Fine-tune both" in b.label).click().run()
    assert not at.exception
    assert any("has only 3000" in e.value for e in at.error)


def test_the_default_fine_tuning_rate_follows_the_model_size_and_a_flag_wins(checkpoint, topics, tmp_path, capsys):
    from bert_core.cli.main import main
    from bert_core.training.finetune import finetune_learning_rate
    from bert_core.training.run_builder import pretraining_rate_of

    # A model that records no pretraining rate: from its size alone.
    assert finetune_learning_rate(BertConfig.preset("tiny")) == 1e-3  # measured best for the shipped model
    assert finetune_learning_rate(BertConfig.preset("mini")) == pytest.approx(2.5e-4)
    assert 2e-5 <= finetune_learning_rate(BertConfig.preset("base")) <= 5e-5  # the BERT paper's range
    # One made here: the rate its weights trained at, x 128 / hidden (measured best: tiny 1e-3, grown mini 5e-4).
    assert finetune_learning_rate(BertConfig.preset("tiny"), 1e-3) == 1e-3
    assert finetune_learning_rate(BertConfig.preset("mini"), 1e-3) == pytest.approx(5e-4)
    assert finetune_learning_rate(BertConfig.preset("nano"), 2e-3) == 1e-3      # never above 1e-3
    assert finetune_learning_rate(BertConfig.preset("base"), 1e-4) == 2e-5      # nor below 2e-5
    # Answer spans learn at half the rate (the mini's curriculum was measured at 2.5e-4); tags at the rule's.
    assert finetune_learning_rate(BertConfig.preset("mini"), 1e-3, kind="spans") == pytest.approx(2.5e-4)
    assert finetune_learning_rate(BertConfig.preset("mini"), 1e-3, kind="tags") == pytest.approx(5e-4)
    with pytest.raises(BertCoreError, match="unknown kind"):
        finetune_learning_rate(BertConfig.preset("mini"), kind="poems")
    assert pretraining_rate_of({"train_config": {"learning_rate": 1e-3}}) == 1e-3
    for damaged in (None, [], {"train_config": None}, {"train_config": {"learning_rate": "fast"}},
                    {"train_config": {"learning_rate": -1.0}}, {"train_config": {"learning_rate": float("nan")}},
                    {"train_config": {"learning_rate": True}}):
        assert pretraining_rate_of(damaged) is None, damaged
    # A continuation at a lower rate keeps the highest rate behind its weights (the 256-token mini: 5e-4 after 1e-3);
    # a higher one, or a start that records none or a damaged one, gives the run's own.
    def continued(own, before):
        return {"train_config": {"learning_rate": own}, "metadata": {"init_from": {"pretraining_rate": before}}}
    assert pretraining_rate_of(continued(5e-4, 1e-3)) == 1e-3
    assert pretraining_rate_of(continued(2e-3, 1e-3)) == 2e-3
    for before in (None, "fast", -1.0, float("inf"), True):
        assert pretraining_rate_of(continued(5e-4, before)) == 5e-4, before
    assert pretraining_rate_of(continued(None, 1e-3)) is None
    wide = tmp_path / "mini"
    tokenizer = BertTokenizer.load(checkpoint)
    save_pretrained(BertForPreTraining(BertConfig.preset("mini", vocab_size=tokenizer.vocab_size,
                                                         max_position_embeddings=64)), wide, tokenizer=tokenizer)
    csv = _labelled_csv(tmp_path / "topics.csv", topics)
    pretrained_here, damaged = tmp_path / "mini-here", tmp_path / "mini-damaged"
    for folder, text in ((pretrained_here, json.dumps({"train_config": {"learning_rate": 1e-3}})),
                         (damaged, "{not json")):
        shutil.copytree(wide, folder)
        (folder / "trainer_state.json").write_text(text)
    rates = []
    for folder, flags in ((checkpoint, []), (wide, []), (pretrained_here, []), (damaged, []),
                          (pretrained_here, ["--lr", "2e-4"])):
        code = main(["finetune", "--checkpoint", str(folder), "--csv", str(csv), "--train-size", "40",
                     "--val-size", "20", "--steps", "1", "--max-length", "32", "--device", "cpu", "--json", *flags])
        assert code == 0
        rates.append(json.loads(capsys.readouterr().out)["config"]["learning_rate"])
    assert rates == [1e-3, pytest.approx(2.5e-4), pytest.approx(5e-4), pytest.approx(2.5e-4), 2e-4]


def test_without_the_shared_folder_the_page_offers_the_real_tasks_and_fetches_one(checkpoint, tmp_path, monkeypatch):
    # A fresh clone or a Space has no ../shared/data: polarity and AG News are still offered, and fetched on demand.
    from dataclasses import replace

    from streamlit.testing.v1 import AppTest

    from bert_core.data import task_downloads
    from tests.test_task_downloads import _polarity_tarball

    monkeypatch.setenv("BERT_EXPLORER_CHECKPOINT", str(checkpoint))
    monkeypatch.setenv("BERT_SHARED_DATA", str(tmp_path / "absent"))
    monkeypatch.setenv("BERT_CORE_CACHE", str(tmp_path / "cache"))
    task = task_downloads.TASKS["polarity"]
    offline = replace(task, remote=replace(task.remote, url="http://127.0.0.1:9/rt-polaritydata.tar.gz"))
    monkeypatch.setitem(task_downloads.TASKS, "polarity", offline)
    at = AppTest.from_file(str(Path(__file__).parent.parent / "pages" / "5_Fine-tune.py"), default_timeout=60)
    at.run()
    assert at.radio(key="ft_data").value == "toy_order"  # no real task on this server yet: the lesson's built-in one
    offered = at.radio(key="ft_data").options
    assert any("polarity" in o for o in offered) and any("AG News" in o for o in offered), offered
    at.radio(key="ft_data").set_value("polarity").run()
    assert not at.exception, at.exception
    assert any("not on this server yet" in i.value for i in at.info)
    at.button(key="ft_fetch_task").click().run()  # offline: said on the page, nothing kept
    assert not at.exception, at.exception
    assert any("Could not fetch" in e.value and "could not download" in e.value for e in at.error)
    monkeypatch.setenv("BERT_EXPLORER_PUBLIC", "1")  # a public server's visitor reads no server folder
    at.button(key="ft_fetch_task").click().run()
    assert any("Could not fetch" in e.value for e in at.error)
    assert not any(str(tmp_path) in e.value for e in at.error), [e.value for e in at.error]
    monkeypatch.delenv("BERT_EXPLORER_PUBLIC")
    assert not (tmp_path / "cache" / "polarity-download.csv").exists()
    online = replace(task, remote=replace(task.remote, url=_polarity_tarball(tmp_path / "rt.tar.gz").as_uri()))
    monkeypatch.setitem(task_downloads.TASKS, "polarity", online)
    at.button(key="ft_fetch_task").click().run()
    assert not at.exception, at.exception
    assert not any("not on this server yet" in i.value for i in at.info)
    assert any("3 examples, 2 labels (negative 1, positive 2)" in c.value for c in at.caption), \
        [c.value for c in at.caption]


def test_a_real_task_is_the_default_where_one_is_on_the_server(checkpoint, shared_data, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("BERT_EXPLORER_CHECKPOINT", str(checkpoint))
    at = AppTest.from_file(str(Path(__file__).parent.parent / "pages" / "5_Fine-tune.py"), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    assert at.radio(key="ft_data").value == "polarity"
    assert at.number_input(key="ft_train").value == 2000 and at.number_input(key="ft_val").value == 500
    assert any("9,000 examples, 2 labels (negative 4,500, positive 4,500)" in c.value for c in at.caption), \
        [c.value for c in at.caption]
    assert any(c.value.startswith("Runs train on this server's CPU") for c in at.caption)  # where, said
    at.radio(key="ft_kind").set_value("tags").run()
    at.radio(key="ft_kind").set_value("labels").run()
    assert at.radio(key="ft_data").value == "polarity"


def test_layer_decay_gives_each_layer_its_share_of_the_rate():
    from bert_core.model.bert import BertForSequenceClassification, adamw

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig.preset("nano", vocab_size=50, num_hidden_layers=3), 2)
    names = {id(p): n for n, p in model.named_parameters()}
    optimizer = adamw(model, 1e-3, layer_decay=0.5)
    rate = {names[id(p)]: g["lr"] for g in optimizer.param_groups for p in g["params"]}
    assert rate["classifier.weight"] == rate["bert.pooler.dense.weight"] == pytest.approx(1e-3)
    assert rate["bert.encoder.layer.2.output.dense.weight"] == pytest.approx(5e-4)
    assert rate["bert.encoder.layer.0.attention.self.query.bias"] == pytest.approx(1.25e-4)
    assert rate["bert.embeddings.word_embeddings.weight"] == pytest.approx(6.25e-5)
    decay = {names[id(p)]: g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
    assert decay["bert.encoder.layer.0.attention.self.query.bias"] == 0 and decay["classifier.weight"] == 0.01
    plain = adamw(model, 1e-3)  # without decay: BERT's two groups, as before
    assert len(plain.param_groups) == 2 and all(g["lr"] == 1e-3 for g in plain.param_groups)


def test_finetuning_with_layer_decay_moves_the_embeddings_less(topics):
    from bert_core.model.bert import BertForSequenceClassification

    def moved(layer_decay):
        torch.manual_seed(0)
        model = BertForSequenceClassification(BertConfig.preset("nano", vocab_size=400), topics[0].num_labels)
        tokenizer = train_tokenizer(topics[0].texts, vocab_size=400)
        before = model.bert.embeddings.word_embeddings.weight.detach().clone()
        finetune(model, tokenizer, topics[0], topics[1], _quick(max_steps=20, layer_decay=layer_decay))
        return (model.bert.embeddings.word_embeddings.weight.detach() - before).abs().sum().item()

    assert moved(0.3) < 0.5 * moved(1.0)


def test_mean_pooling_reads_the_mean_of_the_real_tokens_whatever_the_padding():
    from bert_core.model.bert import BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig.preset("nano", vocab_size=50), 3, pooling="mean").eval()
    assert model.bert.pooler is None
    ids = torch.tensor([[2, 7, 9, 11, 3]])
    padded = torch.tensor([[2, 7, 9, 11, 3, 0, 0], [2, 8, 3, 0, 0, 0, 0]])
    mask = padded.ne(0).long()
    with torch.no_grad():
        alone = model(ids).logits
        batch = model(padded, attention_mask=mask).logits
        states = model.bert(ids)[0]
        by_hand = model.classifier(states.mean(1))
    torch.testing.assert_close(batch[0], alone[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(alone, by_hand, rtol=1e-5, atol=1e-6)


def test_cli_finetunes_with_mean_pooling_and_the_folder_loads_back_with_it(checkpoint, topics, tmp_path, capsys):
    from bert_core.cli.main import main
    from bert_core.model.bert import BertForSequenceClassification
    from bert_core.model.hf import load_pretrained

    csv = _labelled_csv(tmp_path / "topics.csv", topics)
    code = main(["finetune", "--checkpoint", str(checkpoint), "--csv", str(csv), "--text-column", "sentence",
                 "--label-column", "topic", "--train-size", "100", "--val-size", "40", "--steps", "2",
                 "--max-length", "32", "--device", "cpu", "--pooling", "mean", "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0 and "the mean of the tokens" in out, out
    assert load_pretrained(tmp_path / "out", model_class=BertForSequenceClassification).pooling == "mean"
    code = main(["finetune", "--checkpoint", str(checkpoint), "--task", "toy-qa", "--pooling", "mean", "--steps", "1"])
    assert code == 2 and "pooling choice is for sentence labels" in capsys.readouterr().err


def test_hold_back_takes_a_seeded_tenth_of_the_training_data_and_leaves_the_validation_set(topics):
    from bert_core.training.finetune_tasks import SentenceLabels

    task = SentenceLabels(*topics, pooling="mean")
    rest, selection = task.hold_back(0.1, seed=3)
    assert len(selection.val_data) == 30 and len(rest.train_data) == 270 and rest.train_data is selection.train_data
    assert rest.val_data is task.val_data and rest.pooling == selection.pooling == "mean"
    assert sorted(selection.val_data.texts + rest.train_data.texts) == sorted(topics[0].texts)  # a partition
    assert selection.val_data.texts == task.hold_back(0.1, seed=3)[1].val_data.texts  # seeded


def test_keep_best_restores_the_step_the_held_back_part_scored_best(topics, monkeypatch):
    # The held-back part's scores are made to peak at the second pass: the run must end with that pass's weights,
    # and the validation figure is taken on them.
    from bert_core.model.bert import BertForSequenceClassification
    from bert_core.training.finetune_results import Evaluation
    from bert_core.training.finetune_tasks import SentenceLabels

    scores = iter([0.1, 0.9, 0.2, 0.3, 0.3])
    real_evaluate = SentenceLabels.evaluate

    def evaluate(self, model, device, batch_size, num_misclassified=0):
        if len(self.val_data) == 30:  # the held-back part
            return Evaluation(accuracy=next(scores), macro_f1=0.0, loss=0.0, confusion=[], label_names=[],
                              misclassified=[])
        return real_evaluate(self, model, device, batch_size, num_misclassified)

    monkeypatch.setattr(SentenceLabels, "evaluate", evaluate)
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig.preset("nano", vocab_size=400), topics[0].num_labels)
    tokenizer = train_tokenizer(topics[0].texts, vocab_size=400)
    snapshots = []

    def keep(event):
        if isinstance(event, FinetuneEval):
            snapshots.append((event.step, {k: v.clone() for k, v in model.state_dict().items()}))

    result = finetune(model, tokenizer, topics[0], topics[1], _quick(max_steps=8, eval_points=4, keep_best=True),
                      callbacks=[keep])
    step, weights = snapshots[1]
    assert result.best_step == step and result.steps == 8 and 0 < step < 8
    for k, v in result.model.state_dict().items():
        assert torch.equal(v, weights[k]), k
    assert result.to_dict()["best_step"] == step


def test_cli_keep_best_says_which_step_it_kept(checkpoint, topics, tmp_path, capsys):
    from bert_core.cli.main import main

    csv = _labelled_csv(tmp_path / "topics.csv", topics)
    code = main(["finetune", "--checkpoint", str(checkpoint), "--csv", str(csv), "--text-column", "sentence",
                 "--label-column", "topic", "--train-size", "100", "--val-size", "40", "--steps", "4",
                 "--eval-points", "2", "--max-length", "32", "--device", "cpu", "--keep-best", "--compare-scratch"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("kept the weights of step") == 2 and "held-back 10% of the training data" in out, out


def test_every_kind_holds_back_whole_units_of_its_training_data():
    from bert_core.data.answer_spans_data import toy_qa_task
    from bert_core.data.token_tags_data import TaggedSentences
    from bert_core.training.finetune import split_task

    spans = split_task(toy_qa_task(0), 300, 100, 0)
    rest, selection = spans.hold_back(0.1, 0)
    passages = {ex.context for ex in selection.val_data.examples}
    assert passages and not passages & {ex.context for ex in rest.train_data.examples}  # whole passages
    assert len(rest.train_data) + len(selection.val_data) == len(spans.train_data)
    words = [["the", "cat", "sat"], ["a", "dog"]] * 10
    tags = TaggedSentences(words=words, tags=[[0, 1, 1], [0, 1]] * 10, tag_names=["B-NP", "I-NP"], scheme="iob",
                           source="t")
    rest, selection = split_task(tags, 16, 4, 0).hold_back(0.25, 0)
    assert (len(rest.train_data), len(selection.val_data), len(rest.val_data)) == (12, 4, 4)

"""Fine-tuning budgets that a busy machine cannot bend (issue "The lesson keeps its word"): a race and the CLI's
`finetune` count steps, a time cap only cuts a run short, and then says so; and the built-in word-order task, where
pretraining on the toy stories must pay. The machine's load is played by a clock that runs 40 times fast."""

import re
import time

import pytest
import torch

from bert_core.data.classification_data import ORDER_LABELS, toy_order_task
from bert_core.model.bert import BertForPreTraining
from bert_core.model.config import BertConfig
from bert_core.model.tokenization import train_tokenizer
from bert_core.training import run_loop
from bert_core.training.finetune import load_task
from tests.page_races import build_comparison
from bert_core.training.finetune_settings import FINETUNE_STEPS, TOY_QA_STEPS
from bert_core.training.finetune_settings import FinetuneConfig, page_settings
from tests.app_fixtures import finish_page_run

SETTINGS = dict(train=120, val=60, seed=3, lr=1e-3, batch=16, maxlen=32)


@pytest.fixture(scope="module")
def order_task():
    return toy_order_task(seed=0, num_examples=200)


@pytest.fixture(scope="module")
def nano(order_task):
    tok = train_tokenizer(order_task.texts, vocab_size=300)
    torch.manual_seed(0)
    config = BertConfig.preset("nano", vocab_size=tok.vocab_size, max_position_embeddings=64,
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertForPreTraining(config), tok


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def test_the_word_order_task_holds_the_same_words_in_both_classes_and_repeats_with_its_seed(order_task):
    assert order_task.label_names == ORDER_LABELS
    assert 0.35 < sum(order_task.labels) / len(order_task) < 0.65
    for text in order_task.texts:   # written alike: only the order of the words differs
        assert text[0].isupper() and text.endswith(".") and text.count(".") == 1 and "," not in text
        assert text[1:-1] == text[1:-1].lower()
    again = toy_order_task(seed=0, num_examples=200)
    assert again.texts == order_task.texts and again.labels == order_task.labels
    assert toy_order_task(seed=1, num_examples=200).texts != order_task.texts
    # A story sentence and its shuffle hold the same words: the seeded draw is rebuilt here without the shuffle.
    import random

    from bert_core.data.corpora import generate_toy_corpus

    rng = random.Random(0)
    for story, text, label in zip(generate_toy_corpus(num_documents=200, seed=20_000).documents, order_task.texts,
                                  order_task.labels):
        words = [w.lower() for w in re.findall(r"[A-Za-z']+", rng.choice(story))]
        if rng.random() < 0.5 and len(set(words)) > 1:
            assert label == 1 and sorted(_words(text)) == sorted(words) and _words(text) != words
            order = words[:]
            while order == words:
                rng.shuffle(order)
        else:
            assert label == 0 and _words(text) == words


def test_the_cli_and_the_page_budget_in_steps_with_the_time_cap_apart():
    from bert_core.cli.finetune import config_from_args
    from bert_core.cli.main import build_parser

    def config(*flags):
        return config_from_args(build_parser().parse_args(["finetune", *flags]))

    for flags in ([], ["--task", "toy-order"], ["--conll", "x.txt"], ["--squad", "x.json"]):
        made = config(*flags)
        assert made.max_steps == FINETUNE_STEPS and made.time_budget_s is None, flags
    assert config("--task", "toy-qa").max_steps == TOY_QA_STEPS
    timed = config("--time-budget", "9")
    assert timed.time_budget_s == 9 and timed.max_steps is None
    def page(**widgets):
        return FinetuneConfig(**page_settings({f"ft_{k}": v for k, v in {**SETTINGS, **widgets}.items()}))

    assert (page(steps=40, budget=300).max_steps, page(steps=40, budget=300).time_budget_s) == (40, 300)
    assert page(steps=None, budget=30).max_steps is None   # seconds alone, as before


def test_load_task_names_the_word_order_task():
    data = load_task(task="toy-order", seed=2)
    assert data.label_names == ORDER_LABELS and data.texts == toy_order_task(seed=2).texts


def _race(nano, task, **budget):
    model, tok = nano
    comparison = build_comparison(task, model, tok, {**SETTINGS, **budget})
    comparison.run()
    assert comparison.error is None, comparison.error
    return comparison


@pytest.fixture
def busy_clock(monkeypatch):
    """A machine 40 times slower: every interval the run loop measures is 40 times as long."""
    real, start = time.monotonic, time.monotonic()
    monkeypatch.setattr(run_loop.time, "monotonic", lambda: start + 40 * (real() - start))


def _figures(comparison):
    return {name: (r.steps, r.accuracy, r.loss, [(e.step, e.accuracy) for e in r.evals])
            for name, r in comparison.results.items()}


def test_a_race_in_steps_gives_a_busy_machine_the_same_figures_and_weights(nano, order_task, request):
    quiet = _race(nano, order_task, steps=12, budget=3_600)
    quiet_figures = _figures(quiet)
    request.getfixturevalue("busy_clock")
    busy = _race(nano, order_task, steps=12, budget=3_600)
    assert _figures(busy) == quiet_figures
    for name, result in busy.results.items():
        assert result.steps == result.steps_asked == 12 and not result.cut_short
        for a, b in zip(result.model.state_dict().values(), quiet.results[name].model.state_dict().values()):
            assert torch.equal(a, b), name


def test_a_time_cap_cuts_a_slow_run_short_and_says_so(nano, order_task, busy_clock):
    capped = _race(nano, order_task, steps=100_000, budget=2)
    for result in capped.results.values():
        assert result.state == "finished" and result.steps < result.steps_asked == 100_000
        assert result.cut_short and result.to_dict()["steps_asked"] == 100_000


def test_the_page_budgets_in_steps_and_a_race_of_another_kind_is_not_drawn_under_new_settings(monkeypatch):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from bert_core.app import app_state

    at = AppTest.from_file(str(Path(__file__).parent.parent / "pages" / "5_Fine-tune.py"), default_timeout=90)
    at.run()
    at.radio(key="ft_data").set_value("toy_order").run()
    assert at.number_input(key="ft_steps").value == 300 and at.number_input(key="ft_budget").value == 300
    for key, value in (("ft_train", 60), ("ft_val", 40), ("ft_steps", 6)):
        at.number_input(key=key).set_value(value)
    at.run()
    next(b for b in at.button if "Fine-tune both" in b.label).click().run()
    finish_page_run(at)
    assert any(h.value == "Results" for h in at.subheader) and not at.exception
    assert not any("Cut short" in w.value for w in at.warning)
    at.radio(key="ft_kind").set_value("tags").run()
    assert not any(h.value == "Results" for h in at.subheader)
    assert any("Your last race was on sentence labels" in i.value for i in at.info), [i.value for i in at.info]
    at.radio(key="ft_kind").set_value("labels").run()
    assert any(h.value == "Results" for h in at.subheader)
    for run in app_state.RUNS.runs():
        app_state.RUNS.discard(run.run_id, wait=30)

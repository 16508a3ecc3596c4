"""The Train page's defaults follow the corpus: toy keeps its measured lesson settings, real text gets the CLI's
default recipe (bert_core.training.recipes), and a value the user typed stays when the corpus changes."""

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from bert_core.serve import model_sources  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOY = dict(train_vocab=2000, train_preset="nano", train_steps=2000, train_batch=16, train_lr=3e-3, train_seq=32,
           train_init=0.02, train_dropout=0.0, train_short_seq=0, train_eval_every=100)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from tests.app_fixtures import train_nano_checkpoint

    return train_nano_checkpoint(tmp_path_factory.mktemp("ckpt") / "nano-toy")


def _train_page(checkpoint, monkeypatch) -> AppTest:
    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(checkpoint))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.switch_page("pages/2_Train.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _values(at, keys) -> dict:
    return {k: at.session_state[k] for k in keys}


def _page_real(preset: str) -> dict:
    from bert_core.training.train_config import default_recipe

    from bert_core.training.recipes import PAGE_GROWTH

    recipe = default_recipe(preset)
    cfg = recipe["train_config"]
    values = dict(train_vocab=8000, train_batch=cfg.batch_size, train_lr=cfg.learning_rate,
                  train_seq=cfg.max_seq_length, train_init=recipe["initializer_range"], train_dropout=recipe["dropout"],
                  train_short_seq=cfg.short_seq_length, train_short_frac=cfg.short_seq_fraction,
                  train_short_batch=cfg.short_seq_batch_size, train_mask=cfg.mask_rate, train_grow=cfg.grow_fraction)
    if cfg.grow_fraction:   # a page run counts steps: the start size gets nearly all of them, its short phase half
        share = PAGE_GROWTH[preset][1]
        values.update(train_grow=share, train_short_frac=0.45)
    return values


def test_real_text_gets_the_cli_recipe_toy_its_own_and_a_typed_value_stays(checkpoint, monkeypatch):
    at = _train_page(checkpoint, monkeypatch)
    assert _values(at, TOY) == TOY
    at.selectbox(key="train_corpus").set_value("wikitext-2").run()
    real = _page_real("nano") | {"train_preset": "nano"}
    assert _values(at, real) == real                               # the CLI's recipe for the size, one source
    at.number_input(key="train_lr").set_value(5e-4).run()        # typed: stays on every corpus from now on
    at.selectbox(key="train_corpus").set_value("tinyshakespeare").run()
    assert at.session_state["train_lr"] == 5e-4 and _values(at, real | {"train_lr": 5e-4}) == real | {"train_lr": 5e-4}
    at.selectbox(key="train_corpus").set_value("toy").run()
    assert _values(at, TOY | {"train_lr": 5e-4}) == TOY | {"train_lr": 5e-4}
    assert not at.exception, [e.value for e in at.exception]


def test_the_size_picked_brings_its_recipe_and_the_page_shows_it(checkpoint, monkeypatch):
    from bert_core.training.recipes import page_recipe, recipe_for

    at = _train_page(checkpoint, monkeypatch)
    at.selectbox(key="train_corpus").set_value("wikitext-2").run()
    at.selectbox(key="train_preset").set_value("mini").run()
    assert _values(at, _page_real("mini")) == _page_real("mini")
    assert at.session_state["train_steps"] == page_recipe("mini", toy=False)["steps"]
    # The line under the settings describes what the page's fields hold (97% of its steps before it grows), not
    # the CLI's recipe for the size (70% of its time): issue #64.
    captions = " ".join(c.value for c in at.caption)
    page = page_recipe("mini", toy=False)
    assert f"grows to 4 x 256 after {page['grow_fraction']:.0%} of the run" in captions, captions
    assert recipe_for("mini").describe() not in captions
    at.selectbox(key="train_corpus").set_value("toy").run()       # toy: the lesson's shape, mini's own rates
    toy = page_recipe("mini", toy=True)
    assert (at.session_state["train_lr"], at.session_state["train_init"], at.session_state["train_seq"]) == \
        (toy["learning_rate"], toy["initializer_range"], toy["max_seq_length"])
    assert not at.exception, [e.value for e in at.exception]

"""A model that has read only the toy grammar, raced on English: the Fine-tune page offers its toy tasks first and
warns before an English race (a student's own default run, picked in the sidebar, met movie-review polarity at
chance)."""

from pathlib import Path

import pytest

from bert_core.inspect.finetune_kinds import KIND_PAGES, TOY_ON_POLARITY
from bert_core.serve.model_sources import ActiveModel
from tests.app_fixtures import train_nano_checkpoint

ROOT = Path(__file__).resolve().parent.parent


def _model(metadata: dict | None) -> ActiveModel:
    return ActiveModel(model=None, tokenizer=None, source="test",
                       trainer_state=None if metadata is None else {"metadata": metadata})


def test_a_model_is_toy_only_when_every_corpus_it_read_is_the_toy_grammar():
    assert _model({"corpora": ["toy"]}).toy_only
    assert _model({"corpora": ["toy"], "init_from": {"corpora": ["toy"]}}).toy_only
    assert not _model({"corpora": ["toy"], "init_from": {"corpora": ["wikitext-2"]}}).toy_only
    assert not _model({"corpora": ["toy", "brown"]}).toy_only
    assert not _model({}).toy_only and not _model(None).toy_only   # nothing recorded: nothing said


def test_each_kind_starts_a_toy_model_on_its_toy_task_and_warns_only_off_it():
    on_server = lambda choice: True   # noqa: E731 - every real task on this server
    for kind, page in KIND_PAGES.items():
        choices = {**page.built_in, "polarity": "", **page.uploads}
        chosen = page.default_data(choices, on_server, toy_model=True)
        assert chosen == next(iter(page.built_in), "polarity")
        assert page.toy_model_warning(chosen) is None or not page.built_in
        warning = page.toy_model_warning("polarity")
        assert "pretrained on the toy grammar only" in warning
        assert ("toy tasks come first" in warning) == bool(page.built_in), (kind, warning)
        lo, hi = TOY_ON_POLARITY["pretrained"]
        assert f"pretrained {lo:g}-{hi:g}%" in warning
    labels = KIND_PAGES["labels"]
    assert labels.default_data({**labels.built_in, "polarity": ""}, lambda c: True) == "polarity"   # English model


@pytest.fixture(scope="module")
def toy_checkpoint(tmp_path_factory):
    return train_nano_checkpoint(tmp_path_factory.mktemp("toy-run"))


def test_the_page_offers_a_toy_model_its_toy_task_and_warns_before_english(toy_checkpoint, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("BERT_EXPLORER_CHECKPOINT", str(toy_checkpoint))
    at = AppTest.from_file(str(ROOT / "pages" / "5_Fine-tune.py"), default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    assert at.radio(key="ft_data").value == "toy_order"
    assert list(at.radio(key="ft_data").options)[:2] == list(KIND_PAGES["labels"].built_in.values())
    assert not any("toy grammar only" in w.value for w in at.warning)
    at.radio(key="ft_data").set_value("polarity").run()
    assert not at.exception, at.exception
    assert any("pretrained on the toy grammar only" in w.value for w in at.warning), [w.value for w in at.warning]
    at.radio(key="ft_kind").set_value("tags").run()
    assert any("no toy version" in w.value for w in at.warning), [w.value for w in at.warning]

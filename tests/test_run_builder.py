"""One builder of a run (bert_core.training.run_builder) for the CLI and the app, the Train page's spec made in one place
(bert_core.serve.train_spec), and `train`'s options named by the settings they set (bert_core.training.run_settings)."""

import argparse
import dataclasses
from types import SimpleNamespace

import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.serve import app_storage, jobs
from bert_core.app.app_widgets import setting_cast
from bert_core.training import comparison, run_builder
from bert_core.training.lesson_settings import lesson_settings
from bert_core.training.run_settings import flag, setting
from bert_core.training.train_config import TrainConfig
from bert_core.training.train_spec import page_values
from tests.test_comparison import page_spec as documented_page_spec


def _train_parser() -> argparse.ArgumentParser:
    from bert_core.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["train"]


def test_every_train_option_stores_its_value_under_the_setting_it_sets():
    actions = {a.option_strings[0]: a.dest for a in _train_parser()._actions if a.option_strings[0] != "-h"}
    assert all(setting(option) == dest and flag(dest) == option for option, dest in actions.items()), actions
    assert actions["--lr"] == "learning_rate" and actions["--seq-len"] == "max_seq_length"
    # The command an app run writes uses only options that exist, each stored under the field it came from.
    for field, option in {**comparison.TRAIN_FLAGS, **comparison.SIZE_FLAGS}.items():
        if option:
            assert actions[option] == field, option
    # Every TrainConfig field `train` has an option for reaches the config under its own name.
    options = {f.name for f in dataclasses.fields(TrainConfig)} & set(actions.values())
    assert options == ({f for f, o in comparison.TRAIN_FLAGS.items() if o}
                       | {"checkpoint_every_s", "precision", "compile"})


def _values(**changes) -> dict:
    """The Train page's session state before anything is typed, as its widgets hold it."""
    return {**page_values(), "train_probes": "", "train_att_probe": "", **changes}


def test_the_page_spec_is_made_in_one_place_from_the_widgets_and_checked():
    spec = jobs.page_spec(_values(), ("toy", "toy"))
    documented = documented_page_spec()  # the default run as test_comparison.py knows it
    assert dataclasses.replace(spec, train={}) == dataclasses.replace(documented, train={})
    assert {name: spec.train[name] for name in documented.train} == documented.train
    assert spec.train["short_seq_length"] == 0 and spec.train["objective"] == "mlm"
    assert comparison.train_command(spec) == comparison.train_command(documented)
    assert spec.train_config() == TrainConfig(**spec.train)
    custom = jobs.page_spec(_values(train_preset="custom", train_layers=3, train_hidden=48, train_heads=3,
                                    train_ffn=96), ("toy", "toy"))
    assert comparison.model_sizes(custom) == (3, 48, 3, 96) and custom.preset == "nano"
    gpt = jobs.page_spec(_values(train_objective="clm"), ("toy", "toy"))
    assert gpt.train["objective"] == "clm" and gpt.train["nsp"] is False
    with pytest.raises(BertCoreError, match="divisible"):
        jobs.page_spec(_values(train_preset="custom", train_hidden=64, train_heads=3), ("toy", "toy"))
    with pytest.raises(BertCoreError, match="no \\[MASK\\]"):
        jobs.page_spec(_values(train_probes="no blank here"), ("toy", "toy"))


def test_the_widgets_start_from_the_lesson_and_read_their_urls_as_their_types():
    values = {"train_corpus": "wikitext-2", "train_preset": "mini"}
    real = {s.widget.key: (value, setting_cast(s)) for s, value, _ in jobs.widget_defaults(values)}
    lesson = lesson_settings("wikitext-2", "mini")
    assert {key: value for key, (value, _) in real.items() if key not in values} == {
        key: lesson[name] for key, name in jobs.WIDGETS.items() if key not in values}
    assert real["train_corpus"][0] == "toy" and real["train_preset"][0] == "nano"   # chosen first, not followed
    assert real["train_lr"][1]("0.001") == 0.001 and real["train_steps"][1]("12") == 12
    assert real["train_nsp"][1]("False") is False and real["train_nsp"][1]("true") is True


def test_an_upload_is_checked_then_written_to_the_runs_scratch_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(app_storage.SCRATCH_DIR_ENV, str(tmp_path))
    upload = SimpleNamespace(name="notes.txt", getvalue=lambda: "\ufeffOne line.\nTwo lines.\n".encode())
    values = _values(train_corpus="upload", train_upload=upload)
    spec, label = jobs.page_corpus(values, "run:abc")
    assert label == "notes.txt" and open(spec, encoding="utf-8").read() == "One line.\nTwo lines.\n"
    assert jobs.preview_corpus(values) == ("", "notes.txt")
    assert jobs.corpus_text(values) == "One line.\nTwo lines.\n" and jobs.corpus_text(_values()) is None
    with pytest.raises(BertCoreError, match="empty"):
        jobs.page_corpus(_values(train_corpus="paste", train_paste=""), "run:abc")
    with pytest.raises(BertCoreError, match="upload first"):
        jobs.page_corpus(_values(train_corpus="upload"), "run:abc")


def _plan(**train) -> run_builder.RunPlan:
    config = TrainConfig(max_steps=2, batch_size=4, max_seq_length=32, eval_batches=2, device="cpu", **train)
    return run_builder.RunPlan(corpora=("toy",), config=config, vocab_size=300,
                               model_overrides={"initializer_range": 0.05})


def test_the_builder_makes_the_same_run_for_the_same_plan_and_a_warm_start_keeps_its_weights():
    first, again = run_builder.build_run(_plan(seed=5)), run_builder.build_run(_plan(seed=5))
    a, b = first.trainer, again.trainer
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
    assert torch.equal(next(iter(a.data)).input_ids, next(iter(b.data)).input_ids)
    assert a.metadata["corpora"] == ["toy"] and a.metadata["heldout"] == first.record
    assert a.model.config.initializer_range == 0.05 and a.model.config.max_position_embeddings == 512
    causal = run_builder.build_run(_plan(objective="clm", nsp=False)).trainer
    assert causal.model.config.attention == "causal"
    start = run_builder.WarmStart(a.model, a.tokenizer, {"step": 2, "metadata": {"commands": ["first"],
                                                                               "preset": "tiny"}}, label="earlier")
    warm = run_builder.build_run(dataclasses.replace(_plan(seed=6), start=start, commands=("second",))).trainer
    assert warm.model is a.model and warm.tokenizer is a.tokenizer
    assert warm.metadata["commands"] == ["first", "second"] and warm.metadata["preset"] == "tiny"
    assert warm.metadata["init_from"] == {"folder": "earlier", "step": 2, "preset": "tiny", "corpora": None}
    trained = dataclasses.replace(start, trainer_state={**start.trainer_state, "train_config": {"learning_rate": 1e-3}})
    again = run_builder.build_run(dataclasses.replace(_plan(seed=6, learning_rate=5e-4), start=trained)).trainer
    assert again.metadata["init_from"]["pretraining_rate"] == 1e-3
    dropout = dataclasses.replace(start, config_changes={"hidden_dropout_prob": 0.2})
    rebuilt = run_builder.build_model(dataclasses.replace(_plan(), start=dropout), a.tokenizer)
    assert rebuilt.config.hidden_dropout_prob == 0.2
    assert all(torch.equal(x, y) for x, y in zip(rebuilt.state_dict().values(), a.model.state_dict().values()))

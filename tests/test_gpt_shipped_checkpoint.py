"""The GPT-style checkpoint beside the BERT one: small, complete, loadable by transformers as BertLMHeadModel, and
its metrics.json reproducible with the two commands it records (relative tolerances, as for the BERT)."""

import json

import pytest

from bert_core.paths import DEFAULT_CHECKPOINT

GPT = DEFAULT_CHECKPOINT.parent / "gpt-tiny-english"
MAX_BYTES = 25 * 1024 * 1024

pytestmark = pytest.mark.slow  # ~15 s: its evaluation scores every next token, 182k of them, not 15% of them


@pytest.fixture(scope="module")
def metrics():
    return json.loads((GPT / "metrics.json").read_text())


def test_the_gpt_checkpoint_is_complete_and_small():
    names = {p.name for p in GPT.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "trainer_state.json",
            "metrics.json"} <= names
    assert "optimizer.safetensors" not in names
    assert sum(p.stat().st_size for p in GPT.iterdir()) < MAX_BYTES  # all of checkpoints/: test_mini_checkpoints


def test_it_was_trained_as_the_bert_was_but_for_the_next_token(metrics):
    bert = json.loads((DEFAULT_CHECKPOINT / "metrics.json").read_text())
    assert metrics["train_config"]["objective"] == "clm" and metrics["steps"] == bert["steps"]
    assert [c["spec"] for c in metrics["heldout_split"]["corpora"]] == \
        [c["spec"] for c in bert["heldout_split"]["corpora"]]
    assert (GPT / "vocab.txt").read_text() == (DEFAULT_CHECKPOINT / "vocab.txt").read_text()
    held = metrics["heldout"]
    assert held["next_token_accuracy"] > metrics["baselines"]["unigram"]["accuracy"] + 0.05


def test_transformers_loads_it_as_a_bert_lm_head_model():
    transformers = pytest.importorskip("transformers")
    model, info = transformers.BertLMHeadModel.from_pretrained(GPT, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and model.config.is_decoder


@pytest.mark.long  # a long check (`--long`): scores 182k held-out tokens
def test_heldout_and_eval_reproduce_the_recorded_figures(metrics, shared_data, tmp_path, monkeypatch):
    from bert_core.training.heldout import evaluate_text_file
    from bert_core.training.heldout import write_heldout_text

    monkeypatch.chdir(GPT.parent.parent)
    text_file = tmp_path / "heldout.txt"
    write_heldout_text(GPT, text_file)
    again = evaluate_text_file(GPT, text_file)
    recorded = metrics["eval"]
    for key, rel in (("perplexity", 1e-4), ("next_token_accuracy", 1e-3)):
        assert again[key] == pytest.approx(recorded[key], rel=rel), key

"""The pretrained model in checkpoints/: small enough to commit, complete, loadable by transformers, and its
metrics.json reproducible with the two commands it records."""

import json

import pytest

from bert_core.paths import DEFAULT_CHECKPOINT

MAX_BYTES = 25 * 1024 * 1024


@pytest.fixture(scope="module")
def metrics():
    return json.loads((DEFAULT_CHECKPOINT / "metrics.json").read_text())


def test_the_shipped_checkpoint_is_complete_and_small():
    names = {p.name for p in DEFAULT_CHECKPOINT.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "trainer_state.json",
            "metrics.json"} <= names
    assert "optimizer.safetensors" not in names, "optimizer state is for resuming, not for the repository"
    assert not any(n.endswith((".bin", ".pt", ".pkl")) for n in names)
    assert sum(p.stat().st_size for p in DEFAULT_CHECKPOINT.iterdir()) < MAX_BYTES


def test_metrics_json_holds_the_headline_figures(metrics):
    held = metrics["heldout"]
    assert held["masked_token_accuracy"] > metrics["baselines"]["unigram"]["accuracy"] + 0.05
    assert held["perplexity"] < metrics["baselines"]["unigram"]["perplexity"]
    assert 0.5 < held["nsp_accuracy"] <= 1
    assert metrics["training_time_s"] > 0 and metrics["machine"]["cpu_count"] >= 1
    assert all(c.startswith("python -m bert_core train") for c in metrics["commands"])
    ev = metrics["eval"]
    assert ev["commands"] == [f"python -m bert_core heldout --checkpoint checkpoints/{DEFAULT_CHECKPOINT.name} "
                              "--out heldout.txt",
                              f"python -m bert_core eval --checkpoint checkpoints/{DEFAULT_CHECKPOINT.name} "
                              "--text-file heldout.txt"]


def test_transformers_loads_the_shipped_folder_as_it_is():
    transformers = pytest.importorskip("transformers")
    model, info = transformers.BertForPreTraining.from_pretrained(DEFAULT_CHECKPOINT, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    tok = transformers.BertTokenizerFast.from_pretrained(DEFAULT_CHECKPOINT)
    from bert_core.model.tokenization import BertTokenizer

    ours = BertTokenizer.load(DEFAULT_CHECKPOINT)
    text = "The jury said the election was conducted fairly."
    assert tok(text)["input_ids"] == ours.encode_pair(text)["input_ids"]


@pytest.mark.long  # a long check (`--long`): scores the held-out text
def test_heldout_and_eval_reproduce_the_recorded_figures(metrics, shared_data, tmp_path, monkeypatch):
    """The README's reproduction recipe, run for real (needs ../shared/data, where the training text lives)."""
    from bert_core.training.heldout import evaluate_text_file
    from bert_core.training.heldout import write_heldout_text

    monkeypatch.chdir(DEFAULT_CHECKPOINT.parent.parent)  # the recorded corpus paths are relative to the repository
    text_file = tmp_path / "heldout.txt"
    write_heldout_text(DEFAULT_CHECKPOINT, text_file)
    again = evaluate_text_file(DEFAULT_CHECKPOINT, text_file)
    recorded = metrics["eval"]
    for key in ("masked_tokens", "sequences"):
        assert again[key] == recorded[key], key
    # Float sums differ between CPUs (Intel, AMD, ARM: other kernels, other orders), so figures are compared
    # relatively: the loss to 1e-4 (exp() turns it into perplexity, so the same for both), the accuracies to 1e-3
    # (an argmax that flips on a near-tie moves masked-token accuracy by 1/28,540 = 3.5e-5).
    for key, rel in (("mlm_loss", 1e-4), ("perplexity", 1e-4), ("masked_token_accuracy", 1e-3),
                     ("nsp_accuracy", 1e-3)):
        assert again[key] == pytest.approx(recorded[key], rel=rel), key

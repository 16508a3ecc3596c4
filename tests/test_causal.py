"""GPT in BERT's house: the causal model against `transformers.BertLMHeadModel` (is_decoder=True), number for
number in both directions, its attention never looking ahead, and the next-token data it trains on."""

import json

import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.model.bert import IGNORE_INDEX, BertForPreTraining, BertLMHeadModel, next_token_targets
from bert_core.model.config import BertConfig
from bert_core.model.hf import load_pretrained, save_pretrained

transformers = pytest.importorskip("transformers")

CONFIGS = [
    dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
         max_position_embeddings=40),
    dict(vocab_size=150, hidden_size=48, num_hidden_layers=1, num_attention_heads=3, intermediate_size=37,
         max_position_embeddings=32, layer_norm_eps=1e-7),
]


def padded_batch(config: BertConfig, seq=15, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, config.vocab_size, (3, seq), generator=g)
    mask = torch.ones_like(ids)
    for row, length in enumerate([seq, seq - 4, seq - 9]):
        mask[row, length:] = 0
        ids[row, length:] = config.pad_token_id
    labels = ids.masked_fill(mask == 0, IGNORE_INDEX)
    return {"input_ids": ids, "attention_mask": mask}, labels


def nudge(model):
    # Non-trivial biases and LayerNorms so that a swapped or missing parameter shows up.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)


def assert_close(a, b, tol=1e-5):
    assert a.shape == b.shape
    diff = (a.float() - b.float()).abs().max().item()
    assert diff <= tol, f"max abs difference {diff}"


@pytest.mark.parametrize("direction", ["ours_to_hf", "hf_to_ours"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=["two-layers", "one-layer"])
def test_causal_model_matches_transformers_bert_lm_head_model(tmp_path, cfg, direction):
    config = BertConfig(**cfg, attention="causal")
    torch.manual_seed(2)
    if direction == "ours_to_hf":
        ours = BertLMHeadModel(config).eval()
        nudge(ours)
        save_pretrained(ours, tmp_path)
    else:
        ref = transformers.BertLMHeadModel(transformers.BertConfig(**cfg, is_decoder=True)).eval()
        nudge(ref)
        ref.save_pretrained(tmp_path)
        ours = load_pretrained(tmp_path)
        assert isinstance(ours, BertLMHeadModel) and ours.config.attention == "causal"
    ref, info = transformers.BertLMHeadModel.from_pretrained(tmp_path, attn_implementation="eager",
                                                              output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert ref.config.is_decoder
    ref.eval()
    inputs, labels = padded_batch(config)
    with torch.no_grad():
        out = ours(**inputs, labels=labels, output_attentions=True, output_hidden_states=True, full_mlm_logits=True)
        hf = ref(**inputs, labels=labels, output_attentions=True, output_hidden_states=True, use_cache=False)
        sparse = ours(**inputs, labels=labels, full_mlm_logits=False)
    assert_close(out.mlm_logits, hf.logits)
    assert_close(out.loss, hf.loss)
    assert_close(sparse.loss, hf.loss)  # the Trainer's path: the head on the predicted positions only
    for a, b in zip(out.attentions, hf.attentions, strict=True):
        assert_close(a, b)
    for a, b in zip(out.hidden_states, hf.hidden_states, strict=True):
        assert_close(a, b)


def test_causal_folder_says_what_it_is_and_has_exactly_hugging_faces_keys(tmp_path):
    cfg = CONFIGS[0]
    ours = BertLMHeadModel(BertConfig(**cfg, attention="causal"))
    save_pretrained(ours, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["is_decoder"] is True and written["architectures"] == ["BertLMHeadModel"]
    assert "attention" not in written  # Hugging Face's own key says it
    ref = transformers.BertLMHeadModel(transformers.BertConfig(**cfg, is_decoder=True))
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert ours.cls.predictions.decoder.weight is ours.bert.embeddings.word_embeddings.weight


def test_an_older_folder_with_our_attention_key_still_loads_causal(tmp_path):
    save_pretrained(BertLMHeadModel(BertConfig(**CONFIGS[0], attention="causal")), tmp_path)
    d = json.loads((tmp_path / "config.json").read_text())
    del d["is_decoder"]
    d["attention"] = "causal"
    (tmp_path / "config.json").write_text(json.dumps(d))
    assert isinstance(load_pretrained(tmp_path), BertLMHeadModel)


def test_a_next_token_model_refuses_bidirectional_attention():
    with pytest.raises(BertCoreError, match="causal attention"):
        BertLMHeadModel(BertConfig(**CONFIGS[0]))


def test_next_token_targets_shift_by_one_and_end_with_nothing():
    labels = torch.tensor([[7, 8, 9, IGNORE_INDEX]])
    assert next_token_targets(labels).tolist() == [[8, 9, IGNORE_INDEX, IGNORE_INDEX]]


def test_causal_attention_never_looks_ahead():
    config = BertConfig.preset("nano", vocab_size=60, attention="causal")
    torch.manual_seed(0)
    model = BertLMHeadModel(config).eval()
    nudge(model)
    ids = torch.randint(5, 60, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(ids, output_attentions=True)
    above = torch.ones(12, 12, dtype=torch.bool).triu(1)
    for probs in out.attentions:
        assert probs[..., above].abs().max().item() == 0.0
        assert probs[..., ~above].min().item() > 0.0  # every earlier token keeps some weight
    # Changing a later token never changes what the model says at earlier positions (on either attention path:
    # written out, as for the pages, and scaled_dot_product_attention, as in training).
    for attentions in (True, False):
        with torch.no_grad():
            before = model(ids, output_attentions=attentions).mlm_logits
        for j in (3, 11):
            changed = ids.clone()
            changed[:, j] = (ids[:, j] - 5 + 1) % 55 + 5
            with torch.no_grad():
                after = model(changed, output_attentions=attentions).mlm_logits
            assert torch.equal(before[:, :j], after[:, :j])
            assert not torch.allclose(before[:, j:], after[:, j:])


def test_a_causal_pretraining_model_has_a_transformers_twin_too(tmp_path):
    # A causal BertForPreTraining (the config switch alone) writes is_decoder, so Hugging Face masks it the same way.
    cfg = CONFIGS[0]
    torch.manual_seed(4)
    ours = BertForPreTraining(BertConfig(**cfg, attention="causal")).eval()
    save_pretrained(ours, tmp_path)
    ref = transformers.BertForPreTraining.from_pretrained(tmp_path, attn_implementation="eager").eval()
    inputs, _ = padded_batch(ours.config)
    with torch.no_grad():
        assert_close(ours(**inputs).mlm_logits, ref(**inputs).prediction_logits)


# ---------------------------------------------------------------------------------------------- data and training


@pytest.fixture(scope="module")
def toy_data():
    from bert_core.data.corpora import generate_toy_corpus
    from bert_core.data.pretraining_data import PretrainingData
    from bert_core.model.tokenization import train_tokenizer

    corpus = generate_toy_corpus(num_documents=30, seed=0)
    tok = train_tokenizer(corpus.texts(), vocab_size=200)
    return corpus, tok, PretrainingData(corpus, tok, max_seq_length=24, batch_size=4, nsp=False, objective="clm")


def test_next_token_batches_are_plain_text_labelled_with_the_following_token(toy_data):
    from bert_core.data.pretraining_data import NOT_CHOSEN, PretrainingData

    corpus, tok, data = toy_data
    batch = next(iter(PretrainingData(corpus, tok, max_seq_length=24, batch_size=4, nsp=False, objective="clm")))
    assert batch.causal and torch.equal(batch.input_ids, batch.original_ids)  # nothing masked or replaced
    assert tok.mask_id not in batch.input_ids.tolist()
    assert (batch.decisions == NOT_CHOSEN).all()
    for row in range(len(batch)):
        n = int(batch.attention_mask[row].sum())
        assert batch.mlm_labels[row, :n - 1].tolist() == batch.input_ids[row, 1:n].tolist()
        assert (batch.mlm_labels[row, n - 1:] == IGNORE_INDEX).all()  # after the last token, and padding
    # The model gets Hugging Face's unshifted labels, which it shifts back to exactly these targets.
    assert torch.equal(next_token_targets(batch.model_inputs()["labels"]), batch.mlm_labels)
    # Pure and seeded: the same settings give the same batches.
    again = next(iter(PretrainingData(corpus, tok, max_seq_length=24, batch_size=4, nsp=False, objective="clm")))
    assert torch.equal(again.input_ids, batch.input_ids)


def test_next_token_data_refuses_nsp_and_unknown_objectives(toy_data):
    from bert_core.data.pretraining_data import PretrainingData
    from bert_core.training.train_config import TrainConfig

    corpus, tok, _ = toy_data
    with pytest.raises(BertCoreError, match="no next-sentence prediction"):
        PretrainingData(corpus, tok, max_seq_length=24, objective="clm")
    with pytest.raises(BertCoreError, match="objective must be one of"):
        PretrainingData(corpus, tok, max_seq_length=24, objective="gpt")
    with pytest.raises(BertCoreError, match="no next-sentence prediction"):
        TrainConfig(objective="clm")


def test_trainer_refuses_a_model_of_the_other_kind(toy_data):
    from bert_core.training.trainer import Trainer
    from bert_core.training.train_config import TrainConfig

    _, tok, data = toy_data
    config = TrainConfig(max_steps=1, batch_size=4, max_seq_length=24, nsp=False, objective="clm", device="cpu")
    bert = BertForPreTraining(BertConfig.preset("nano", vocab_size=tok.vocab_size))
    with pytest.raises(BertCoreError, match="trains a causal model, and this one is bidirectional"):
        Trainer(bert, tok, data, config)


def test_a_causal_model_learns_the_next_token(toy_data):
    from bert_core.training.evaluation import evaluate
    from bert_core.training.trainer import Trainer
    from bert_core.training.train_config import TrainConfig

    _, tok, data = toy_data
    torch.manual_seed(0)
    model = BertLMHeadModel(BertConfig.preset("nano", vocab_size=tok.vocab_size, attention="causal",
                                              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    config = TrainConfig(max_steps=60, batch_size=4, max_seq_length=24, nsp=False, objective="clm",
                         learning_rate=3e-3, device="cpu", eval_batches=2)
    trainer = Trainer(model, tok, data, config, eval_data=data)
    trainer.run()
    assert trainer.state == "finished", trainer.error
    first, last = trainer.evals[0], trainer.evals[-1]
    assert last.mlm_loss < first.mlm_loss - 1.0 and last.nsp_acc is None
    assert trainer.history[-1].mlm_acc_masked is None  # no masking decisions in a next-token run
    result = evaluate(model, data.eval_batches(2, seed=0))
    assert result.objective == "clm" and result.nsp_acc is None
    assert result.mlm_acc > trainer.baselines["unigram"]["accuracy"]


def test_train_objective_clm_writes_a_bert_lm_head_model_and_eval_reports_next_token_figures(toy_file, tmp_path,
                                                                                             capsys):
    from bert_core.cli.main import main

    out = tmp_path / "gpt"
    argv = ["train", "--objective", "clm", "--corpus", str(toy_file), "--preset", "nano", "--vocab-size", "300",
            "--seq-len", "32", "--batch-size", "4", "--steps", "3", "--eval-batches", "2", "--device", "cpu",
            "--out", str(out), "--json"]
    assert main(argv) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["train_config"]["objective"] == "clm" and metrics["train_config"]["nsp"] is False
    held = metrics["heldout"]
    assert held["objective"] == "clm" and 0 <= held["next_token_accuracy"] <= 1 and held["nsp_accuracy"] is None
    assert "masked_token_accuracy" not in held
    assert metrics["eval"]["objective"] == "clm" and metrics["eval"]["predicted_tokens"] > 0
    _, info = transformers.BertLMHeadModel.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert isinstance(load_pretrained(out), BertLMHeadModel)

    assert main(["eval", "--checkpoint", str(out), "--text-file", str(toy_file), "--batches", "2"]) == 0
    printed = capsys.readouterr().out
    assert "next-token accuracy" in printed and "next-token perplexity" in printed
    assert "masked-token" not in printed and "NSP" not in printed

    # generate: seeded, the same text twice; a causal model refuses fill-mask with its reason, in one line.
    sample = ["generate", "--checkpoint", str(out), "the dog", "--sample", "--seed", "5", "--max-new-tokens", "6"]
    assert main(sample) == 0
    first = capsys.readouterr().out
    assert main(sample) == 0
    assert capsys.readouterr().out == first and "stopped:" in first
    assert main(["fill-mask", "--checkpoint", str(out), "the [MASK] sat ."]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "cannot fill a [MASK]" in err and len(err.strip().splitlines()) == 1

    assert main(["train", "--resume", str(out), "--steps", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 4
    assert main(["train", "--resume", str(out), "--objective", "mlm", "--steps", "5"]) == 2
    assert "--objective cannot change on --resume" in capsys.readouterr().err


def test_train_objective_clm_refuses_nsp_in_one_line(toy_file, tmp_path, capsys):
    from bert_core.cli.main import main

    code = main(["train", "--objective", "clm", "--nsp", "--corpus", str(toy_file), "--steps", "2",
                 "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error:") and "no next-sentence prediction" in err
    assert len(err.strip().splitlines()) == 1

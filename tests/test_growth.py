"""Growing a trained checkpoint (bert_core.model.growth): a wider copy computes the same function, its copies can
drift apart in training, stacked layers repeat the trained ones, and the folder loads in transformers."""

import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.model.bert import BertForPreTraining, BertForSequenceClassification, BertLMHeadModel
from bert_core.model.checkpoint import load_checkpoint
from bert_core.model.config import BertConfig
from bert_core.model.growth import copy_trained_positions, grow_state_dict
from bert_core.model.hf import save_pretrained
from bert_core.model.tokenization import train_tokenizer
from tests.test_bad_input import assert_one_error_line, run_cli


def _small(model_class=BertForPreTraining, seed=0, **kw):
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=24, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, **kw)
    model = model_class(config)
    with torch.no_grad():  # trained-looking LayerNorms and biases, not the identity and zeros of a fresh model
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


def _inputs(seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (3, 16), generator=g)
    types = torch.zeros_like(ids)
    types[:, 8:] = 1
    mask = torch.ones_like(ids)
    mask[2, 12:] = 0
    return dict(input_ids=ids, token_type_ids=types, attention_mask=mask)


def _grown(model, hidden, layers, seed=0):
    state, config = grow_state_dict(model.state_dict(), model.config, hidden, layers, seed=seed)
    big = type(model)(config)
    big.load_state_dict(state)
    return big.eval()


@pytest.mark.parametrize("model_class", [BertForPreTraining, BertLMHeadModel])
def test_a_longer_run_starts_its_untrained_positions_as_the_trained_ones_in_order(model_class):
    model = _small(model_class, **({"attention": "causal"} if model_class is BertLMHeadModel else {}))
    table = model.bert.embeddings.position_embeddings.weight
    before = table.detach().clone()
    assert copy_trained_positions(model, 10) == 14
    assert torch.equal(table[:10], before[:10])          # the trained ones stay
    assert torch.equal(table[10:20], before[:10]) and torch.equal(table[20:24], before[:4])
    assert copy_trained_positions(model, 24) == 0 and torch.equal(table[20:24], before[:4])
    with pytest.raises(BertCoreError):
        copy_trained_positions(model, 0)


@pytest.mark.parametrize("factor", [2, 3])
def test_wider_model_computes_the_same_mlm_and_nsp_logits(factor):
    small = _small()
    big = _grown(small, 32 * factor, 2)
    assert big.config.num_attention_heads == 2 * factor and big.config.head_dim == small.config.head_dim
    assert big.config.intermediate_size == 64 * factor
    with torch.no_grad():
        a, b = small(**_inputs()), big(**_inputs())
    torch.testing.assert_close(b.mlm_logits, a.mlm_logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(b.nsp_logits, a.nsp_logits, rtol=1e-4, atol=1e-4)
    assert a.mlm_logits.abs().max() > 1  # the comparison is between logits of some size, not near-zeros


def test_a_causal_model_grows_the_same_way():
    small = _small(BertLMHeadModel, attention="causal")
    big = _grown(small, 64, 2)
    with torch.no_grad():
        a, b = small(**_inputs()), big(**_inputs())
    torch.testing.assert_close(b.mlm_logits, a.mlm_logits, rtol=1e-4, atol=1e-4)


def test_copies_of_a_unit_get_different_gradients():
    # Even shares would give every copy of a unit the same gradient forever: the wide model could never use its width.
    big = _grown(_small(), 64, 2).train()
    ids = _inputs()["input_ids"]
    labels = torch.where(torch.arange(16) % 4 == 0, ids, torch.full_like(ids, -100))
    big(input_ids=ids, labels=labels, next_sentence_label=torch.tensor([0, 1, 0])).loss.backward()
    grad = big.bert.encoder.layer[0].intermediate.dense.weight.grad  # rows: 64 units, then their 64 copies
    assert not torch.allclose(grad[:64], grad[64:], rtol=1e-3, atol=1e-7)
    split = big.bert.encoder.layer[0].output.dense.weight  # (hidden 64, intermediate 128): shares of one weight
    small_w = _small().bert.encoder.layer[0].output.dense.weight
    torch.testing.assert_close(split[:32, :64] + split[:32, 64:], small_w, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(split[:32, :64], split[:32, 64:])


def test_deeper_model_repeats_the_trained_layers_in_order():
    small = _small()
    big = _grown(small, 32, 4)
    s, b = small.state_dict(), big.state_dict()
    for layer in range(4):
        for name in ("attention.self.query.weight", "output.dense.bias", "attention.output.LayerNorm.weight"):
            assert torch.equal(b[f"bert.encoder.layer.{layer}.{name}"], s[f"bert.encoder.layer.{layer % 2}.{name}"])


def test_the_seed_decides_the_shares():
    small = _small()
    one, again, other = _grown(small, 64, 2, seed=0), _grown(small, 64, 2, seed=0), _grown(small, 64, 2, seed=1)
    key = "bert.encoder.layer.1.attention.self.key.weight"
    assert torch.equal(one.state_dict()[key], again.state_dict()[key])
    assert not torch.equal(one.state_dict()[key], other.state_dict()[key])


@pytest.mark.parametrize("hidden,layers,words", [(48, 2, "whole multiple"), (64, 3, "whole multiple"),
                                                 (16, 2, "whole multiple")])
def test_sizes_that_cannot_be_grown_to_are_refused(hidden, layers, words):
    with pytest.raises(BertCoreError, match=words):
        grow_state_dict(_small().state_dict(), _small().config, hidden, layers)


def test_a_fine_tuned_head_is_refused():
    model = _small(BertForSequenceClassification)
    with pytest.raises(BertCoreError, match="fine-tuned head"):
        grow_state_dict(model.state_dict(), model.config, 64, 2)


def _folder(tmp_path, model):
    tok = train_tokenizer(["the cat sat on the mat", "a dog ran to the cat"] * 5, vocab_size=60)
    return save_pretrained(model, tmp_path / "small", tokenizer=tok)


def test_cli_grows_a_folder_that_transformers_loads_with_the_same_logits(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    small = _small()
    src = _folder(tmp_path, small)
    code, err = run_cli(["grow", "--checkpoint", str(src), "--hidden-size", "64", "--layers", "2",
                         "--out", str(tmp_path / "big")], capsys)
    assert code == 0, err
    hf, info = transformers.BertForPreTraining.from_pretrained(tmp_path / "big", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    with torch.no_grad():
        ours = small(**_inputs()).mlm_logits
        theirs = hf.eval()(**_inputs()).prediction_logits
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-4)
    grown = load_checkpoint(tmp_path / "big", require_tokenizer=True)
    assert len(grown.tokenizer) == len(load_checkpoint(src, require_tokenizer=True).tokenizer)
    assert (tmp_path / "big" / "growth.json").is_file()


def test_cli_refuses_a_size_it_cannot_grow_to_in_one_line(tmp_path, capsys):
    src = _folder(tmp_path, _small())
    code, err = run_cli(["grow", "--checkpoint", str(src), "--hidden-size", "48", "--layers", "2",
                         "--out", str(tmp_path / "big")], capsys)
    assert_one_error_line(code, err, ["whole multiple"])
    code, err = run_cli(["grow", "--checkpoint", str(src), "--out", str(tmp_path / "big2")], capsys)
    assert_one_error_line(code, err, ["--preset"])

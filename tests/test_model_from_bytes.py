"""model.hf.pretraining_model_from_bytes: the server's copy of a training process's weights (the live run a class
watches) is the live model, built without a random initialisation that the weights would overwrite."""

import pytest
import torch
from safetensors.torch import save as to_bytes

from bert_core.model.bert import pretraining_model
from bert_core.model.config import BertConfig
from bert_core.model.hf import pretraining_model_from_bytes


def _blob(model) -> bytes:
    # As the training process sends it (serve/training_child.py): each tensor its own copy, tied ones included.
    return to_bytes({k: v.detach().clone() for k, v in model.state_dict().items()})


@pytest.mark.parametrize("attention", ["bidirectional", "causal"])
def test_the_copy_computes_what_the_live_model_does_and_keeps_its_ties(attention):
    config = BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        max_position_embeddings=16, attention=attention)
    torch.manual_seed(0)
    live = pretraining_model(config).eval()
    with torch.no_grad():   # a trained model: the decoder's bias is no longer its zeros
        live.cls.predictions.bias.normal_()
    copy = pretraining_model_from_bytes(config, _blob(live)).eval()
    assert type(copy) is type(live)
    assert all(p.device.type == "cpu" for p in copy.parameters())
    assert [n for n, _ in copy.named_parameters()] == [n for n, _ in live.named_parameters()]
    assert all(torch.equal(a, b) for a, b in zip(copy.state_dict().values(), live.state_dict().values()))
    head = copy.cls.predictions
    assert head.decoder.weight is copy.bert.embeddings.word_embeddings.weight
    assert head.decoder.bias is head.bias
    assert all(p.requires_grad for p in copy.parameters())
    ids = torch.randint(5, 60, (2, 9))
    with torch.no_grad():
        ours, theirs = copy(ids).mlm_logits, live(ids).mlm_logits
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    with torch.no_grad():   # a change through one name of a tied weight is seen through the other, as in training
        copy.bert.embeddings.word_embeddings.weight[7].zero_()
    assert not head.decoder.weight[7].any()


def test_the_copy_draws_no_random_initialisation():
    """The copy's weights all come from the blob: building it draws nothing from torch's generator (the random
    initialisation it once drew, then overwrote, was most of a live run's copy: docs/benchmarks.md, issue 74)."""
    config = BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        max_position_embeddings=16)
    blob = _blob(pretraining_model(config))
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    pretraining_model_from_bytes(config, blob)
    assert torch.equal(torch.rand(3), expected)


def test_the_copy_imports_nothing_more():
    """Building a copy in a fresh process leaves torch._dynamo unimported: the initialisers it once ran on the meta
    device imported it, a stall of seconds for the first page that took a live run's copy (issue 74)."""
    import subprocess
    import sys

    code = ("import sys, torch\n"
            "from safetensors.torch import save\n"
            "from bert_core.model.bert import pretraining_model\n"
            "from bert_core.model.config import BertConfig\n"
            "from bert_core.model.hf import pretraining_model_from_bytes\n"
            "config = BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, "
            "max_position_embeddings=16)\n"
            "blob = save({k: v.clone() for k, v in pretraining_model(config).state_dict().items()})\n"
            "assert 'torch._dynamo' not in sys.modules\n"
            "pretraining_model_from_bytes(config, blob)\n"
            "print('torch._dynamo' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False", done.stderr

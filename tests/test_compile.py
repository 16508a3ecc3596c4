"""The compiled training step (TrainConfig.compile, bert_core.training.compiled_step): its fixed shapes change no
loss, the compiled encoder stands in for the eager one during a training step only, and compiled and eager steps
give the same losses (compiled for this CPU; on CUDA, where there is one, with and without CUDA graphs)."""

import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.model.bert import IGNORE_INDEX, BertForPreTraining
from bert_core.model.config import BertConfig
from bert_core.training.compiled_step import CompiledTraining, fixed_width, pad_columns, phase_lengths
from bert_core.training.train_config import COMPILE_MODES
from bert_core.training.trainer import Trainer
from bert_core.training.train_config import TrainConfig


@pytest.fixture(scope="module")
def toy():
    from bert_core.data.corpora import generate_toy_corpus, split_heldout
    from bert_core.model.tokenization import train_tokenizer

    train, held = split_heldout(generate_toy_corpus(num_documents=60, seed=0), fraction=0.2, seed=0)
    return train, held, train_tokenizer(train.texts(), vocab_size=300)


def _data(toy, batch_size=4, seq=32):
    from bert_core.data.pretraining_data import PretrainingData

    return PretrainingData(toy[0], toy[2], max_seq_length=seq, batch_size=batch_size, seed=0)


def _model(toy, seed=0):
    torch.manual_seed(seed)
    config = BertConfig.preset("nano", vocab_size=toy[2].vocab_size, max_position_embeddings=64,
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertForPreTraining(config)


def test_micro_batches_pad_to_their_phase_s_length():
    assert phase_lengths(TrainConfig(max_steps=1, max_seq_length=128)) == (128,)
    assert phase_lengths(TrainConfig(max_steps=1, max_seq_length=128, short_seq_length=32)) == (32, 128)
    assert [fixed_width(w, (32, 128)) for w in (7, 32, 33, 128, 130)] == [32, 32, 128, 128, 130]
    assert COMPILE_MODES[0] == "off"


def test_padding_a_batch_to_a_fixed_width_changes_no_loss(toy):
    batch = next(iter(_data(toy)))
    padded = pad_columns(batch, batch.input_ids.shape[1] + 9)
    assert padded.input_ids.shape[1] == batch.input_ids.shape[1] + 9
    assert int(padded.attention_mask.sum()) == int(batch.attention_mask.sum())
    assert bool((padded.mlm_labels[:, -9:] == IGNORE_INDEX).all()) and pad_columns(batch, 3) is batch
    model = _model(toy).train()
    with torch.no_grad():
        plain, longer = model(**batch.model_inputs()), model(**padded.model_inputs())
    assert longer.mlm_loss.item() == pytest.approx(plain.mlm_loss.item(), rel=1e-5)
    torch.testing.assert_close(longer.nsp_logits, plain.nsp_logits, rtol=1e-5, atol=1e-5)


def test_the_compiled_encoder_stands_in_only_within_a_training_step(toy):
    model = _model(toy)
    keys = list(model.state_dict())
    compiled = CompiledTraining(model)
    encoder = model.bert.encoder
    with compiled.forward("off"):
        assert "forward" not in vars(encoder)
    with compiled.forward("default"):   # torch.compile compiles on the first call: nothing runs here
        assert encoder.forward is compiled.compiled("default")
    assert "forward" not in vars(encoder) and list(model.state_dict()) == keys
    with pytest.raises(BertCoreError, match="compile must be one of"):
        compiled.compiled("max-autotune")
    with pytest.raises(BertCoreError, match="compile must be one of"):
        TrainConfig(max_steps=1, compile="fast")
    with pytest.raises(BertCoreError, match="grad_accum 1"):
        TrainConfig(max_steps=1, compile="reduce-overhead", grad_accum=2)
    assert TrainConfig(max_steps=1, compile="default", grad_accum=2).grad_accum == 2


def _losses(toy, mode: str, device: str = "cpu", steps: int = 3) -> tuple[list[float], dict]:
    # fp32: bf16 autocast rounds fused and unfused kernels differently; the short phase pads to two widths.
    config = TrainConfig(batch_size=4, max_steps=steps, learning_rate=3e-3, max_seq_length=32, short_seq_length=16,
                         short_seq_fraction=0.4, eval_batches=1, device=device, precision="fp32", compile=mode)
    trainer = Trainer(_model(toy), toy[2], _data(toy), config)
    trainer.run()
    assert trainer.state == "finished", trainer.error
    assert trainer.gradients.compiled.modes == (() if mode == "off" else (mode,))   # the compiled path ran
    return [e.loss for e in trainer.history], {k: v.float().cpu() for k, v in trainer.model.state_dict().items()}


@pytest.mark.slow
def test_compiled_and_eager_steps_give_the_same_loss(toy):
    """Compiled for this CPU (a C compiler builds the kernels; seconds with a warm cache, minutes on a busy
    machine without one)."""
    eager, eager_weights = _losses(toy, "off")
    compiled, weights = _losses(toy, "default")
    assert compiled == pytest.approx(eager, rel=1e-4)
    for name, value in eager_weights.items():
        torch.testing.assert_close(weights[name], value, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_steps_on_cuda_give_the_eager_loss(toy, mode):
    eager, _ = _losses(toy, "off", device="cuda")
    compiled, _ = _losses(toy, mode, device="cuda")
    assert compiled == pytest.approx(eager, rel=1e-4)

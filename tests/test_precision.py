"""Which precision a run computes in (bert_core.training.distributed): bf16 autocast on a CPU with bfloat16
instructions, fp32 on others, and the same for a fine-tuning run's training steps (its validation stays fp32)."""

import pytest
import torch

from bert_core.data.classification_data import split_train_val, toy_topic_task
from bert_core.errors import BertCoreError
from bert_core.model.bert import BertForPreTraining
from bert_core.model.checkpoint import save_pretrained
from bert_core.model.config import BertConfig
from bert_core.model.tokenization import train_tokenizer
from bert_core.training import distributed
from bert_core.training.finetune import classifier_from_checkpoint, finetune
from bert_core.training.finetune_settings import FinetuneConfig

ZEN4 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n"
SKYLAKE = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile amx_int8\n"


def test_the_cpu_flags_decide():
    assert distributed.bf16_in_cpuinfo(ZEN4) and distributed.bf16_in_cpuinfo(SAPPHIRE)
    assert not distributed.bf16_in_cpuinfo(SKYLAKE)  # AVX-512 alone emulates bfloat16: slower than fp32
    assert not distributed.bf16_in_cpuinfo("") and not distributed.bf16_in_cpuinfo("flags\t: avx512_bf16x\n")
    assert isinstance(distributed.cpu_has_bf16(), bool)  # this machine's answer, read once


@pytest.mark.parametrize("has_bf16", [True, False])
def test_computes_in_and_autocast_for(monkeypatch, has_bf16):
    monkeypatch.setattr(distributed, "cpu_has_bf16", lambda: has_bf16)
    cpu = "bf16" if has_bf16 else "fp32"
    assert distributed.computes_in("cpu", "bf16") == cpu
    assert distributed.computes_in("cpu", "fp16") == "fp32" and distributed.computes_in("cpu", "fp32") == "fp32"
    assert distributed.computes_in("cuda", "fp16") == "fp16" and distributed.computes_in("cuda", "fp32") == "fp32"
    linear = torch.nn.Linear(8, 8)
    with distributed.autocast_for(torch.device("cpu"), "bf16"):
        out = linear(torch.randn(2, 8))
    assert out.dtype == (torch.bfloat16 if has_bf16 else torch.float32)
    with distributed.autocast_for("cpu", "fp32"):
        assert linear(torch.randn(2, 8)).dtype == torch.float32


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    train, val = split_train_val(toy_topic_task(seed=0, num_examples=200), 150, 50, seed=0)
    folder = tmp_path_factory.mktemp("pretrained")
    tokenizer = train_tokenizer(train.texts, vocab_size=300)
    torch.manual_seed(0)
    save_pretrained(BertForPreTraining(BertConfig.preset("nano", vocab_size=tokenizer.vocab_size,
                                                         max_position_embeddings=64)), folder, tokenizer=tokenizer)
    return folder, train, val


def _run(checkpoint, used: list, **changes):
    folder, train, val = checkpoint
    model, tokenizer = classifier_from_checkpoint(folder, train.num_labels, seed=0)
    layer = model.bert.encoder.layer[0].intermediate.dense
    layer.register_forward_hook(lambda m, i, o: used.append((m.training, o.dtype)))
    config = FinetuneConfig(max_steps=3, time_budget_s=None, batch_size=8, learning_rate=1e-3, max_length=32,
                            eval_points=1, device="cpu", **changes)
    return finetune(model, tokenizer, train, val, config)


@pytest.mark.parametrize("has_bf16", [True, False])
def test_finetuning_steps_follow_the_precision_and_validation_stays_fp32(checkpoint, monkeypatch, has_bf16):
    monkeypatch.setattr(distributed, "cpu_has_bf16", lambda: has_bf16)
    used_bf16, used_fp32 = [], []
    a = _run(checkpoint, used_bf16)
    b = _run(checkpoint, used_fp32, precision="fp32")
    train_dtypes = {d for training, d in used_bf16 if training}
    assert train_dtypes == {torch.bfloat16 if has_bf16 else torch.float32}
    assert {d for training, d in used_bf16 if not training} == {torch.float32}  # validation passes
    assert {d for _, d in used_fp32} == {torch.float32}
    same = [h.loss for h in a.history] == [h.loss for h in b.history]
    assert same != has_bf16


def test_fine_tuning_refuses_fp16():
    with pytest.raises(BertCoreError, match="one of bf16, fp32"):
        FinetuneConfig(precision="fp16")


def test_the_eval_command_scores_in_fp32_on_any_cpu(monkeypatch, tmp_path):
    """`eval` reproduces the figures in a checkpoint's metrics.json, which were computed in fp32 on a CPU."""
    from bert_core.training.heldout import evaluate_text_file

    monkeypatch.setattr(distributed, "cpu_has_bf16", lambda: True)
    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(f"the cat sat on mat number {i}.\nit was a fine mat." for i in range(40)) + "\n")
    folder = tmp_path / "model"
    tokenizer = train_tokenizer(text.read_text().split("\n"), vocab_size=120)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=tokenizer.vocab_size, max_position_embeddings=64))
    save_pretrained(model, folder, tokenizer=tokenizer)
    seen = []
    real = torch.nn.Linear.forward
    monkeypatch.setattr(torch.nn.Linear, "forward", lambda self, x: seen.append(real(self, x).dtype) or real(self, x))
    evaluate_text_file(folder, text, batches=2, batch_size=4, seq_len=32, device="cpu")
    assert seen and set(seen) == {torch.float32}

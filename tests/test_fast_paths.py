"""The CPU speed paths (bert_core/fast_paths.py) against the plain PyTorch computation they replace: fused MLM
cross-entropy, the tied word-embedding gradient summed in place, 16-bit dropout masks, self-attention with a
hand-written backward, and the allocator setting of the training processes (kept freed memory; no restart)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bert_core.config import BertConfig
from bert_core.errors import BertCoreError
from bert_core.fast_paths import Dropout, LinearCrossEntropy, self_attention_with_dropout
from bert_core.model import BertForPreTraining

# ------------------------------------------------------------------------------------------- cross-entropy


def _head_inputs(rows=37, hidden=24, vocab=301, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, hidden, generator=g)
    w = torch.randn(vocab, hidden, generator=g) * 0.3
    b = torch.randn(vocab, generator=g) * 0.1
    targets = torch.randint(0, vocab, (rows,), generator=g)
    return h, w, b, targets


@pytest.mark.parametrize("extreme", [False, True])
def test_fused_cross_entropy_equals_torch_loss_and_gradients(extreme):
    h, w, b, targets = _head_inputs()
    if extreme:  # rows whose target probability underflows float32: the loss must stay finite and exact
        h[0] *= 400.0
        targets[0] = int((h[0] @ w.t() + b).argmin())
        h[5] *= -300.0
        targets[5] = int((h[5] @ w.t() + b).argmin())
    if extreme:
        row_losses = F.cross_entropy(h @ w.t() + b, targets, reduction="none")
        assert row_losses[0] > 200 and row_losses[5] > 200  # target probabilities below float32's range
    grads = []
    losses = []
    for fused in (True, False):
        hh, ww, bb = (t.clone().requires_grad_() for t in (h, w, b))
        if fused:
            loss, logits = LinearCrossEntropy.apply(hh, ww, bb, targets)
            assert not logits.requires_grad
            assert torch.equal(logits, torch.addmm(b, h, w.t()))
        else:
            loss = F.cross_entropy(F.linear(hh, ww, bb), targets)
        (loss * 2.5).backward()  # an upstream gradient that is not 1
        losses.append(loss.detach())
        grads.append((hh.grad, ww.grad, bb.grad))
    assert torch.isfinite(losses[0])
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-6, atol=1e-6)
    for ours, ref in zip(*grads):
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)


def test_fused_cross_entropy_refuses_a_second_backward():
    h, w, b, targets = _head_inputs()
    loss, _ = LinearCrossEntropy.apply(h.requires_grad_(), w, b, targets)
    loss.backward(retain_graph=True)
    with pytest.raises(BertCoreError, match="twice"):
        loss.backward()


def test_sparse_mlm_gradients_equal_dense_gradients_for_every_parameter():
    config = BertConfig.preset("nano", vocab_size=211, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = BertForPreTraining(config)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 211, (3, 19), generator=g)
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(ids.shape, generator=g) < 0.3
    labels[chosen] = ids[chosen]
    nsp = torch.tensor([0, 1, 1])
    grads = []
    for full in (False, True):
        model.zero_grad()
        model(ids, labels=labels, next_sentence_label=nsp, full_mlm_logits=full).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-5, atol=1e-6, msg=name)


def test_nothing_masked_gives_zero_loss_not_nan():
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=50))
    ids = torch.randint(5, 50, (2, 8))
    out = model(ids, labels=torch.full_like(ids, -100))
    assert out.mlm_loss.item() == 0.0
    out.loss.backward()


def _padded_batch(vocab=97, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (3, 13), generator=g)
    ids[:, :4] = ids[0, :4]  # repeated tokens: their lookup rows add up
    attention_mask = torch.ones_like(ids)
    ids[1, 9:], attention_mask[1, 9:] = 0, 0  # padding (id 0 = the padding row, which the lookup must not update)
    ids[2, 5] = 0  # the padding id at an attended position: its output has a gradient, its row still gets none
    labels = torch.where((torch.rand(ids.shape, generator=g) < 0.35) & (attention_mask == 1), ids, -100)
    return ids, attention_mask, labels, torch.tensor([0, 1, 1])


@pytest.mark.parametrize("loss_name", ["loss", "nsp_loss"])
def test_tied_word_embedding_gradient_is_summed_in_place_as_autograd_would(monkeypatch, loss_name):
    """The fused MLM loss leaves the decoder's part of the tied matrix's gradient for the lookup to add its rows
    to; the result equals autograd's sum of the two (the plain path: full logits), every parameter, including
    when only the NSP loss is back-propagated and the lookup must start from zeros."""
    from bert_core import fast_paths

    lookups = []
    real_lookup = fast_paths.embedding_lookup
    monkeypatch.setattr(fast_paths, "embedding_lookup", lambda *a: lookups.append(1) or real_lookup(*a))
    config = BertConfig.preset("nano", vocab_size=97, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = BertForPreTraining(config).double()
    ids, attention_mask, labels, nsp = _padded_batch()
    grads = []
    for full in (False, True):
        model.zero_grad(set_to_none=True)
        out = model(ids, attention_mask=attention_mask, labels=labels, next_sentence_label=nsp, full_mlm_logits=full)
        getattr(out, loss_name).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert lookups == [1]  # the fused path took the slot, the full-logits path did not
    assert grads[0].keys() == grads[1].keys()
    word = "bert.embeddings.word_embeddings.weight"
    assert grads[0][word].layout == torch.strided and grads[0][word].abs().sum() > 0
    for name in grads[0]:  # the full-logits path takes its cross-entropy in float32, hence the tolerance
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-6, atol=1e-7, msg=name)


# ------------------------------------------------------------------------------------------------ dropout


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_rate_scale_and_expectation(p):
    torch.manual_seed(0)
    drop = Dropout(p).train()
    x = torch.ones(4, 1_000_000)
    y = drop(x)
    kept = y != 0
    levels = round(p * 65536)
    assert torch.all(y[kept] == 65536 / (65536 - levels))
    # Each 64-bit draw feeds four elements in a row: every one of the four lanes must drop at rate p, which
    # fails if some bits of the draw were not random (e.g. a sign bit always 0).
    lanes = (~kept).reshape(-1, 4).float().mean(0)
    assert torch.all((lanes - p).abs() < 0.003), lanes
    assert abs(y.mean().item() - 1.0) < 0.003  # unbiased: kept elements are scaled up by 1 / kept fraction


def test_dropout_masks_follow_the_seed_and_gradients_use_the_same_mask():
    drop = Dropout(0.1).train()
    x = torch.randn(64, 257, requires_grad=True)
    torch.manual_seed(3)
    a = drop(x)
    torch.manual_seed(3)
    b = drop(x)
    c = drop(x)
    assert torch.equal(a, b) and not torch.equal(b, c)
    a.backward(torch.ones_like(a))
    torch.testing.assert_close(x.grad, a.detach() / x.detach())
    assert torch.equal(drop.eval()(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)


def test_dropout_rates_too_small_or_large_for_16_bits_fall_back_to_torch():
    x = torch.ones(10_000)
    torch.manual_seed(0)
    almost_all = Dropout(0.999999).train()(x)  # rounds to 65536 levels: torch's own dropout
    assert almost_all.count_nonzero() < 10
    assert Dropout(1e-7).train()(x).count_nonzero() > 9990


def test_training_attention_with_dropout_is_seeded_and_reports_probabilities():
    config = BertConfig.preset("nano", vocab_size=80, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.3)
    torch.manual_seed(0)
    model = BertForPreTraining(config).train()
    ids = torch.randint(5, 80, (2, 12))
    torch.manual_seed(7)
    a = model(ids).mlm_logits
    torch.manual_seed(7)
    b = model(ids).mlm_logits
    c = model(ids).mlm_logits
    assert torch.equal(a, b) and not torch.equal(b, c)
    out = model(ids, output_attentions=True)
    assert out.attentions[0].shape == (2, 2, 12, 12)
    torch.testing.assert_close(out.attentions[0].sum(-1), torch.ones(2, 2, 12))  # before dropout: rows sum to 1
    assert model(ids).attentions is None
    with torch.no_grad():  # in eval mode the written-out path and scaled_dot_product_attention agree
        model.eval()
        torch.testing.assert_close(model(ids).mlm_logits, model(ids, output_attentions=True).mlm_logits,
                                   rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------- self-attention


def _plain_attention(x, lin, additive_mask, keep_mask, keep_scale, heads):
    """BertSelfAttention's written-out steps in plain ops: the reference for the hand-written backward."""
    b, s, h = x.shape
    q, k, v = (F.linear(x, w, bias).view(b, s, heads, h // heads).transpose(1, 2) for w, bias in lin)
    scores = q @ k.transpose(-1, -2) / (h // heads) ** 0.5
    if additive_mask is not None:
        scores = scores + additive_mask
    context = (scores.softmax(-1) * keep_mask * keep_scale) @ v
    return context.transpose(1, 2).reshape(b, s, h)


@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal"])
def test_self_attention_backward_by_hand_equals_autograd(mask_kind):
    g = torch.Generator().manual_seed(0)
    b, s, h, heads = 3, 9, 12, 3
    x = torch.randn(b, s, h, generator=g, dtype=torch.float64)
    lin = [(torch.randn(h, h, generator=g, dtype=torch.float64) * 0.3,
            torch.randn(h, generator=g, dtype=torch.float64) * 0.1) for _ in range(3)]
    keep = (torch.rand(b, heads, s, s, generator=g) > 0.25).double()
    allowed = torch.ones(b, 1, s, s, dtype=torch.bool)
    if mask_kind == "padding":
        allowed[1, :, :, 6:] = False
    if mask_kind == "causal":
        allowed &= torch.ones(s, s, dtype=torch.bool).tril()
    additive = None if mask_kind == "none" else torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(
        ~allowed, torch.finfo(torch.float64).min)
    upstream = torch.randn(b, s, h, generator=g, dtype=torch.float64)
    results = []
    for fused in (True, False):
        xx = x.clone().requires_grad_()
        params = [(w.clone().requires_grad_(), bias.clone().requires_grad_()) for w, bias in lin]
        if fused:
            modules = [torch.nn.Linear(h, h) for _ in range(3)]
            for m, (w, bias) in zip(modules, params):
                m.weight, m.bias = torch.nn.Parameter(w), torch.nn.Parameter(bias)
            params = [(m.weight, m.bias) for m in modules]
            out = self_attention_with_dropout(xx, *modules, additive, keep, 1 / 0.75, heads)
        else:
            out = _plain_attention(xx, params, additive, keep, 1 / 0.75, heads)
        out.backward(upstream)
        results.append([out.detach(), xx.grad] + [t.grad for pair in params for t in pair])
    for ours, ref in zip(*results):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)


def test_self_attention_backward_with_only_the_key_projection_trainable():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 8, generator=g, dtype=torch.float64, requires_grad=True)
    modules = [torch.nn.Linear(8, 8).double() for _ in range(3)]
    for m in (modules[0], modules[2]):
        m.requires_grad_(False)
    keep = torch.ones(2, 2, 5, 5, dtype=torch.float64)
    self_attention_with_dropout(x, *modules, None, keep, 1.0, 2).sum().backward()
    fused = (x.grad.clone(), modules[1].weight.grad.clone(), modules[1].bias.grad.clone())
    x.grad = None
    modules[1].zero_grad(set_to_none=True)
    params = [(m.weight, m.bias) for m in modules]
    _plain_attention(x, params, None, keep, 1.0, 2).sum().backward()
    for ours, ref in zip(fused, (x.grad, modules[1].weight.grad, modules[1].bias.grad)):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)
    assert modules[0].weight.grad is None and modules[2].bias.grad is None


def test_a_training_step_through_the_fused_attention_equals_the_written_out_path(monkeypatch):
    """With the same seed, the model's training loss and every gradient are the same whether attention takes the
    hand-written path (no probabilities asked for) or the plain one (output_attentions=True)."""
    from bert_core import fast_paths

    calls = []
    fused = fast_paths.self_attention_with_dropout
    monkeypatch.setattr(fast_paths, "self_attention_with_dropout", lambda *a: calls.append(1) or fused(*a))
    config = BertConfig.preset("nano", vocab_size=90, attention_probs_dropout_prob=0.3, hidden_dropout_prob=0.1,
                               attention="causal")
    torch.manual_seed(0)
    model = BertForPreTraining(config).double().train()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 90, (3, 11), generator=g)
    attention_mask = torch.ones_like(ids)
    attention_mask[2, 8:] = 0
    labels = torch.where(torch.rand(ids.shape, generator=g) < 0.3, ids, -100)
    results = []
    for probabilities in (False, True):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(5)
        out = model(ids, attention_mask=attention_mask, labels=labels, next_sentence_label=torch.tensor([0, 1, 0]),
                    output_attentions=probabilities)
        out.loss.backward()
        results.append((out.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    assert len(calls) == config.num_hidden_layers  # the first pass took the fused path, the second did not
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-12, atol=1e-12)
    for name, grad in results[0][1].items():
        torch.testing.assert_close(grad, results[1][1][name], rtol=1e-9, atol=1e-12, msg=name)


# ---------------------------------------------------------------------------------------------- allocator

_FAULTS = textwrap.dedent("""
    import resource, sys, torch
    from bert_core.allocator import keep_freed_memory
    if sys.argv[1] == "keep":
        assert keep_freed_memory()
    for _ in range(20):  # 80 MB, above glibc's mmap threshold; the heap settles after a few
        torch.empty(20_000_000).fill_(1.0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        torch.empty(20_000_000).fill_(1.0)  # written, as a step's logits are
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_keeping_freed_memory_stops_page_faults_on_large_buffers():
    def faults(mode):
        out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True)
        return int(out.stdout)

    default, kept = faults("default"), faults("keep")
    assert default > 50_000  # 5 x 80 MB of fresh 4 KB pages (~97,000), each faulted in by the kernel
    assert kept < 2_000


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
@pytest.mark.parametrize("flag, expected", [([], True), (["--default-malloc"], False)])
def test_bench_keeps_freed_memory_in_its_own_process_and_leaves_the_environment_alone(flag, expected):
    """`python -m bert_core bench` (a training command) keeps freed memory unless it is measuring glibc's
    defaults; it does so in the process it was started as: no restart, no change to GLIBC_TUNABLES."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    code = ("import os, runpy, sys; sys.argv = ['bert_core', *sys.argv[1:]]; pid = os.getpid()\n"
            "try:\n    runpy.run_module('bert_core', run_name='__main__')\n"
            "finally:\n    print('PID', pid, os.getpid(), os.environ.get('GLIBC_TUNABLES'))")
    out = subprocess.run(
        [sys.executable, "-c", code, "bench", "--preset", "nano", "--vocab-size", "300", "--seq-len", "16",
         "--batch-size", "2", "--rounds", "1", "--warmup", "0", "--json", *flag],
        capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parent.parent, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    result = json.loads(lines[-2])
    assert result["freed_memory_kept"] is expected
    _, before, after, tunables = lines[-1].split()
    assert before == after and tunables == "None"

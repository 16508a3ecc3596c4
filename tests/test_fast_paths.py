"""The CPU speed path (bert_core/model/fast_paths.py: 16-bit dropout masks) against torch's dropout, and the allocator
setting of the training processes."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from bert_core.model.bert import BertForPreTraining
from bert_core.model.config import BertConfig
from bert_core.model.fast_paths import FastDropout

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out

# ------------------------------------------------------------------------------------------------ dropout


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_rate_scale_and_expectation(p):
    torch.manual_seed(0)
    drop = FastDropout(p).train()
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
    drop = FastDropout(0.1).train()
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
    assert torch.equal(FastDropout(0.0).train()(x), x)


def test_dropout_rates_too_small_or_large_for_16_bits_fall_back_to_torch():
    x = torch.ones(10_000)
    torch.manual_seed(0)
    almost_all = FastDropout(0.999999).train()(x)  # rounds to 65536 levels: torch's own dropout
    assert almost_all.count_nonzero() < 10
    assert FastDropout(1e-7).train()(x).count_nonzero() > 9990


def test_the_model_drops_out_with_fast_dropout_under_its_own_name():
    """torch's name `Dropout` is not shadowed in the model's module, and every dropout of the model is a
    FastDropout, which is an nn.Dropout (so code that finds dropouts by torch's class, as set_dropout does, works)."""
    import bert_core.model.bert as model_module

    assert "Dropout" not in vars(model_module)
    drops = [m for m in BertForPreTraining(BertConfig.preset("nano", vocab_size=50)).modules()
             if isinstance(m, torch.nn.Dropout)]
    assert drops and all(type(m) is FastDropout for m in drops)


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


# ---------------------------------------------------------------------------------------------- allocator

_FAULTS = textwrap.dedent("""
    import resource, sys, torch
    from bert_core.training.allocator import keep_freed_memory
    if sys.argv[1] == "keep":
        assert keep_freed_memory()
    for _ in range(20):  # 80 MB, above glibc's mmap threshold; the heap settles after a few
        torch.empty(20_000_000).fill_(1.0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        torch.empty(20_000_000).fill_(1.0)  # written, as a step's logits are
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


@pytest.mark.long  # a long check (`--long`): 400 MB of page faults
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_keeping_freed_memory_stops_page_faults_on_large_buffers():
    def faults(mode):
        out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True)
        return int(out.stdout)

    default, kept = faults("default"), faults("keep")
    assert default > 50_000  # 5 x 80 MB of fresh 4 KB pages (~97,000), each faulted in by the kernel
    assert kept < 2_000


@pytest.mark.long  # a long check (`--long`): a bench per flag
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

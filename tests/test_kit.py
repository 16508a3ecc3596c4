"""The inspection kit (bert_core.inspect.kit): what every model class declares, the one eval-mode context and the one
head switch."""

import threading

import pytest
import torch

from bert_core.inspect.kit import evaluating, heads_masked, heads_off, lm_head
from bert_core.errors import BertCoreError
from bert_core.model.bert import (BertForPreTraining, BertForQuestionAnswering, BertForSequenceClassification,
                                  BertForTokenClassification, BertLMHeadModel)
from bert_core.model.config import BertConfig


def _config(**kw):
    return BertConfig.preset("nano", vocab_size=60, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **kw)


@pytest.mark.parametrize("cls, nsp, has_lm", [
    (BertForPreTraining, True, True), (BertLMHeadModel, False, True), (BertForSequenceClassification, False, False),
    (BertForTokenClassification, False, False), (BertForQuestionAnswering, False, False)])
def test_every_model_class_declares_its_heads_labels_and_missing_weights(cls, nsp, has_lm):
    model = cls(_config(attention="causal") if cls is BertLMHeadModel else _config())
    assert model.has_nsp_head is nsp
    assert (model.lm_head is model.cls.predictions) if has_lm else model.lm_head is None
    assert tuple(model.missing_keys) == () and model.label_names is None   # built in memory: nothing missing
    if not has_lm:
        with pytest.raises(BertCoreError, match="no language-model head"):
            lm_head(model)


def test_evaluating_switches_dropout_off_and_restores_the_mode_even_after_an_error():
    model = BertForPreTraining(_config())
    model.train()
    with pytest.raises(ValueError):
        with evaluating(model):
            assert not model.training and torch.is_inference_mode_enabled()
            raise ValueError
    assert model.training and all(m.training for m in model.modules())
    model.eval()
    with evaluating(model, grad=True):
        assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
    assert not model.training


def test_a_batch_with_other_heads_off_in_each_row_matches_each_row_run_alone():
    torch.manual_seed(0)
    model = BertForPreTraining(_config()).eval()
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    x = torch.randint(5, 60, (1, 9))
    picks = [[(0, 0)], [(layers - 1, heads - 1), (0, 1)], []]
    off = torch.zeros(len(picks), layers, heads, dtype=torch.bool)
    for r, pairs in enumerate(picks):
        for layer, head in pairs:
            off[r, layer, head] = True
    with torch.no_grad():
        with heads_masked(model, off):
            batched = model(x.expand(len(picks), -1)).mlm_logits
        alone = []
        for pairs in picks:
            with heads_off(model, pairs):
                alone.append(model(x).mlm_logits[0])
        plain = model(x).mlm_logits[0]
    torch.testing.assert_close(batched, torch.stack(alone))
    assert torch.equal(alone[2], plain) and not torch.allclose(alone[0], plain)
    assert not model.bert.encoder.layer[0].attention.output.dense._forward_pre_hooks   # removed on exit
    with pytest.raises(BertCoreError, match="head 99 does not exist"):
        heads_off(model, [(0, 98)])


def test_a_pages_hooks_leave_a_strangers_pass_on_the_same_model_alone():
    """A class's sessions share one model: while one page's view has heads switched off (hooks on the model), a pass
    another page runs at the same time, on its own thread, is the plain model's. It got the other's heads off before
    (kit.own)."""
    torch.manual_seed(0)
    model = BertForPreTraining(_config()).eval()
    x = torch.randint(5, 60, (1, 8))
    with torch.no_grad():
        plain = model(x).mlm_logits
    inside, done, seen = threading.Event(), threading.Event(), {}

    def page_with_heads_off():
        with heads_off(model, [(0, 0), (1, 1)]), torch.no_grad():
            seen["off"] = model(x).mlm_logits
            inside.set()
            assert done.wait(60)

    def strangers_page():
        assert inside.wait(60)
        with torch.no_grad():
            seen["stranger"] = model(x).mlm_logits
        done.set()

    threads = [threading.Thread(target=page_with_heads_off), threading.Thread(target=strangers_page)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not torch.allclose(seen["off"], plain)          # the heads were off for the page that switched them
    assert torch.equal(seen["stranger"], plain)            # and on for everyone else

"""The feed-forward block on "How BERT computes" (bert_core.inspect.feed_forward) held against transformers'
BertLayer on the shipped folders, its units' top tokens against a plain forward pass per sentence, and its figures."""

import numpy as np
import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.inspect.attention_steps import attention_steps
from bert_core.inspect.feed_forward import (cached_unit_pool, feed_forward_figure, feed_forward_steps, gelu_figure,
                                            unit_firing, unit_firing_figure, unit_pool, what_each_step_does)
from bert_core.model.checkpoint import load_checkpoint
from bert_core.paths import DEFAULT_CHECKPOINT

SHIPPED = DEFAULT_CHECKPOINT.parent
SENTENCE = "the dogs bark at the old man ."
POOL = ["the dogs bark at the old man .", "a bank by the river .", "she put money in the bank today .",
        "the cat sat on the mat and the dog sat too ."]


def _close(mine, ref):
    """Equal to 1e-5 relative to the vector's scale (a LayerNorm's output has components near 0)."""
    ref = np.asarray(ref, dtype=np.float32)
    np.testing.assert_allclose(mine, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


@pytest.mark.parametrize("name", ["bert-mini-english", "gpt-tiny-english"])
def test_the_block_equals_transformers_bert_layer(name):
    transformers = pytest.importorskip("transformers")
    folder = SHIPPED / name
    if not (folder / "config.json").is_file():
        pytest.skip(f"{folder} is not in this checkout")
    ckpt = load_checkpoint(folder, require_tokenizer=True)
    model, tok = ckpt.model.eval(), ckpt.tokenizer
    cls = transformers.BertLMHeadModel if "gpt" in name else transformers.BertForMaskedLM
    ref = cls.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.tensor([[tok.cls_id, *tok.encode(SENTENCE), tok.sep_id]])
    for layer in range(model.config.num_hidden_layers):
        query = 1 + layer
        ffn = feed_forward_steps(model, attention_steps(model, tok, SENTENCE, layer, 0, query))
        block, seen = ref.bert.encoder.layer[layer], {}
        hooks = [m.register_forward_hook(lambda m, a, out, n=n: seen.__setitem__(n, out[0] if n == "x" else out))
                 for m, n in ((block.attention, "x"), (block.intermediate.dense, "pre"), (block.intermediate, "h"),
                              (block.output.dense, "out"))]
        with torch.no_grad():
            hidden = ref.bert(ids, token_type_ids=torch.zeros_like(ids), output_hidden_states=True).hidden_states
        for h in hooks:
            h.remove()
        for field in ("x", "pre", "h", "out"):
            _close(getattr(ffn, field), seen[field][0, query].numpy())
        _close(ffn.residual, (seen["out"] + seen["x"])[0, query].numpy())
        _close(ffn.normed, hidden[layer + 1][0, query].numpy())   # the layer's output: the next layer's input
    assert ffn.h.shape == (model.config.intermediate_size,) and ffn.most_active == int(np.argmax(ffn.h))
    np.testing.assert_allclose(ffn.curve[1], torch.nn.functional.gelu(torch.tensor(ffn.curve[0])).numpy(), atol=1e-6)


def test_a_units_top_tokens_are_where_it_fires_most_in_a_plain_forward_pass():
    ckpt = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    model, tok = ckpt.model.eval(), ckpt.tokenizer
    layer = model.config.num_hidden_layers - 1
    units = unit_pool(model, tok, POOL * 10, "test", layer)   # 40 sentences: two of the pool's batches
    everything = []   # (activation, token, sentence) of every unit-0.. token, one sentence at a time
    block = model.bert.encoder.layer[layer].intermediate
    for sentence in POOL:
        ids = [tok.cls_id, *tok.encode(sentence), tok.sep_id]
        seen = []
        handle = block.register_forward_hook(lambda m, a, out: seen.append(out[0]))
        with torch.no_grad():
            model.bert(torch.tensor([ids]))
        handle.remove()
        pieces = tok.convert_ids_to_tokens(ids)
        everything += [(seen[0][p].numpy(), pieces[p], sentence) for p in range(1, len(ids) - 1)]
    unit = int(np.argmax(np.stack([a for a, _, _ in everything]).max(0)))
    want = sorted(((float(a[unit]), t) for a, t, _ in everything), reverse=True)[:3]
    firing = unit_firing(units, unit, k=30)   # each token ten times over: the top 30 are the top 3 ten times
    np.testing.assert_allclose(firing.values[::10], [v for v, _ in want], rtol=1e-5)
    assert firing.tokens[::10] == [t for _, t in want] and firing.layer == layer and firing.unit == unit
    assert all(f"«{t.removeprefix('##')}»" in c and "##" not in c for t, c in zip(firing.tokens, firing.contexts))
    assert cached_unit_pool(model, tok, POOL, "test", 0) is cached_unit_pool(model, tok, POOL, "test", 0)
    with pytest.raises(BertCoreError, match=f"unit {units.acts.shape[1] + 1} does not exist"):
        unit_firing(units, units.acts.shape[1])


def test_the_figures_and_sentences_carry_the_numbers_and_count_from_one():
    ckpt = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    model, tok = ckpt.model.eval(), ckpt.tokenizer
    ffn = feed_forward_steps(model, attention_steps(model, tok, SENTENCE, 1, 0, 0))
    words = what_each_step_does(ffn)
    assert len(words) == 5 and "\\[CLS\\]" in words[0]   # a token through safe_text.markdown
    assert f"unit {ffn.most_active + 1} fires most" in words[2]
    fig = feed_forward_figure(ffn)
    rows = {t.name: t for t in fig.data if t.type == "heatmap"}
    np.testing.assert_allclose(rows["W1·x + b1"].z[0], ffn.pre)
    assert list(rows["W1·x + b1"].x[:2]) == ["1", "2"] and "%{z:.4f}" in rows["W1·x + b1"].hovertemplate
    gelu = gelu_figure(ffn, ffn.most_active)
    assert any(f"unit {ffn.most_active + 1}" in (t.name or "") for t in gelu.data)
    firing = unit_firing(unit_pool(model, tok, POOL, "test", 1), ffn.most_active, k=5)
    bars = unit_firing_figure(firing).data[0]
    assert list(bars.x) == [float(v) for v in firing.values] and bars.y[0].startswith("1 ")

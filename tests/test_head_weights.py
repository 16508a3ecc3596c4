"""The weights as matrices on "How BERT computes" (bert_core.inspect.head_weights): q, k and v as the head's slice
of W_Q, W_K, W_V times a token's hidden state, held against transformers' BertModel on the shipped folders, and the
element-wise q × k whose rows sum to the scores the page draws; the figures count from 1, carry their numbers on
hover, keep text at 12 px or more and show a visitor's token as characters."""

import numpy as np
import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.inspect import computation_figures as cf
from bert_core.inspect.attention_steps import attention_steps
from bert_core.inspect.figure_floor import MIN_FONT_PX
from bert_core.inspect.head_weights import head_projection, products_figure, projection_figure, query_key_products
from bert_core.inspect.safe_text import safe_figure
from bert_core.model.checkpoint import load_checkpoint
from bert_core.paths import DEFAULT_CHECKPOINT

SHIPPED = DEFAULT_CHECKPOINT.parent
SENTENCE = "the dogs bark at the old man ."


def _close(mine, ref):
    """Equal to 1e-5 relative to the vector's scale (measured: 1e-6 at worst, one float32 sum in another order)."""
    ref = np.asarray(ref, dtype=np.float32)
    np.testing.assert_allclose(mine, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


def _shipped(name):
    folder = SHIPPED / name
    if not (folder / "config.json").is_file():
        pytest.skip(f"{folder} is not in this checkout")
    ckpt = load_checkpoint(folder, require_tokenizer=True)
    return folder, ckpt.model.eval(), ckpt.tokenizer


@pytest.mark.parametrize("name", ["bert-tiny-english", "bert-mini-english", "gpt-tiny-english"])
def test_w_times_x_plus_b_is_transformers_q_k_and_v(name):
    transformers = pytest.importorskip("transformers")
    folder, model, tok = _shipped(name)
    ref = transformers.BertModel.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.tensor([[tok.cls_id, *tok.encode(SENTENCE), tok.sep_id]])
    cfg = model.config
    for layer in range(cfg.num_hidden_layers):
        own, seen = ref.encoder.layer[layer].attention.self, {}
        hooks = [getattr(own, n).register_forward_hook(lambda m, a, out, n=n: seen.__setitem__(n, out[0]))
                 for n in ("query", "key", "value")]
        with torch.no_grad():
            hidden = ref(ids, token_type_ids=torch.zeros_like(ids), output_hidden_states=True).hidden_states
        for h in hooks:
            h.remove()
        for head in {0, cfg.num_attention_heads - 1}:
            steps = attention_steps(model, tok, SENTENCE, layer, head, 2)
            cut = slice(head * steps.head_dim, (head + 1) * steps.head_dim)
            for token in range(len(steps.tokens)):
                for n, mine in (("query", steps.q if token == 2 else None), ("key", steps.k[token]),
                                ("value", steps.v[token])):
                    p = head_projection(model, steps, n, token)
                    assert p.weight.shape == (steps.head_dim, cfg.hidden_size)
                    np.testing.assert_array_equal(p.weight, getattr(own, n).weight[cut].detach().numpy())
                    np.testing.assert_array_equal(p.bias, getattr(own, n).bias[cut].detach().numpy())
                    _close(p.x, hidden[layer][0, token].numpy())        # the hidden state entering the layer
                    _close(p.result, seen[n][token, cut].numpy())       # transformers' q, k or v for the head
                    _close(p.result, p.weight @ p.x + p.bias)           # and it is the matrix times the vector
                    if mine is not None:
                        _close(p.result, mine)                          # the strips the page already draws


@pytest.mark.parametrize("name", ["bert-mini-english", "gpt-tiny-english"])
def test_the_products_rows_sum_to_the_scores_already_drawn(name):
    _, model, tok = _shipped(name)
    steps = attention_steps(model, tok, SENTENCE, 1, 1, 3)
    products = query_key_products(steps)
    assert products.shape == (len(steps.tokens), steps.head_dim)
    np.testing.assert_allclose(products[5, 7], steps.q[7] * steps.k[5, 7], rtol=1e-6)
    drawn_scores = [t for t in cf.scores_figure(steps).data if t.name == "q·k"][0].y
    fig = products_figure(steps)
    cells, sums = fig.data
    np.testing.assert_allclose(cells.z, products)
    _close(np.ravel(sums.z), drawn_scores)
    _close(products.sum(axis=1), drawn_scores)
    assert list(cells.y) == cf.token_labels(steps.tokens) and cells.x[0] == "1"
    assert "%{z:.4f}" in cells.hovertemplate and "customdata[0]" in cells.hovertemplate
    hidden = [c[0] for c in sums.customdata]
    assert all(bool(h) != a for h, a in zip(hidden, steps.allowed))   # the causal mask's later keys say so
    assert (not steps.allowed.all()) == ("gpt" in name)
    # the causal mask's keys (after the query) washed pale, as the scores figure greys them
    assert [(s.y0, s.y1) for s in fig.layout.shapes] == ([(3.5, len(steps.tokens) - 0.5)] if "gpt" in name else [])
    assert ("pale: hidden by the mask" in fig.layout.title.text) == ("gpt" in name)


def test_the_projection_figure_counts_from_one_and_carries_its_numbers():
    _, model, tok = _shipped("bert-tiny-english")
    steps = attention_steps(model, tok, SENTENCE, 1, 0, 3)
    p = head_projection(model, steps, "key", 5)
    fig = projection_figure(p)
    x, weight, bias, result = fig.data
    np.testing.assert_array_equal(x.z[0], p.x)
    np.testing.assert_array_equal(weight.z, p.weight)
    np.testing.assert_allclose(weight.customdata, p.weight * p.x[None, :])   # each cell's share of the sum
    np.testing.assert_array_equal(np.ravel(result.z), p.result)
    assert np.ravel(bias.z).tolist() == p.bias.tolist()
    assert weight.x[0] == "1" and weight.y[0] == "1" and "%{z:.4f}" in weight.hovertemplate
    title = fig.layout.title.text
    assert "Layer 2, head 1: k = W_K·x + b" in title and f"token 6 “{steps.tokens[5]}”" in title
    titles = [a.text for a in fig.layout.annotations]
    assert titles[1] == f"W_K: {steps.head_dim} × {model.config.hidden_size}" and titles[-1] == "= k"
    for f in (fig, products_figure(steps)):
        sizes = [t.textfont.size for t in f.data if t.textfont.size is not None]
        sizes += [f.layout.font.size, *(a.font.size for a in f.layout.annotations)]
        assert min(sizes) >= MIN_FONT_PX, sizes


def test_a_visitors_token_is_drawn_as_characters():
    _, model, tok = _shipped("bert-tiny-english")
    steps = attention_steps(model, tok, "<b>dogs</b> bark .", 0, 0, 1)
    assert steps.tokens[1] == "<"
    for fig in (projection_figure(head_projection(model, steps, "query", 1)), products_figure(steps)):
        spec = str(safe_figure(fig).to_plotly_json())
        assert "&lt;" in spec and "“<”" not in spec and "2 <" not in spec


def test_a_projection_or_token_that_does_not_exist_is_refused_in_words():
    _, model, tok = _shipped("bert-tiny-english")
    steps = attention_steps(model, tok, SENTENCE, 0, 0, 1)
    with pytest.raises(BertCoreError, match="no projection named 'output'"):
        head_projection(model, steps, "output", 1)
    with pytest.raises(BertCoreError, match=f"token {len(steps.tokens) + 1} does not exist"):
        head_projection(model, steps, "key", len(steps.tokens))

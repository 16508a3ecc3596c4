"""One picture of the whole pass (bert_core.inspect.whole_pass) on the shipped tiny and mini BERTs and the GPT twin:
its numbers are the model's own (the hidden states of output_hidden_states, the attention block's output that
attention_steps hooks, the feed-forward block's W2·h + b2 that feed_forward_steps computes, the embedding layer's
output, the lens's last guesses), its labels carry the model's own shapes, a deep model's middle layers fold into
one row, a visitor's text reaches the figure inert; and on the page (AppTest) the picture draws in its tab and a
block picked opens its tab at its layer, on the same text and token."""

import json

import numpy as np
import pytest

from bert_core.errors import BertCoreError
from bert_core.inspect.attention_steps import attention_steps, lens_input, logit_lens
from bert_core.inspect.feed_forward import feed_forward_steps
from bert_core.inspect.kit import hidden_states
from bert_core.inspect.safe_text import safe_figure
from bert_core.inspect.whole_pass import (ATTENTION, EMBEDDINGS, FEED_FORWARD, HEAD, WholePass, blocks, opened_block,
                                          shown_layers, whole_pass, whole_pass_figure)
from bert_core.model.checkpoint import load_checkpoint
from bert_core.paths import DEFAULT_CHECKPOINT

SHIPPED = DEFAULT_CHECKPOINT.parent
MODELS = {"bert-tiny-english": "The capital of France is [MASK] .",
          "bert-mini-english": "I like to drink a cup of [MASK] in the morning.",
          "gpt-tiny-english": "I like to drink a cup of"}


def _load(name: str):
    folder = SHIPPED / name
    if not (folder / "config.json").is_file():
        pytest.skip(f"{folder} is not in this checkout")
    ckpt = load_checkpoint(folder, require_tokenizer=True)
    return ckpt.model.eval(), ckpt.tokenizer


def _close(a, b) -> None:
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("name", list(MODELS))
def test_the_numbers_are_the_models_own(name):
    model, tok = _load(name)
    text = MODELS[name]
    wp = whole_pass(model, tok, text)
    cfg = model.config
    assert wp.num_layers == cfg.num_hidden_layers and wp.causal == ("gpt" in name)
    assert wp.tokens[wp.position] == ("[MASK]" if "bert" in name else wp.tokens[-1])
    ids = lens_input(model, tok, text)[0]
    hidden = [h[0, wp.position].float() for h in hidden_states(model, tok, [ids])]
    _close(wp.embedding_norms["after"], float(hidden[0].norm()))
    _close(wp.ffn_after, [float(h.norm()) for h in hidden[1:]])
    for layer in range(cfg.num_hidden_layers):
        steps = attention_steps(model, tok, text, layer, 0, wp.position)
        ffn = feed_forward_steps(model, steps)
        _close(wp.attention_after[layer], np.linalg.norm(steps.model_normed))
        _close(wp.attention_adds[layer], np.linalg.norm(steps.projected))
        _close(wp.ffn_adds[layer], np.linalg.norm(ffn.out))
        before, after = hidden[layer].numpy(), steps.model_normed
        _close(wp.attention_moved[layer], np.linalg.norm(after - before) / np.linalg.norm(before))
    lens = logit_lens(model, tok, text, top_k=3)
    assert [t for t, _ in wp.guesses] == [t for t, _ in lens.top[-1]]
    _close([p for _, p in wp.guesses], [p for _, p in lens.top[-1]])


@pytest.mark.parametrize("name", list(MODELS))
def test_every_block_is_labelled_with_the_models_shapes(name):
    model, tok = _load(name)
    cfg = model.config
    wp = whole_pass(model, tok, MODELS[name])
    fig = whole_pass_figure(wp)
    texts = [a.text for a in fig.layout.annotations]
    joined = json.dumps(texts, ensure_ascii=False)
    h, i = cfg.hidden_size, cfg.intermediate_size
    assert f"attention: {cfg.num_attention_heads} heads × {cfg.head_dim}, {h} → {h}" in joined
    assert f"feed-forward {h} → {i} → {h}" in joined
    assert f"word ({cfg.vocab_size:,} × {h})" in joined and f"→ {cfg.vocab_size:,} scores" in joined
    assert ("next-token head" in joined) == wp.causal and ("MLM head" in joined) != wp.causal
    for layer in range(cfg.num_hidden_layers):   # each block's own number
        assert f"Layer {layer + 1}" in texts
        assert any(f"‖h‖ {wp.attention_after[layer]:.2f}" in t for t in texts)
        assert any(f"‖h‖ {wp.ffn_after[layer]:.2f}" in t for t in texts)
    assert wp.guesses[0][0] in joined
    keys = list(fig.data[0].customdata)   # a clickable point per block that opens a view
    assert keys == [b.key for b in blocks(wp)]
    assert keys[0] == EMBEDDINGS and keys[-1] == HEAD and f"{FEED_FORWARD} {cfg.num_hidden_layers}" in keys
    sizes = [a.font.size for a in fig.layout.annotations] + [fig.layout.title.font.size or 13]
    assert min(s for s in sizes if s is not None) >= 12


def test_a_deep_models_middle_layers_fold_into_one_row():
    assert shown_layers(4) == [0, 1, 2, 3]
    assert shown_layers(12) == list(range(12))
    assert shown_layers(24) == [0, 1, 2, 3, 4, None, 19, 20, 21, 22, 23]
    n = 24
    wp = WholePass(text="a [MASK]", tokens=["[CLS]", "a", "[MASK]", "[SEP]"], position=2, causal=False,
                   sizes=dict(hidden=768, heads=12, head_dim=64, intermediate=3072, vocab=30522, layers=n,
                              positions=512, segments=2),
                   embedding_norms=dict(word=1.0, position=1.0, segment=1.0, sum=2.0, after=20.0),
                   attention_adds=np.ones(n), attention_after=np.full(n, 20.0), ffn_adds=np.ones(n),
                   ffn_after=np.full(n, 21.0), attention_moved=np.full(n, 0.1), ffn_moved=np.full(n, 0.2),
                   guesses=[("it", 0.5)])
    texts = [a.text for a in whole_pass_figure(wp).layout.annotations]
    assert "Layer 5" in texts and "Layer 6" not in texts and "Layer 20" in texts
    assert any("layers 6 to 19" in t for t in texts)
    assert "attention: 12 heads × 64, 768 → 768<br>+ residual, LayerNorm" in texts
    assert len(whole_pass_figure(wp).data[0].customdata) == 2 + 2 * 10   # the rows drawn open by a click...
    assert len(blocks(wp)) == 2 + 2 * n                                   # ...and every layer from the picker


def test_a_visitors_text_reaches_the_figure_inert_and_bad_text_gets_a_message():
    model, tok = _load("bert-tiny-english")
    wp = whole_pass(model, tok, '<a href="https://x.example">click</a> [MASK]')
    spec = json.dumps(safe_figure(whole_pass_figure(wp)).to_plotly_json()["layout"]["annotations"])
    assert "<a href" not in spec and "&lt;a href" in spec
    with pytest.raises(BertCoreError, match="no \\[MASK\\]"):
        whole_pass(model, tok, "no mask here")
    gpt, gtok = _load("gpt-tiny-english")
    with pytest.raises(BertCoreError, match="empty"):
        whole_pass(gpt, gtok, "  ")


def test_a_block_key_names_its_view_and_layer():
    assert opened_block("embeddings") == (EMBEDDINGS, None)
    assert opened_block("attention 3") == (ATTENTION, 2)
    assert opened_block("feed-forward 12") == (FEED_FORWARD, 11)
    assert opened_block("head") == (HEAD, None)
    for bad in ("", "layer 3", "attention x", "5"):
        with pytest.raises(ValueError):
            opened_block(bad)


# ---------------------------------------------------------------------------------------------- on the page


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert-mini-english", "gpt-tiny-english"])
def test_the_picture_shows_and_a_block_opens_its_view_at_its_layer(name, monkeypatch):
    from tests.test_how_bert_computes_page import _clean, _errors, _open, _tab

    at = _tab(_open(SHIPPED / name, monkeypatch), "The whole pass")
    assert not at.error, _errors(at)
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert sum("The whole pass, following" in t for t in titles) == 1
    text = at.text_input(key="hbc_pass").value
    model, tok = _load(name)
    wp = whole_pass(model, tok, text)
    at.selectbox(key="hbc_pass_block").set_value(f"{FEED_FORWARD} 2").run()
    at.button(key="hbc_pass_open").click().run()
    _clean(at)
    assert at.session_state["hbc_tab"] == "Inside attention"
    assert at.selectbox(key="hbc_layer").value == 2
    assert at.selectbox(key="hbc_token").value == wp.position + 1
    assert at.text_area(key="hbc_a").value == text
    assert "The feed-forward block" in [h.value for h in at.subheader]
    _tab(at, "The whole pass").selectbox(key="hbc_pass_block").set_value(HEAD).run()
    at.text_input(key="hbc_pass").set_value(text.replace("cup", "glass")).run()
    at.button(key="hbc_pass_open").click().run()
    _clean(at)
    assert at.session_state["hbc_tab"] == "Each layer's guess"
    assert at.text_input(key="hbc_lens").value == text.replace("cup", "glass")
    _tab(at, "The whole pass").text_input(key="hbc_pass").set_value("[MASK]" if wp.causal else "no mask at all").run()
    _clean(at)
    assert any("MASK" in e for e in _errors(at)), _errors(at)


"""The views of "How BERT computes" held against the model's own forward pass and against transformers: the logit
lens, attention step by step, heads switched off, and the embeddings (bert_core.inspect.attention_steps,
embeddings)."""

import math

import numpy as np
import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.inspect.attention_steps import (attention_steps, heads_off, heads_off_effect, lens_input, logit_lens,
                                               with_temperature)
from bert_core.inspect.embeddings import SENSE_SENTENCES, embedding_parts, nearest_neighbours
from bert_core.inspect.inspection import fill_mask
from bert_core.inspect.word_map_vectors import word_map
from bert_core.inspect.word_maps import pca_2d, separation
from bert_core.model.checkpoint import load_checkpoint
from bert_core.paths import DEFAULT_CHECKPOINT

SHIPPED = DEFAULT_CHECKPOINT.parent
SENTENCE = "the dogs bark at the old man ."
PROMPTS = {"bert": "the cat sat on the [MASK] .", "gpt": "the cat sat on the"}


@pytest.fixture(scope="module", params=["bert-tiny-english", "gpt-tiny-english", "bert-mini-english"])
def shipped(request):
    folder = SHIPPED / request.param
    if not (folder / "config.json").is_file():
        pytest.skip(f"{folder} is not in this checkout")
    ckpt = load_checkpoint(folder, require_tokenizer=True)
    return folder, ckpt.model.eval(), ckpt.tokenizer, PROMPTS["gpt" if "gpt" in request.param else "bert"]


def _full_logits(model, ids, types=None):
    x = torch.tensor([ids])
    t = torch.tensor([types]) if types is not None else torch.zeros_like(x)
    with torch.no_grad():
        return model(x, torch.ones_like(x), t, full_mlm_logits=True).mlm_logits[0]


# ------------------------------------------------------------------------------------------ logit lens


def test_the_lens_at_the_last_layer_is_the_models_own_answer(shipped):
    _, model, tok, prompt = shipped
    lens = logit_lens(model, tok, prompt, top_k=5)
    ids, types, _, position = lens_input(model, tok, prompt)
    assert lens.num_layers == model.config.num_hidden_layers and lens.logits.shape[0] == lens.num_layers + 1
    np.testing.assert_allclose(lens.logits[-1], _full_logits(model, ids, types)[position].numpy(), atol=1e-5)
    if not lens.causal:  # exactly the Predictions page's answer
        answer = fill_mask(model, tok, prompt, top_k=5)[0].candidates
        assert [t for t, _ in lens.top[-1]] == [t for t, _ in answer]
        np.testing.assert_allclose([p for _, p in lens.top[-1]], [p for _, p in answer], atol=1e-6)
    else:  # the next token after the text, as generation reads it: [CLS] text, no [SEP]
        assert ids[0] == tok.cls_id and ids[-1] != tok.sep_id and position == len(ids) - 1
    np.testing.assert_allclose(lens.tracked_probs[-1], [p for _, p in lens.top[-1]], atol=1e-6)
    assert lens.tracked == [t for t, _ in lens.top[-1]]


def test_the_lens_refuses_a_bert_text_without_a_mask_and_a_gpt_text_with_one():
    bert = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    with pytest.raises(BertCoreError, match="no \\[MASK\\]"):
        logit_lens(bert.model, bert.tokenizer, "the cat sat .")
    gpt = load_checkpoint(SHIPPED / "gpt-tiny-english", require_tokenizer=True)
    with pytest.raises(BertCoreError, match="next token"):
        logit_lens(gpt.model, gpt.tokenizer, "the cat sat on the [MASK] .")


# ------------------------------------------------------------------------------------------ attention steps


def test_each_step_equals_the_models_own_numbers(shipped):
    _, model, tok, _ = shipped
    cfg = model.config
    layer, head, query = cfg.num_hidden_layers - 1, cfg.num_attention_heads - 1, 4
    s = attention_steps(model, tok, SENTENCE, layer, head, query)
    ids = [tok.cls_id, *tok.encode(SENTENCE), tok.sep_id]
    x = torch.tensor([ids])
    with torch.no_grad():
        _, _, hidden, probs = model.bert(x, output_attentions=True, output_hidden_states=True)
    attn = model.bert.encoder.layer[layer].attention
    d = cfg.hidden_size // cfg.num_attention_heads
    cut = slice(head * d, (head + 1) * d)
    # The hidden state entering the layer is the previous layer's output.
    np.testing.assert_allclose(s.hidden_in, hidden[layer][0].numpy(), atol=1e-5)
    # q, k, v are the projections of it, sliced to the head.
    with torch.no_grad():
        h = hidden[layer][0]
        np.testing.assert_allclose(s.q, attn.self.query(h)[query, cut].numpy(), atol=1e-5)
        np.testing.assert_allclose(s.k, attn.self.key(h)[:, cut].numpy(), atol=1e-5)
        np.testing.assert_allclose(s.v, attn.self.value(h)[:, cut].numpy(), atol=1e-5)
    np.testing.assert_allclose(s.scores, s.k @ s.q, atol=1e-4)
    np.testing.assert_allclose(s.scaled, s.scores / math.sqrt(d), atol=1e-5)
    # The softmax is the model's attention row, and its log is the masked scores up to a constant.
    row = probs[layer][0, head, query].numpy()
    np.testing.assert_allclose(s.probs, row, atol=1e-5)
    np.testing.assert_allclose(s.model_probs, row, atol=1e-6)
    seen = row > 1e-6
    logs = np.log(row[seen]) - np.log(row[seen]).max()
    np.testing.assert_allclose(logs, s.masked[seen] - s.masked[seen].max(), atol=1e-4)
    # The weighted sum is the head's context; the joined heads, projection, residual and LayerNorm follow.
    np.testing.assert_allclose(s.context, s.model_context, atol=1e-5)
    with torch.no_grad():
        projected = attn.output.dense(torch.from_numpy(s.heads_joined)).numpy()
    np.testing.assert_allclose(s.projected, projected, atol=1e-5)
    np.testing.assert_allclose(s.residual, s.projected + s.hidden_in[query], atol=1e-5)
    np.testing.assert_allclose(s.normed, s.model_normed, atol=1e-5)
    if layer + 1 < len(hidden):  # and the feed-forward part turns that into the layer's output
        with torch.no_grad():
            block = model.bert.encoder.layer[layer]
            t = torch.from_numpy(s.model_normed)
            out = block.output(block.intermediate(t), t).numpy()
        np.testing.assert_allclose(out, hidden[layer + 1][0, query].numpy(), atol=1e-5)


def test_the_causal_mask_hides_exactly_the_later_tokens():
    gpt = load_checkpoint(SHIPPED / "gpt-tiny-english", require_tokenizer=True)
    s = attention_steps(gpt.model, gpt.tokenizer, SENTENCE, 0, 0, 3)
    assert s.causal and s.allowed.tolist() == [i <= 3 for i in range(len(s.tokens))]
    assert np.all(s.probs[4:] == 0) and s.probs[:4].sum() == pytest.approx(1, abs=1e-6)
    bert = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    b = attention_steps(bert.model, bert.tokenizer, SENTENCE, 0, 0, 3)
    assert not b.causal and b.allowed.all() and np.all(b.masked == b.scaled)  # one sentence: nothing to pad


def test_temperature_one_is_the_model_and_others_sharpen_or_flatten_it(shipped):
    _, model, tok, _ = shipped
    s = attention_steps(model, tok, SENTENCE, 0, 0, 5)
    np.testing.assert_allclose(with_temperature(s, 1.0), s.model_probs, atol=1e-5)
    entropy = [float(-(p[p > 0] * np.log(p[p > 0])).sum()) for p in (with_temperature(s, t) for t in (0.3, 1, 3))]
    assert entropy[0] < entropy[1] < entropy[2]
    assert np.all(with_temperature(s, 3)[~s.allowed] == 0)
    with pytest.raises(BertCoreError, match="temperature"):
        with_temperature(s, 0)


def test_picks_out_of_range_are_refused_in_words_counted_from_one():
    bert = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    n = bert.model.config.num_hidden_layers
    with pytest.raises(BertCoreError, match=f"layer {n + 1} does not exist"):
        attention_steps(bert.model, bert.tokenizer, SENTENCE, n, 0, 0)
    with pytest.raises(BertCoreError, match="token 99 does not exist"):
        attention_steps(bert.model, bert.tokenizer, SENTENCE, 0, 0, 98)


# ------------------------------------------------------------------------------------------ heads off


def test_a_head_switched_off_matches_the_same_head_zeroed_in_transformers(shipped):
    transformers = pytest.importorskip("transformers")
    folder, model, tok, prompt = shipped
    cfg = model.config
    heads = [(0, 1), (cfg.num_hidden_layers - 1, 0)]
    ids, types, _, position = lens_input(model, tok, prompt)
    cls = transformers.BertLMHeadModel if "gpt" in folder.name else transformers.BertForMaskedLM
    ref = cls.from_pretrained(folder, dtype=torch.float32).eval()
    d = cfg.hidden_size // cfg.num_attention_heads
    with torch.no_grad():
        # transformers 5 has no head_mask; its old head_mask of 0 zeroed a head's probabilities, hence its context,
        # which is what zeroing the projection's input columns for that head does.
        for layer, head in heads:
            ref.bert.encoder.layer[layer].attention.output.dense.weight[:, head * d:(head + 1) * d] = 0
        expected = ref(torch.tensor([ids]), token_type_ids=torch.tensor([types])).logits[0, position]
    before = _full_logits(model, ids, types)[position]
    with heads_off(model, heads):
        after = _full_logits(model, ids, types)[position]
    np.testing.assert_allclose(after.numpy(), expected.numpy(), atol=1e-5)
    assert (after - before).abs().max() > 1e-3  # switching them off did something
    np.testing.assert_allclose(_full_logits(model, ids, types)[position].numpy(), before.numpy(), atol=0)  # hooks gone
    effect = heads_off_effect(model, tok, prompt, heads)
    assert effect.answer == effect.before[0][0]
    assert effect.answer_after == pytest.approx(float(after.softmax(-1)[tok.token_to_id(effect.answer)]), abs=1e-6)


def test_every_head_of_a_layer_off_leaves_only_the_projections_bias():
    bert = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    model = bert.model.eval()
    heads = [(1, h) for h in range(model.config.num_attention_heads)]
    seen = {}
    dense = model.bert.encoder.layer[1].attention.output.dense
    handle = dense.register_forward_hook(lambda m, a, out: seen.__setitem__("out", out))
    try:
        with heads_off(model, heads):
            _full_logits(model, [bert.tokenizer.cls_id, *bert.tokenizer.encode(SENTENCE), bert.tokenizer.sep_id])
    finally:
        handle.remove()
    np.testing.assert_allclose(seen["out"][0].detach().numpy(), dense.bias.detach().expand_as(seen["out"][0]).numpy(),
                               atol=1e-6)


# ------------------------------------------------------------------------------------------ embeddings


def test_the_embedding_parts_add_up_to_the_models_embedding_output(shipped):
    _, model, tok, _ = shipped
    p = embedding_parts(model, tok, "the dogs bark .", "they are loud .")
    emb = model.bert.embeddings
    ids = [tok.cls_id, *tok.encode("the dogs bark ."), tok.sep_id, *tok.encode("they are loud ."), tok.sep_id]
    assert p.tokens == tok.convert_ids_to_tokens(ids) and p.token_type_ids[-1] == 1 and p.token_type_ids[0] == 0
    np.testing.assert_allclose(p.word, emb.word_embeddings.weight[ids].detach().numpy(), atol=0)
    np.testing.assert_allclose(p.position, emb.position_embeddings.weight[:len(ids)].detach().numpy(), atol=0)
    np.testing.assert_allclose(p.segment[-1], emb.token_type_embeddings.weight[1].detach().numpy(), atol=0)
    np.testing.assert_allclose(p.summed, p.word + p.position + p.segment, atol=1e-6)
    np.testing.assert_allclose(p.normed, p.model_output, atol=1e-5)
    x = torch.tensor([ids])
    with torch.no_grad():
        hidden = model.bert(x, token_type_ids=torch.tensor([p.token_type_ids]), output_hidden_states=True)[2]
    np.testing.assert_allclose(p.model_output, hidden[0][0].numpy(), atol=1e-6)


def test_nearest_neighbours_are_the_closest_rows_by_cosine():
    bert = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    table = torch.nn.functional.normalize(bert.model.bert.embeddings.word_embeddings.weight.detach(), dim=-1)
    found = nearest_neighbours(bert.model, bert.tokenizer, "king", k=8)
    king = bert.tokenizer.token_to_id("king")
    assert len(found) == 8 and "king" not in [t for t, _ in found]
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
    for token, sim in found:
        assert sim == pytest.approx(float(table[bert.tokenizer.token_to_id(token)] @ table[king]), abs=1e-5)
    others = torch.tensor([i for i in range(len(table)) if i != king and i not in bert.tokenizer.never_sample_ids])
    assert found[0][1] == pytest.approx(float((table[others] @ table[king]).max()), abs=1e-5)


def test_pca_keeps_a_line_as_a_line_and_fixes_the_axis_sign():
    rng = np.random.default_rng(0)
    direction = rng.normal(size=16)
    x = np.outer(np.linspace(-1, 1, 9), direction) + 5
    coords, explained = pca_2d(x)
    assert explained == pytest.approx(1.0, abs=1e-9)
    dist = np.linalg.norm(x[0] - x[-1])
    assert np.linalg.norm(coords[0] - coords[-1]) == pytest.approx(dist, rel=1e-5)
    flipped, _ = pca_2d(-x)
    np.testing.assert_allclose(np.abs(flipped), np.abs(coords), atol=1e-4)


def test_the_word_map_follows_the_word_in_each_sentence_through_every_layer():
    bert = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    rows = SENSE_SENTENCES["play"]
    m = word_map(bert.model, bert.tokenizer, "play", [s for _, s in rows] + ["no such word here ."],
                 [g for g, _ in rows] + ["none"])
    n = len(rows)
    assert m.points.shape == (bert.model.config.num_hidden_layers + 1, n, 2)
    assert m.skipped == ["no such word here ."] and m.labels == [g for g, _ in rows]
    assert np.all((0 < m.explained) & (m.explained <= 1))
    assert separation(m.points[-1], m.labels) > 0 and separation(m.points[-1], ["x"] * n) == 0
    with pytest.raises(BertCoreError, match="at least 3"):
        word_map(bert.model, bert.tokenizer, "play", ["we play .", "a cat ."])


# ------------------------------------------------------------------------------------------ figures


def test_the_figures_show_the_results_numbers_and_count_from_one():
    from bert_core.inspect import computation_figures as cf
    from bert_core.inspect.grammar import compare_pair

    gpt = load_checkpoint(SHIPPED / "gpt-tiny-english", require_tokenizer=True)
    s = attention_steps(gpt.model, gpt.tokenizer, SENTENCE, 1, 0, 3)
    fig = cf.scores_figure(s, 2.0, with_temperature(s, 2.0))
    softmax = [t for t in fig.data if t.name == "the model (temperature 1)"][0]
    np.testing.assert_allclose(softmax.y, s.probs)
    assert softmax.x[0] == "1 [CLS]" and "causal mask" in fig.layout.title.text
    assert [t.name for t in fig.data][-1] == "what-if: temperature 2"
    assert list(softmax.marker.color[4:]) == [cf.FUTURE_COLOUR] * (len(s.tokens) - 4)  # hidden keys are grey
    assert "Layer 2, head 1" in cf.vectors_figure(s).layout.title.text
    lens = logit_lens(gpt.model, gpt.tokenizer, "the cat sat on the")
    table = cf.lens_figure(lens)
    assert list(table.data[0].y) == ["embeddings", "layer 1", "layer 2"] and "next token" in table.layout.title.text
    c = compare_pair(gpt.model, gpt.tokenizer, "the dogs bark .", "the dogs barks .")
    assert sum(cf.shares_figure(c).data[0].y) == pytest.approx(c.difference, abs=1e-6)
    bert = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    rows = SENSE_SENTENCES["bank"]
    m = word_map(bert.model, bert.tokenizer, "bank", [x for _, x in rows], [g for g, _ in rows])
    titles = [a.text for a in cf.word_map_figure(m).layout.annotations]
    assert titles[0].startswith("embeddings") and titles[1].startswith("layer 1") and len(titles) == 3
    effect = heads_off_effect(bert.model, bert.tokenizer, PROMPTS["bert"], [(0, 1)])
    assert "L1 H2" in cf.heads_off_figure(effect).layout.title.text


# ------------------------------------------------------------------------------------------ contextual neighbours


def test_the_pool_holds_each_tokens_own_vector_at_every_layer_and_neighbours_are_the_nearest():
    from bert_core.inspect.embeddings import contextual_neighbours, token_pool

    bert = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    model, tok = bert.model.eval(), bert.tokenizer
    sentences = ["the dogs bark at the old man .", "a bank by the river .", "she put money in the bank today ."]
    pool = token_pool(model, tok, sentences, "test")   # padded batches, shortest first
    assert pool.unit.shape[0] == model.config.num_hidden_layers + 1
    for sentence in sentences:
        ids = [tok.cls_id, *tok.encode(sentence), tok.sep_id]
        with torch.no_grad():
            hidden = model.bert(torch.tensor([ids]), output_hidden_states=True)[2]
        rows = [i for i, s in enumerate(pool.sentence_of) if pool.sentences[s] == sentence]
        assert pool.tokens[rows[0]:rows[-1] + 1] == tok.convert_ids_to_tokens(ids[1:-1])   # no [CLS] or [SEP]
        for layer, h in enumerate(hidden):
            want = torch.nn.functional.normalize(h[0, 1:-1], dim=-1).numpy()
            np.testing.assert_allclose(pool.unit[layer, rows], want, atol=1e-5)   # padding changed nothing
    query = "she put money in the bank today ."
    position = [tok.cls_id, *tok.encode(query)].index(tok.token_to_id("bank"))
    near = contextual_neighbours(model, tok, query, position, pool, k=3)
    assert near.tokens[position] == "bank" and len(near.by_layer) == model.config.num_hidden_layers + 1
    for layer, row in enumerate(near.by_layer):
        assert [c for _, _, c in row] == sorted((c for _, _, c in row), reverse=True)
        # the token itself (its own sentence is in the pool) is left out: the other "bank" is its nearest
        assert not any(s == query and c > 0.9999 for _, s, c in row)
    assert near.by_layer[0][0][:2] == ("bank", "a bank by the river .")


def test_the_neighbour_pool_is_the_models_held_out_text_or_says_it_is_not():
    from bert_core.inspect.embeddings import builtin_pool, heldout_pool

    sentences, source = heldout_pool(None)
    assert (sentences, source) == builtin_pool() and "cannot be read here" in source
    sentences, source = heldout_pool({"heldout": {"seed": 0, "fraction": 0.1, "corpora": [{"spec": "toy"}]}},
                                     count=30)
    assert source == "held-out text of the toy grammar (generated)" and len(sentences) == 30
    assert all(6 <= len(s.split()) <= 30 for s in sentences)

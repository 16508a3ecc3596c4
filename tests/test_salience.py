"""Why a fine-tuned model decided (bert_core.inspect.salience): integrated gradients pass the
completeness check at the default step count, and a head switched off changes the answer exactly as the same head
zeroed in transformers does, for each kind of fine-tuned model (a label, a tag per word, an answer span)."""

import numpy as np
import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.inspect.kit import heads_off
from bert_core.inspect.salience import (BASELINE, FIRST_STEPS, GAP_LIMIT, MAX_STEPS, adaptive_integrated_gradients,
                                        baseline_vectors, explain, integrated_gradients, salience_panel_data)
from bert_core.model.bert import BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification
from bert_core.model.checkpoint import load_checkpoint
from bert_core.paths import DEFAULT_CHECKPOINT

SHIPPED = DEFAULT_CHECKPOINT.parent
TAGS = ["O", "B-NP", "I-NP"]
SENTENCE = "the film was a long , slow and rather dull story about a man who loves his old dog ."
QUESTION = "who loves his old dog ?"
INPUTS = {"labels": (SENTENCE, None), "tags": (SENTENCE, None), "spans": (QUESTION, SENTENCE)}


def _load(name: str):
    folder = SHIPPED / name
    if not (folder / "config.json").is_file():
        pytest.skip(f"{folder} is not in this checkout")
    return load_checkpoint(folder, require_tokenizer=True)


def _finetuned(ckpt, kind: str, seed: int = 0):
    """The shipped encoder under a fresh, seeded head of `kind` (what a race's model is before its steps)."""
    torch.manual_seed(seed)
    cfg = ckpt.model.config
    model = {"labels": lambda: BertForSequenceClassification(cfg, num_labels=2),
             "tags": lambda: BertForTokenClassification(cfg, num_labels=len(TAGS)),
             "spans": lambda: BertForQuestionAnswering(cfg)}[kind]()
    missing, _ = model.bert.load_state_dict(ckpt.model.bert.state_dict(), strict=False)
    assert all(m.startswith("pooler") for m in missing)
    return model.eval()


@pytest.fixture(scope="module", params=["bert-mini-english", "gpt-mini-english"])
def shipped(request):
    return request.param, _load(request.param)


@pytest.mark.parametrize("kind", ["labels", "tags", "spans"])
def test_attributions_add_up_to_the_change_from_the_baseline_at_the_default_steps(shipped, kind):
    name, ckpt = shipped
    for seed in (0, 1):
        model = _finetuned(ckpt, kind, seed)
        text, text_b = INPUTS[kind]
        e = explain(model, ckpt.tokenizer, kind, text, text_b, label_names=TAGS if kind == "tags" else None)
        for s in e.saliences:
            # The default: from FIRST_STEPS equal steps, refined where needed (never run out to the cap here).
            assert FIRST_STEPS <= s.steps < MAX_STEPS, (name, kind, seed)
            change = s.value - s.baseline_value
            assert abs(float(s.integrated.sum()) - change) <= 0.05 * max(abs(change), 0.01), (name, kind, seed)
            assert s.gap < 0.05
        assert len(e.saliences) == (2 if kind == "spans" else 1)


def _trapezoid_by_hand(model, tok, ids, types, target, points):
    """Integrated gradients by the trapezoid rule over `points` written out: one gradient per point, from the
    model's own embedding output with the path put in its place, nothing kept between points. Also each point's
    probability."""
    x, base = baseline_vectors(model, tok, ids, types)
    per_point, probability = [], []
    for alpha in points:
        point = (base + float(alpha) * (x - base))[None].clone().requires_grad_(True)
        handle = model.bert.embeddings.register_forward_hook(lambda m, a, out: point)
        try:
            out = model(ids, torch.ones_like(ids), types)
        finally:
            handle.remove()
        logits = getattr(out, target.output)
        logits = logits[:, target.position] if target.position is not None and logits.dim() == 3 else logits
        p = logits.softmax(-1)[0, target.index]
        g, = torch.autograd.grad(p, point)
        per_point.append(((x - base) * g[0]).sum(-1).detach().numpy())
        probability.append(float(p.detach()))
    c, w = np.stack(per_point), np.diff(np.asarray(points, dtype=np.float64))
    return (w[:, None] * (c[1:] + c[:-1]) / 2).sum(0), c.sum(-1), np.array(probability)


@pytest.mark.parametrize("kind", ["labels", "spans"])
def test_the_refined_steps_equal_the_trapezoid_written_out_and_meet_the_check_on_every_step(kind):
    ckpt = _load("bert-tiny-english")
    model, tok = _finetuned(ckpt, kind), ckpt.tokenizer
    text, text_b = INPUTS[kind]
    e = explain(model, tok, kind, text, text_b)
    enc = tok.encode_pair(text, text_b)
    ids, types = torch.tensor([enc["input_ids"]]), torch.tensor([enc["token_type_ids"]])
    targets = [s.target for s in e.saliences]
    refined = adaptive_integrated_gradients(model, tok, ids, types, targets, first=2)
    even = integrated_gradients(model, tok, ids, types, targets, 2)
    assert max(s.gap for s in even) > GAP_LIMIT   # two equal steps were not enough: the rule had work to do
    for s in refined:
        assert s.points[0] == 0 and s.points[-1] == 1 and np.all(np.diff(s.points) > 0) and len(s.points) == s.steps + 1
        assert len(set(np.round(np.diff(s.points), 9))) > 1   # refined unevenly, where the path bends
        integrated, slope, prob = _trapezoid_by_hand(model, tok, ids, types, s.target, s.points)
        np.testing.assert_allclose(s.integrated, integrated, rtol=1e-4, atol=1e-6)
        # The rule, checked from the written-out sum: each step's trapezoid of d f / d alpha against f's own change.
        w = np.diff(s.points)
        step_errors = np.abs(w * (slope[1:] + slope[:-1]) / 2 - np.diff(prob))
        change = max(abs(prob[-1] - prob[0]), 0.01)
        assert step_errors.sum() / change <= GAP_LIMIT * (1 + 1e-3) or s.steps >= MAX_STEPS
        assert s.gap <= step_errors.sum() / change + 1e-4   # the whole path's gap is within the steps' errors


def test_the_ends_of_the_path_are_the_models_own_probabilities():
    ckpt = _load("bert-mini-english")
    model, tok = _finetuned(ckpt, "labels"), ckpt.tokenizer
    e = explain(model, tok, "labels", SENTENCE)
    enc = tok.encode_pair(SENTENCE)
    ids, types = torch.tensor([enc["input_ids"]]), torch.tensor([enc["token_type_ids"]])
    with torch.no_grad():
        p = model(ids, torch.ones_like(ids), types).logits.softmax(-1)[0]
    label = int(p.argmax())
    assert e.saliences[0].target.index == label and e.answer == f"label {label}"
    assert e.saliences[0].value == pytest.approx(float(p[label]), abs=1e-6)
    # The baseline: [PAD] at every word, [CLS] and [SEP] kept, through the model's own embedding layer.
    x, base = baseline_vectors(model, tok, ids, types)
    pad_ids = torch.tensor([[tok.cls_id] + [tok.pad_id] * (len(ids[0]) - 2) + [tok.sep_id]])
    with torch.no_grad():
        assert torch.equal(x, model.bert.embeddings(ids, types)[0])
        assert torch.equal(base, model.bert.embeddings(pad_ids, types)[0])
        at_base = model(pad_ids, torch.ones_like(pad_ids), types).logits.softmax(-1)[0, label]
    assert e.saliences[0].baseline_value == pytest.approx(float(at_base), abs=1e-6)
    # [CLS] and [SEP] do not move along the path: no salience, either way.
    s = e.saliences[0]
    assert s.integrated[0] == 0 and s.integrated[-1] == 0 and s.gradient_x_input[0] == 0
    assert np.abs(s.integrated).max() > 0 and np.abs(s.gradient_x_input).max() > 0
    assert not model.training and all(p.grad is None for p in model.parameters())


def test_one_step_of_the_sum_is_the_gradient_times_the_input_difference():
    ckpt = _load("bert-tiny-english")
    model, tok = _finetuned(ckpt, "labels"), ckpt.tokenizer
    enc = tok.encode_pair("the dogs bark .")
    ids, types = torch.tensor([enc["input_ids"]]), torch.tensor([enc["token_type_ids"]])
    target = explain(model, tok, "labels", "the dogs bark .").saliences[0].target
    x, base = baseline_vectors(model, tok, ids, types)
    path = x.clone()[None].requires_grad_(True)
    handle = model.bert.embeddings.register_forward_hook(lambda m, a, out: path)
    try:
        p = model(ids, torch.ones_like(ids), types).logits.softmax(-1)[0, target.index]
        g, = torch.autograd.grad(p, path)
    finally:
        handle.remove()
    expected = ((x - base) * g[0]).sum(-1).detach().numpy()
    s = integrated_gradients(model, tok, ids, types, [target], steps=8)[0]
    np.testing.assert_allclose(s.gradient_x_input, expected, atol=1e-6)
    model.train()
    integrated_gradients(model, tok, ids, types, [target], steps=2)
    assert model.training   # its mode given back


def _zero_in_transformers(ref, layer: int, head: int, d: int) -> None:
    """transformers' old head_mask of 0 multiplied a head's attention probabilities by 0, so its context was 0:
    here by zeroing that head's value projection (weights and bias), a path our hooks never touch."""
    value = ref.bert.encoder.layer[layer].attention.self.value
    value.weight[head * d:(head + 1) * d] = 0
    value.bias[head * d:(head + 1) * d] = 0


@pytest.mark.parametrize("kind", ["labels", "tags", "spans"])
def test_a_zeroed_head_changes_the_answer_as_the_same_head_zeroed_in_transformers(kind):
    transformers = pytest.importorskip("transformers")
    ckpt = _load("bert-mini-english")
    model, tok = _finetuned(ckpt, kind), ckpt.tokenizer
    text, text_b = INPUTS[kind]
    e = explain(model, tok, kind, text, text_b, label_names=TAGS if kind == "tags" else None)
    cls = {"labels": transformers.BertForSequenceClassification, "tags": transformers.BertForTokenClassification,
           "spans": transformers.BertForQuestionAnswering}[kind]
    hf_config = transformers.BertConfig(**model.config.to_hf_dict(), num_labels=2 if kind != "tags" else len(TAGS))
    cfg = model.config
    enc = (tok.encode_pair(text, text_b) if kind != "tags" else
           {"input_ids": [tok.token_to_id(t) for t in e.tokens], "token_type_ids": [0] * len(e.tokens)})
    ids, types = torch.tensor([enc["input_ids"]]), torch.tensor([enc["token_type_ids"]])
    assert tok.convert_ids_to_tokens(ids[0].tolist()) == e.tokens
    targets = e.saliences
    for layer, head in [(0, 0), (1, 2), (cfg.num_hidden_layers - 1, cfg.num_attention_heads - 1)]:
        ref = cls(hf_config).eval()
        ref.config._attn_implementation = "eager"
        missing, unexpected = ref.load_state_dict(model.state_dict(), strict=False)
        assert not unexpected and all("pooler" in m for m in missing)
        with torch.no_grad():
            _zero_in_transformers(ref, layer, head, cfg.head_dim)
            out = ref(input_ids=ids, token_type_ids=types)
        if kind == "spans":
            start, end = (s.target for s in targets)
            p = (out.start_logits.softmax(-1)[0, start.index] * out.end_logits.softmax(-1)[0, end.index])
        else:
            t = targets[0].target
            logits = out.logits[0] if t.position is None else out.logits[0, t.position]
            p = logits.softmax(-1)[t.index]
        assert e.heads.before + float(e.heads.change[layer, head]) == pytest.approx(float(p), abs=1e-5), (layer, head)
    assert np.abs(e.heads.change).max() > 1e-4   # switching heads off did something


def test_the_grid_is_the_heads_switched_off_one_at_a_time_for_the_gpt_twin():
    ckpt = _load("gpt-mini-english")   # its classifier reads the last token: no transformers class does that
    model, tok = _finetuned(ckpt, "labels"), ckpt.tokenizer
    e = explain(model, tok, "labels", SENTENCE)
    enc = tok.encode_pair(SENTENCE)
    ids, types = torch.tensor([enc["input_ids"]]), torch.tensor([enc["token_type_ids"]])
    label = e.saliences[0].target.index
    for layer, head in [(0, 1), (3, 3)]:
        with heads_off(model, [(layer, head)]), torch.no_grad():
            p = model(ids, torch.ones_like(ids), types).logits.softmax(-1)[0, label]
        assert e.heads.before + float(e.heads.change[layer, head]) == pytest.approx(float(p), abs=1e-5)


def test_a_tagger_explains_the_chosen_word_at_its_first_piece():
    ckpt = _load("bert-mini-english")
    model, tok = _finetuned(ckpt, "tags"), ckpt.tokenizer
    e = explain(model, tok, "tags", "the unbelievably old dog sleeps", word=1, label_names=TAGS)
    assert e.words == ["the", "unbelievably", "old", "dog", "sleeps"] and e.word == 1
    t = e.saliences[0].target
    assert e.tokens[t.position] == tok.convert_ids_to_tokens(tok.encode("unbelievably"))[0]
    assert t.label in TAGS and "“unbelievably”" in t.name


@pytest.mark.parametrize("kind, text, text_b, word, message", [
    ("labels", "  ", None, None, "type a sentence"),
    ("tags", "", None, None, "type a sentence"),
    ("tags", "the dog", None, 5, "word 5 does not exist"),
    ("spans", "who ?", " ", None, "passage"),
    ("stories", "a", None, None, "must be one of"),
])
def test_bad_input_is_refused_in_words(kind, text, text_b, word, message):
    ckpt = _load("bert-tiny-english")
    model = _finetuned(ckpt, kind if kind in ("labels", "tags", "spans") else "labels")
    with pytest.raises(BertCoreError, match=message):
        explain(model, ckpt.tokenizer, kind, text, text_b, word=word, label_names=TAGS if kind == "tags" else None)
    with pytest.raises(BertCoreError, match="needs a BertForQuestionAnswering"):
        explain(_finetuned(ckpt, "labels"), ckpt.tokenizer, "spans", "who ?", "tom .")


def test_the_panel_draws_the_explanations_numbers_and_names_baseline_and_steps():
    ckpt = _load("bert-mini-english")
    for kind in ("labels", "spans"):
        model = _finetuned(ckpt, kind)
        text, text_b = INPUTS[kind]
        panel = salience_panel_data(model, ckpt.tokenizer, kind, text, text_b)
        e = panel.explanation
        assert [k for k, _, _ in panel.figures] == ["salience", "salience-heads"]
        (_, bars, caption), (_, grid, grid_caption) = panel.figures
        n = e.saliences[0].steps
        assert BASELINE in caption and (f"{n} equal steps (enough" in caption if n == FIRST_STEPS else
                                        f"{n} steps ({FIRST_STEPS} equal ones" in caption)
        assert e.heads.name in grid_caption
        ig = [t for t in bars.data if t.name == "integrated gradients"]
        assert len(ig) == len(e.saliences)
        np.testing.assert_allclose(ig[0].x, e.saliences[0].integrated)
        assert ig[0].y[0] == f"1 {e.tokens[0]}"
        np.testing.assert_allclose(grid.data[0].z, e.heads.change * 100, rtol=1e-6)
        assert "**" in panel.summary

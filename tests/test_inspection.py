"""inspection.py against Hugging Face transformers run on the same weights, plus the head measures on known maps."""

import numpy as np
import pytest
import torch

from bert_core.config import BertConfig
from bert_core.errors import BertCoreError
from bert_core.hf import save_pretrained
from bert_core.inspection import (
    AttentionResult,
    attention_maps,
    decision_counts,
    encode_input,
    fill_mask,
    head_summaries,
    hide_special_tokens,
    masking_rows,
    predict_nsp,
    unigram_counts,
    unigram_top_k,
)
from bert_core.model import BertForPreTraining
from bert_core.tokenization import train_tokenizer

SENTENCES = [
    "the cat sat on the mat", "the dog ate the bone", "a bird flew over the house",
    "the children played in the garden", "my sister reads a book every night",
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(SENTENCES * 20, vocab_size=120, min_frequency=1)


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    config = BertConfig.preset("nano", vocab_size=tokenizer.vocab_size, max_position_embeddings=32)
    return BertForPreTraining(config).eval()


@pytest.fixture(scope="module")
def hf_model(model, tokenizer, tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("ckpt")
    save_pretrained(model, folder, tokenizer=tokenizer)
    return transformers.BertForPreTraining.from_pretrained(folder, attn_implementation="eager").eval()


def test_fill_mask_matches_transformers_probabilities(model, tokenizer, hf_model):
    text = "the [MASK] sat on the [mask]"
    preds = fill_mask(model, tokenizer, text, top_k=4)
    enc = encode_input(tokenizer, text, max_length=32)
    with torch.no_grad():
        logits = hf_model(input_ids=torch.tensor([enc.input_ids]),
                          token_type_ids=torch.tensor([enc.token_type_ids])).prediction_logits[0]
    assert [p.position for p in preds] == [2, 6]
    for pred in preds:
        probs = torch.softmax(logits[pred.position], -1)
        ref_p, ref_i = probs.topk(4)
        assert [t for t, _ in pred.candidates] == tokenizer.convert_ids_to_tokens(ref_i.tolist())
        np.testing.assert_allclose([p for _, p in pred.candidates], ref_p.numpy(), atol=1e-5)


def test_predict_nsp_matches_transformers(model, tokenizer, hf_model):
    p = predict_nsp(model, tokenizer, "the cat sat on the mat", "the dog ate the bone")
    enc = tokenizer.encode_pair("the cat sat on the mat", "the dog ate the bone", max_length=32)
    with torch.no_grad():
        logits = hf_model(input_ids=torch.tensor([enc["input_ids"]]),
                          token_type_ids=torch.tensor([enc["token_type_ids"]])).seq_relationship_logits[0]
    assert p == pytest.approx(float(torch.softmax(logits, -1)[0]), abs=1e-5)
    assert 0.0 < p < 1.0


def test_attention_maps_match_transformers(model, tokenizer, hf_model):
    result = attention_maps(model, tokenizer, "the cat sat", "the dog ate the bone")
    enc = tokenizer.encode_pair("the cat sat", "the dog ate the bone", max_length=32)
    assert result.tokens == tokenizer.convert_ids_to_tokens(enc["input_ids"])
    assert result.token_type_ids == enc["token_type_ids"]
    with torch.no_grad():
        ref = hf_model(input_ids=torch.tensor([enc["input_ids"]]), token_type_ids=torch.tensor([enc["token_type_ids"]]),
                       output_attentions=True).attentions
    ref = torch.stack([a[0] for a in ref]).numpy()
    assert result.attentions.shape == ref.shape == (2, 2, len(result.tokens), len(result.tokens))
    np.testing.assert_allclose(result.attentions, ref, atol=1e-5)
    assert result.special_mask[0] and result.special_mask[4] and not result.special_mask[1]


def test_encode_input_truncates_like_encode_pair_and_says_so(tokenizer):
    a = " ".join(["the cat sat on the mat"] * 10)
    b = "the dog ate the bone"
    enc = encode_input(tokenizer, a, b, max_length=20)
    ref = tokenizer.encode_pair(a, b, max_length=20)
    assert enc.input_ids == ref["input_ids"] and enc.token_type_ids == ref["token_type_ids"]
    assert enc.truncated and enc.dropped_tokens == len(tokenizer.encode(a)) + len(tokenizer.encode(b)) - 17
    short = encode_input(tokenizer, "the cat", max_length=20)
    assert not short.truncated and short.dropped_tokens == 0


def test_text_longer_than_positions_is_truncated_not_an_error(model, tokenizer):
    text = "the [MASK] sat " + " ".join(["on the mat"] * 40)
    preds = fill_mask(model, tokenizer, text, top_k=3)
    assert len(preds) == 1 and preds[0].position == 2
    result = attention_maps(model, tokenizer, text)
    assert result.truncated and len(result.tokens) == 32


@pytest.mark.parametrize("text, message", [
    ("the cat sat", "no [MASK]"),
    ("   ", "empty"),
    ("the cat " + "on the mat " * 40 + "[MASK]", "cut off"),
])
def test_fill_mask_bad_text_raises_a_helpful_error(model, tokenizer, text, message):
    with pytest.raises(BertCoreError, match=message.replace("[", r"\[").replace("]", r"\]")):
        fill_mask(model, tokenizer, text)


def test_predict_nsp_needs_two_sentences(model, tokenizer):
    with pytest.raises(BertCoreError, match="sentence B is empty"):
        predict_nsp(model, tokenizer, "the cat sat", " ")


def _result(att: np.ndarray, tokens: list[str]) -> AttentionResult:
    return AttentionResult(tokens=tokens, attentions=att[None, None].astype(np.float32),
                           token_type_ids=[0] * len(tokens),
                           special_mask=[t in ("[CLS]", "[SEP]") for t in tokens])


TOKENS = ["[CLS]", "the", "cat", "sat", "[SEP]"]


def test_head_summary_labels_identity_previous_cls_and_uniform_heads():
    n = len(TOKENS)
    prev = np.zeros((n, n))
    prev[0, 0] = 1
    for i in range(1, n):
        prev[i, i - 1] = 1
    cls = np.zeros((n, n))
    cls[:, 0] = 1
    cases = {"self": np.eye(n), "previous": prev, "[CLS]": cls}
    for name, att in cases.items():
        (s,) = head_summaries(_result(att, TOKENS))
        assert s.label == f"{name} 100%"
        assert s.measures[name] == pytest.approx(1.0)
    (u,) = head_summaries(_result(np.full((n, n), 1 / n), TOKENS))
    assert u.label == "broad"
    assert u.entropy == pytest.approx(np.log2(n)) and u.normalized_entropy == pytest.approx(1.0)
    assert u.to_cls == pytest.approx(1 / n) and u.to_sep == pytest.approx(1 / n)


def test_hide_special_tokens_drops_specials_and_renormalises_rows():
    rng = np.random.default_rng(0)
    att = rng.random((len(TOKENS), len(TOKENS)))
    att[2] = [0.5, 0, 0, 0, 0.5]            # a row that only looks at specials
    att /= att.sum(-1, keepdims=True)
    hidden = hide_special_tokens(_result(att, TOKENS))
    assert hidden.tokens == ["the", "cat", "sat"] and hidden.specials_hidden
    np.testing.assert_allclose(hidden.attentions.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(hidden.attentions[0, 0, 1], [1 / 3] * 3, atol=1e-6)
    row = att[1, 1:4] / att[1, 1:4].sum()
    np.testing.assert_allclose(hidden.attentions[0, 0, 0], row, atol=1e-6)


def test_unigram_top_k_is_most_frequent_non_special_tokens(tokenizer):
    ids = [tokenizer.encode(s) for s in SENTENCES] + [[tokenizer.cls_id, tokenizer.sep_id]]
    counts = unigram_counts(ids, tokenizer.special_ids)
    top = unigram_top_k(counts, tokenizer, top_k=2)
    assert top[0][0] == "the"
    assert top[0][1] == pytest.approx(counts[tokenizer.token_to_id("the")] / sum(counts.values()))
    assert tokenizer.cls_id not in counts


def test_masking_rows_and_decision_counts(tokenizer):
    ids = [tokenizer.cls_id, *tokenizer.encode("the cat sat"), tokenizer.sep_id]
    masked = list(ids)
    masked[1] = tokenizer.mask_id
    masked[2] = tokenizer.token_to_id("dog")
    decisions = [0, 1, 2, 3, 0]
    rows = masking_rows(tokenizer, ids, [0] * 5, masked, decisions)
    assert [r.decision for r in rows] == ["not chosen", "[MASK]", "random", "kept", "not chosen"]
    assert rows[2].token == "cat" and rows[2].shown == "dog"
    counts = decision_counts(torch.tensor([decisions]), special_mask=torch.tensor([[1, 0, 0, 0, 1]]))
    assert counts["candidates"] == 3 and counts["chosen"] == 3
    assert counts["masked_share"] == pytest.approx(1 / 3)


def test_masking_stats_meet_bert_targets_over_many_instances(tokenizer):
    from bert_core.inspection import mask_example, masking_stats

    ids = [tokenizer.cls_id, *tokenizer.encode(" ".join(SENTENCES)), tokenizer.sep_id]
    stats = masking_stats(tokenizer, [ids] * 400, seed=3, mask_rate=0.15)
    assert stats["candidates"] == 400 * (len(ids) - 2)
    assert stats["chosen_share"] == pytest.approx(0.15, abs=0.01)
    assert stats["masked_share"] == pytest.approx(0.8, abs=0.03)
    assert stats["random_share"] == pytest.approx(0.1, abs=0.03)
    rows = mask_example(tokenizer, ids, [0] * len(ids), seed=3, mask_rate=0.3)
    assert rows[0].decision == rows[-1].decision == "not chosen"
    assert rows == mask_example(tokenizer, ids, [0] * len(ids), seed=3, mask_rate=0.3)
    for r in rows:
        if r.decision == "[MASK]":
            assert r.shown == "[MASK]"
        elif r.decision == "random":
            assert r.shown_id not in tokenizer.special_ids
        else:
            assert r.shown == r.token


def test_word_pieces_group_into_words_and_a_picked_word_is_masked_whole():
    from bert_core.inspection import context_before, group_word_pieces, text_with_word_masked, word_text

    pieces = ["the", "play", "##ing", "##s", "cat", "##s", "ran"]
    words = group_word_pieces(pieces)
    assert words == [["the"], ["play", "##ing", "##s"], ["cat", "##s"], ["ran"]]
    assert group_word_pieces(["##x", "y"]) == [["##x"], ["y"]]  # a leading continuation starts a word
    assert word_text(words[1]) == "playings"
    assert text_with_word_masked(words, 1) == "the [MASK] [MASK] [MASK] cats ran"
    tokens = ["[CLS]", "a", "b", "##c", "d", "e", "f", "[MASK]", "[SEP]"]
    assert context_before(tokens, 7) == "bc d e f ___"
    assert context_before(tokens, 2) == "a ___"

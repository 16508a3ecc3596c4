"""inspection.py against Hugging Face transformers run on the same weights, plus the head measures on known maps."""

import dataclasses
from collections import Counter

import numpy as np
import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.inspect.inspection import (
    AttentionResult,
    attention_maps,
    decision_counts,
    encode_input,
    fill_mask,
    head_summaries,
    hide_special_tokens,
    masking_rows,
    predict_nsp,
    unigram_top_k,
)
from bert_core.model.bert import BertForPreTraining
from bert_core.model.config import BertConfig
from bert_core.model.hf import save_pretrained
from bert_core.model.tokenization import train_tokenizer

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
    # 44% of each row on [SEP], the rest on one other token each: named, not "mixed" (issue #29).
    sep = np.zeros((n, n))
    sep[:, 4] = 0.44
    for i in range(n):
        sep[i, (i + 2) % 4] += 0.56
    (leaning,) = head_summaries(_result(sep, TOKENS))
    assert leaning.label == "leans [SEP] 44%", leaning.label
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
    counts = Counter(i for row in ids for i in row if i not in tokenizer.special_ids)   # as a run's token counts
    top = unigram_top_k(counts, tokenizer, top_k=2)
    assert top[0][0] == "the"
    assert top[0][1] == pytest.approx(counts[tokenizer.token_to_id("the")] / sum(counts.values()))


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
    from bert_core.inspect.inspection import mask_example, masking_stats

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
    from bert_core.inspect.inspection import context_before, group_word_pieces, text_with_word_masked, word_text

    pieces = ["the", "play", "##ing", "##s", "cat", "##s", "ran"]
    words = group_word_pieces(pieces)
    assert words == [["the"], ["play", "##ing", "##s"], ["cat", "##s"], ["ran"]]
    assert group_word_pieces(["##x", "y"]) == [["##x"], ["y"]]  # a leading continuation starts a word
    assert word_text(words[1]) == "playings"
    assert text_with_word_masked(words, 1) == "the [MASK] [MASK] [MASK] cats ran"
    tokens = ["[CLS]", "a", "b", "##c", "d", "e", "f", "[MASK]", "[SEP]"]
    assert context_before(tokens, 7) == "bc d e f ___"
    assert context_before(tokens, 2) == "a ___"


# ---------------------------------------------------------------------------------------------- probe sentences


def _probe_words(sentence: str) -> set[str]:
    return {w.strip(".,!?;:").lower() for w in sentence.replace("[MASK]", " ").split() if w.strip(".,!?;:")}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_toy_probes_are_held_out_story_sentences_with_a_content_word_masked(seed):
    from bert_core.data.corpora import generate_toy_corpus, split_heldout
    from bert_core.inspect.probes import STOPWORDS, probes_for_corpus
    from tests.toy_words import toy_vocabulary

    probes = probes_for_corpus("toy", seed)
    assert len(probes.sentences) == 4 and len(set(probes.sentences)) == 4
    _, held = split_heldout(generate_toy_corpus(seed=seed), fraction=0.1, seed=seed)
    held_sentences = {s for d in held.documents for s in d}
    masked = []
    for probe in probes.sentences:
        assert probe.count("[MASK]") == 1
        assert _probe_words(probe) <= toy_vocabulary()
        # Exactly one held-out sentence gives this probe with one word put back.
        originals = [s for s in held_sentences if len(s.split()) == len(probe.split()) and all(
            a == b or "[MASK]" in b for a, b in zip(s.split(), probe.split()))]
        assert originals, probe
        word = next(a for a, b in zip(originals[0].split(), probe.split()) if "[MASK]" in b).strip(".,")
        assert word.islower() and word not in STOPWORDS and len(word) >= 3
        masked.append(word)
    assert len(set(masked)) >= 3  # not the same blank four times
    assert probes.attention_sentence in held_sentences and "[MASK]" not in probes.attention_sentence
    a, b = probes.pair
    assert any(a in d and d.index(a) + 1 < len(d) and d[d.index(a) + 1] == b for d in held.documents)
    assert probes_for_corpus("toy", seed) == probes  # seeded


def test_probes_are_drawn_again_from_a_recorded_corpus_and_kept_when_recorded():
    from bert_core.errors import BertCoreError
    from bert_core.inspect.probes import ENGLISH_PROBES, CorpusProbes, probes_for_corpus, recorded_probes

    toy = {"heldout": {"seed": 1, "fraction": 0.1, "corpora": [{"spec": "toy"}]}}
    assert recorded_probes(toy).sentences == probes_for_corpus("toy", 1).sentences
    assert recorded_probes({"corpora": ["toy"]}).sentences == probes_for_corpus("toy", 0).sentences
    mine = CorpusProbes(("my [MASK] .",), "my sentence .", ("a .", "b ."), "typed")
    assert recorded_probes({"probes": dataclasses.asdict(mine), **toy}) == mine
    assert recorded_probes({"probes": {"sentences": ["no blank"]}, **toy}).sentences != ("no blank",)
    assert recorded_probes({}) is None and recorded_probes({"corpora": ["not-a-corpus-anywhere"]}) is None
    with pytest.raises(BertCoreError):
        CorpusProbes.from_dict({"sentences": [], "attention_sentence": "x", "pair": ["a", "b"]})
    assert ENGLISH_PROBES.sentences and all("[MASK]" in s for s in ENGLISH_PROBES.sentences)


def test_a_public_server_never_reads_a_file_that_a_checkpoint_names(tmp_path):
    from bert_core.inspect.probes import readable_offline, recorded_probes

    secret = tmp_path / "secret.txt"
    secret.write_text("The quiet banker hides the golden coins under the wooden floor every night.\n\n" * 30)
    meta = {"corpora": [str(secret)]}
    assert readable_offline(str(secret)) and not readable_offline(str(secret), allow_paths=False)
    assert recorded_probes(meta, allow_paths=False) is None
    assert recorded_probes(meta, allow_paths=True) is not None


def test_a_run_draws_the_probes_the_train_page_shows_before_start():
    from bert_core.inspect.probes import probes_for_corpus
    from bert_core.serve import jobs

    spec = jobs.TrainSpec(corpus="toy", vocab_size=300, preset="nano",
                          train=dict(max_steps=1, batch_size=2, max_seq_length=32, seed=2, device="cpu"))
    trainer = jobs.build_trainer(spec)
    drawn = probes_for_corpus("toy", 2)
    assert tuple(trainer.probes.sentences) == drawn.sentences
    assert trainer.probes.attention_sentence == drawn.attention_sentence
    assert trainer.metadata["probes"]["sentences"] == list(drawn.sentences)
    typed = jobs.TrainSpec(**{**spec.__dict__, "probe_sentences": ("my [MASK] .",), "attention_probe": "my cat ."})
    trainer = jobs.build_trainer(typed)
    assert trainer.probes.sentences == ["my [MASK] ."] and trainer.probes.attention_sentence == "my cat ."

"""Generation with a causal model: seeded and repeatable, greedy is the argmax continuation, and each kind of model
refuses, with its reason, what only the other kind can do."""

import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.inspect.generation import STOP_END, STOP_LENGTH, STOP_POSITIONS, generate
from bert_core.inspect.inspection import BIDIRECTIONAL_CANNOT_CONTINUE, CAUSAL_CANNOT_FILL, fill_mask, predict_nsp
from bert_core.model.bert import BertForPreTraining, BertLMHeadModel
from bert_core.model.config import BertConfig


@pytest.fixture(scope="module")
def tok():
    from bert_core.data.corpora import generate_toy_corpus
    from bert_core.model.tokenization import train_tokenizer

    return train_tokenizer(generate_toy_corpus(num_documents=30, seed=0).texts(), vocab_size=200)


@pytest.fixture(scope="module")
def gpt(tok):
    torch.manual_seed(0)
    model = BertLMHeadModel(BertConfig.preset("nano", vocab_size=tok.vocab_size, attention="causal",
                                              max_position_embeddings=40)).eval()
    with torch.no_grad():  # a spread-out untrained model: sampling then has real choices to make
        model.bert.embeddings.word_embeddings.weight.mul_(20)
    return model


def test_the_same_seed_gives_the_same_text_and_another_seed_another(gpt, tok):
    runs = [generate(gpt, tok, "the dog", max_new_tokens=12, strategy="sample", temperature=1.5, seed=s)
            for s in (7, 7, 8)]
    assert runs[0].token_ids == runs[1].token_ids and runs[0].text == runs[1].text
    assert runs[0].token_ids != runs[2].token_ids
    # The probabilities recorded are those of the tokens drawn, among the alternatives shown.
    for step in runs[0].steps:
        assert 0 < step.probability <= 1
        assert [p for _, p in step.alternatives] == sorted((p for _, p in step.alternatives), reverse=True)


def test_greedy_is_the_argmax_continuation(gpt, tok):
    out = generate(gpt, tok, "the dog", max_new_tokens=6)
    ids = [tok.cls_id, *tok.encode("the dog")]
    banned = {tok.pad_id, tok.cls_id, tok.mask_id}
    with torch.no_grad():
        for step in out.steps:
            logits = gpt(torch.tensor([ids])).mlm_logits[0, -1]
            logits[list(banned)] = float("-inf")
            best = int(logits.argmax())
            assert step.token_id == best
            assert step.alternatives[0][0] == step.token
            assert step.probability == pytest.approx(float(torch.softmax(logits, -1)[best]), abs=1e-6)
            ids.append(best)
    assert out.stopped in (STOP_LENGTH, STOP_END)
    assert out.prompt_tokens[0] == "[CLS]"


def test_top_k_one_samples_the_greedy_text(gpt, tok):
    greedy = generate(gpt, tok, "a cat", max_new_tokens=5)
    sampled = generate(gpt, tok, "a cat", max_new_tokens=5, strategy="sample", top_k=1, seed=3)
    assert sampled.token_ids == greedy.token_ids
    assert all(s.probability == 1.0 for s in sampled.steps)


def test_generation_stops_at_the_last_position_and_cuts_a_long_prompt(gpt, tok):
    out = generate(gpt, tok, " ".join(["the dog saw a cat ."] * 20), max_new_tokens=5)
    assert out.truncated_prompt > 0
    assert len(out.prompt_tokens) + len(out.steps) <= 40
    assert out.stopped in (STOP_POSITIONS, STOP_END) or len(out.steps) == 5


@pytest.mark.parametrize("kwargs, words", [
    (dict(strategy="beam"), "strategy"),
    (dict(strategy="sample", temperature=0), "temperature"),
    (dict(top_k=-1), "top-k"),
    (dict(max_new_tokens=0), "new tokens"),
])
def test_bad_settings_are_refused_by_name(gpt, tok, kwargs, words):
    with pytest.raises(BertCoreError, match=words):
        generate(gpt, tok, "the dog", **kwargs)
    with pytest.raises(BertCoreError, match="empty"):
        generate(gpt, tok, "   ")


def test_each_kind_refuses_what_only_the_other_can_do_and_says_why(gpt, tok):
    bert = BertForPreTraining(BertConfig.preset("nano", vocab_size=tok.vocab_size)).eval()
    with pytest.raises(BertCoreError) as e:
        generate(bert, tok, "the dog")
    assert str(e.value) == BIDIRECTIONAL_CANNOT_CONTINUE and "both sides" in str(e.value)
    with pytest.raises(BertCoreError) as e:
        fill_mask(gpt, tok, "the [MASK] sat .")
    assert str(e.value) == CAUSAL_CANNOT_FILL and "before it" in str(e.value)
    with pytest.raises(BertCoreError, match="no next-sentence head"):
        predict_nsp(gpt, tok, "the dog sat .", "the cat ran .")

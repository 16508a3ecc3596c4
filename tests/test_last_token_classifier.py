"""GPT-style classification: a causal model's classifier reads the last real token, not [CLS] (which, under
causal attention, sees only itself). Against transformers' causal BertModel, number for number; the reading is
saved with the classifier and chosen by itself for a causal checkpoint, in `finetune` too."""

import json

import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.model.bert import (
    CLS_POOLING,
    LAST_TOKEN_POOLING,
    BertForSequenceClassification,
    BertLMHeadModel,
    last_token_positions,
)
from bert_core.model.config import BertConfig
from bert_core.model.hf import load_pretrained, save_pretrained
from bert_core.model.tokenization import train_tokenizer
from bert_core.training.finetune import classifier_from_checkpoint
from bert_core.training.finetune_tasks import SentenceLabels
from bert_core.data.classification_data import toy_topic_task
from tests.test_causal import CONFIGS, assert_close, nudge, padded_batch

transformers = pytest.importorskip("transformers")


def causal(**changes) -> BertConfig:
    return BertConfig(**{**CONFIGS[0], **changes}, attention="causal")


def test_the_reading_follows_the_kind_of_model_and_a_causal_classifier_has_no_pooler():
    gpt = BertForSequenceClassification(causal(), 3)
    bert = BertForSequenceClassification(BertConfig(**CONFIGS[0]), 3)
    assert gpt.pooling == LAST_TOKEN_POOLING and gpt.bert.pooler is None
    assert not any(k.startswith("bert.pooler.") for k in gpt.state_dict())
    assert bert.pooling == CLS_POOLING and bert.bert.pooler is not None
    assert BertForSequenceClassification(causal(), 3, pooling=CLS_POOLING).bert.pooler is not None
    with pytest.raises(BertCoreError, match="pooling must be 'cls' or 'last' or 'mean'"):
        BertForSequenceClassification(causal(), 3, pooling="max")


def test_last_token_positions_skip_padding_wherever_it_sits():
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 0, 0]])
    assert last_token_positions(mask).tolist() == [3, 1, 3, 0]


def test_last_token_logits_match_transformers_causal_encoder_on_padded_batches():
    config = causal()
    torch.manual_seed(0)
    ours = BertForSequenceClassification(config, 4).eval()
    nudge(ours)
    ref = transformers.BertModel(transformers.BertConfig(**CONFIGS[0], is_decoder=True),
                                 add_pooling_layer=False).eval()
    ref.config._attn_implementation = "eager"
    missing, unexpected = ref.load_state_dict({k[len("bert."):]: v for k, v in ours.state_dict().items()
                                               if k.startswith("bert.")}, strict=False)
    assert not missing and not unexpected
    inputs, _ = padded_batch(config)
    lengths = inputs["attention_mask"].sum(1)
    with torch.no_grad():
        logits = ours(**inputs).logits
        hidden = ref(**inputs).last_hidden_state
        expected = ours.classifier(hidden[torch.arange(3), lengths - 1])
    assert_close(logits, expected)


def test_under_causal_attention_cls_sees_only_itself_and_the_last_token_sees_the_sentence():
    torch.manual_seed(1)
    cls_reader = BertForSequenceClassification(causal(), 2, pooling=CLS_POOLING).eval()
    last_reader = BertForSequenceClassification(causal(), 2).eval()
    last_reader.bert.load_state_dict(cls_reader.bert.state_dict(), strict=False)
    a = torch.tensor([[2, 10, 11, 12, 3]])
    b = torch.tensor([[2, 40, 41, 42, 3]])  # the same frame, other words
    with torch.no_grad():
        assert torch.equal(cls_reader(a).logits, cls_reader(b).logits)  # why GPT cannot classify from [CLS]
        assert not torch.allclose(last_reader(a).logits, last_reader(b).logits)
        padded = torch.tensor([[2, 10, 11, 12, 3, 0, 0]])
        mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0]])
        assert_close(last_reader(padded, mask).logits, last_reader(a).logits)


def test_a_last_token_classifier_saves_its_reading_and_loads_back_with_the_same_logits(tmp_path):
    torch.manual_seed(2)
    model = BertForSequenceClassification(causal(), 3).eval()
    save_pretrained(model, tmp_path, label_names=["a", "b", "c"])
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["classifier_pooling"] == "last" and raw["is_decoder"] is True
    back = load_pretrained(tmp_path, BertForSequenceClassification)
    assert back.pooling == LAST_TOKEN_POOLING and back.missing_keys == []
    ids = torch.tensor([[2, 10, 11, 3, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    with torch.no_grad():
        assert torch.equal(back(ids, mask).logits, model(ids, mask).logits)
    # What README says: transformers' BertForSequenceClassification reads [CLS] through a pooler this folder lacks.
    _, info = transformers.BertForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert sorted(info["missing_keys"]) == ["bert.pooler.dense.bias", "bert.pooler.dense.weight"]


def test_a_classifier_from_a_causal_checkpoint_reads_the_last_token_with_all_its_weights(tmp_path):
    texts = toy_topic_task(seed=0, num_examples=60).texts
    tokenizer = train_tokenizer(texts, vocab_size=200)
    torch.manual_seed(3)
    gpt = BertLMHeadModel(causal(vocab_size=tokenizer.vocab_size))
    save_pretrained(gpt, tmp_path, tokenizer=tokenizer)
    from_folder, _ = classifier_from_checkpoint(tmp_path, 4, seed=0)
    data = toy_topic_task(seed=0, num_examples=60)
    from_model = SentenceLabels(data, data).head_from_model(gpt, seed=0)
    for clf in (from_folder, from_model):
        assert clf.pooling == LAST_TOKEN_POOLING
        for name, value in gpt.bert.state_dict().items():
            assert torch.equal(clf.bert.state_dict()[name], value), name
    assert from_folder.missing_keys == ["classifier.weight", "classifier.bias"]
